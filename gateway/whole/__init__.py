"""Whole audio through the pools, for the file endpoints and the WebSocket offline mode:
long audio cut at pauses and decoded in segments, the VAD's answers read, the speakers."""
