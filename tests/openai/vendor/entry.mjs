// The bundle's entry: OpenAI's client and its browser realtime client, as the page imports them.
export { OpenAI } from "openai";
export { OpenAIRealtimeWebSocket } from "openai/realtime/websocket";
