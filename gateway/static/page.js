// The page: the microphone, 16 kHz s16le from an AudioWorklet, streamed over the gateway's
// WebSocket (FunASR's protocol); results shown as they arrive. And a file sent to
// POST /v1/transcribe. No dependencies, no build step.

const TARGET_RATE = 16000;
const CHUNK_SIZE = [5, 10, 5]; // in 60 ms units: a 600 ms chunk, 300 ms each side
const CHUNK_INTERVAL = 10;
const FRAME_SAMPLES = (TARGET_RATE * 0.06 * CHUNK_SIZE[1]) / CHUNK_INTERVAL; // 960: 60 ms
const STOP_TIMEOUT_MS = 2000; // for the worklet's last frame
const FINAL_TIMEOUT_MS = 60000; // offline decoding of a long recording takes a while

const $ = (id) => document.getElementById(id);
const ui = {
  apiKey: $("api-key"),
  modes: document.querySelectorAll('input[name="mode"]'),
  start: $("start"),
  stop: $("stop"),
  clear: $("clear"),
  status: $("status"),
  samplesSent: $("samples-sent"),
  capturedSeconds: $("captured-seconds"),
  inputRate: $("input-rate"),
  resultsReceived: $("results-received"),
  transcript: $("transcript"),
  fileForm: $("file-form"),
  file: $("file"),
  transcribe: $("transcribe"),
  fileStatus: $("file-status"),
  fileResult: $("file-result"),
};

function setStatus(element, text, kind = "info") {
  element.textContent = text;
  element.dataset.kind = kind;
}

// Partials (online, 2pass-online: deltas) grow the current line; a settled sentence
// (offline, 2pass-offline: the whole sentence) replaces that line's partials.
class Transcript {
  constructor(element) {
    this.element = element;
    this.current = null;
  }

  partial(delta) {
    if (!delta) return;
    if (this.current === null) {
      this.current = document.createElement("p");
      this.current.className = "partial";
      this.element.append(this.current);
    }
    this.current.textContent += delta;
  }

  sentence(text) {
    const line = this.current ?? document.createElement("p");
    this.current = null;
    if (!text) {
      line.remove();
      return;
    }
    line.className = "final";
    line.textContent = text;
    this.element.append(line); // no-op for the current line, which is already last
  }

  endLine() {
    if (this.current !== null) this.current.className = "final";
    this.current = null;
  }

  clear() {
    this.element.replaceChildren();
    this.current = null;
  }
}

const transcript = new Transcript(ui.transcript);

function socketUrl(key) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${scheme}//${location.host}/`;
  // Browsers cannot set headers on a WebSocket handshake: the key goes in the query, and
  // only `shown` (without it) goes on the page.
  return { shown: url, full: key ? `${url}?token=${encodeURIComponent(key)}` : url };
}

function selectedMode() {
  return [...ui.modes].find((input) => input.checked)?.value ?? "2pass";
}

function setRecording(recording) {
  const hadFocus = document.activeElement;
  ui.start.disabled = recording;
  ui.stop.disabled = !recording;
  ui.apiKey.disabled = recording;
  for (const input of ui.modes) input.disabled = recording;
  // Keep keyboard focus on the button that can be pressed now.
  if (hadFocus === ui.start && recording) ui.stop.focus();
  if (hadFocus === ui.stop && !recording) ui.start.focus();
}

// One recording: getUserMedia -> worklet -> WebSocket, until the final result.
class Recording {
  constructor(mode, key) {
    this.mode = mode;
    this.endpoint = socketUrl(key);
    this.state = "connecting"; // -> recording -> stopping -> finishing -> closed
    this.samplesSent = 0;
    this.results = 0;
    this.serverError = null;
    this.context = null;
    this.stream = null;
    this.source = null;
    this.node = null;
    this.socket = null;
    this.timer = null;
  }

  async start() {
    // Created in the click's handler, so that the browser lets it start.
    const context = (this.context = new AudioContext());
    ui.inputRate.textContent = String(context.sampleRate);
    setStatus(ui.status, "Opening the microphone…");
    try {
      // Raw audio: speech models are trained on it, and noise suppression eats steady sounds.
      const stream = await navigator.mediaDevices.getUserMedia({
        audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
      });
      if (this.state !== "connecting") {
        for (const track of stream.getTracks()) track.stop(); // stopped meanwhile
        return;
      }
      this.stream = stream;
      await context.audioWorklet.addModule("/static/recorder-worklet.js");
    } catch (error) {
      if (this.state === "connecting") this.fail(`The microphone is not available: ${error.message}`);
      return;
    }
    if (this.state !== "connecting") return; // stopped meanwhile
    setStatus(ui.status, `Connecting to ${this.endpoint.shown}…`);
    this.socket = new WebSocket(this.endpoint.full, ["binary"]);
    this.socket.binaryType = "arraybuffer";
    this.socket.onopen = () => this.opened();
    this.socket.onmessage = (event) => this.received(event.data);
    this.socket.onclose = (event) => this.closed(event);
  }

  opened() {
    if (this.state !== "connecting") return;
    this.socket.send(
      JSON.stringify({
        mode: this.mode,
        chunk_size: CHUNK_SIZE,
        chunk_interval: CHUNK_INTERVAL,
        wav_name: "microphone",
        wav_format: "pcm",
        audio_fs: TARGET_RATE,
        is_speaking: true,
      }),
    );
    this.source = this.context.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.context, "recorder", {
      numberOfOutputs: 0, // a sink: rendered without a path to the speakers
      processorOptions: { targetRate: TARGET_RATE, frameSamples: FRAME_SAMPLES },
    });
    this.node.port.onmessage = (event) => this.fromWorklet(event.data);
    this.source.connect(this.node);
    this.state = "recording";
    setStatus(ui.status, `Recording (${this.mode}): speak now, then press Stop.`);
  }

  fromWorklet(message) {
    switch (message.type) {
      case "audio":
        if (this.socket.readyState !== WebSocket.OPEN) return;
        this.socket.send(message.pcm);
        this.samplesSent += message.pcm.byteLength / 2;
        ui.samplesSent.textContent = String(this.samplesSent);
        break;
      case "progress":
        ui.capturedSeconds.textContent = (message.inputFrames / message.inputRate).toFixed(3);
        break;
      case "stopped":
        ui.capturedSeconds.textContent = (message.inputFrames / message.inputRate).toFixed(3);
        this.endUtterance();
        break;
    }
  }

  stop() {
    switch (this.state) {
      case "connecting":
        this.state = "closed";
        this.socket?.close(1000, "stopped");
        this.releaseAudio();
        setStatus(ui.status, "Stopped before the connection was made.");
        setRecording(false);
        break;
      case "recording":
        this.state = "stopping";
        ui.stop.disabled = true;
        setStatus(ui.status, "Stopping…");
        this.node.port.postMessage({ type: "stop" }); // its last frame, then "stopped"
        this.timer = setTimeout(() => this.endUtterance(), STOP_TIMEOUT_MS);
        break;
    }
  }

  endUtterance() {
    if (this.state !== "stopping") return;
    clearTimeout(this.timer);
    this.releaseAudio();
    this.state = "finishing";
    if (this.socket.readyState !== WebSocket.OPEN) return;
    this.socket.send(JSON.stringify({ is_speaking: false }));
    setStatus(ui.status, "Waiting for the final result…");
    this.timer = setTimeout(() => {
      this.fail(`No final result ${FINAL_TIMEOUT_MS / 1000} s after Stop; closing.`);
    }, FINAL_TIMEOUT_MS);
  }

  received(data) {
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      return; // not ours to show
    }
    if (message.type === "error") {
      // Our extension: the reason, just before the server closes with that code.
      this.serverError = message;
      setStatus(ui.status, `Server error ${message.code}: ${message.message}`, "error");
      return;
    }
    this.results++;
    ui.resultsReceived.textContent = String(this.results);
    switch (message.mode) {
      case "online":
      case "2pass-online":
        transcript.partial(message.text);
        break;
      case "offline":
      case "2pass-offline":
        transcript.sentence(message.text);
        break;
    }
    if (message.is_final) {
      // The last result of the utterance (not a sentence boundary): the session is done.
      transcript.endLine();
      clearTimeout(this.timer);
      this.state = "closed";
      this.socket.close(1000, "done");
      const results = this.results === 1 ? "1 result" : `${this.results} results`;
      setStatus(ui.status, `Done: ${this.samplesSent} samples sent, ${results}.`, "done");
      setRecording(false);
    }
  }

  closed(event) {
    const was = this.state;
    this.state = "closed";
    clearTimeout(this.timer);
    this.releaseAudio();
    setRecording(false);
    if (was === "closed") return; // we closed it
    const reason = event.reason ? `, reason “${event.reason}”` : "";
    if (was === "connecting") {
      // A refused handshake (HTTP 401 or 403) reaches a page only as a failed connection.
      setStatus(
        ui.status,
        `Could not connect to ${this.endpoint.shown} (close code ${event.code}${reason}). ` +
          "The server refused the connection or cannot be reached: check the API key " +
          "(a missing or wrong key is refused) and the server's allowed origins.",
        "error",
      );
    } else if (this.serverError !== null) {
      setStatus(
        ui.status,
        `The server closed the session (close code ${event.code}): ${this.serverError.message}`,
        "error",
      );
    } else {
      setStatus(ui.status, `Disconnected before the final result (close code ${event.code}${reason}).`, "error");
    }
  }

  fail(text) {
    this.state = "closed";
    clearTimeout(this.timer);
    this.socket?.close(1000, "client gave up");
    this.releaseAudio();
    setStatus(ui.status, text, "error");
    setRecording(false);
  }

  releaseAudio() {
    this.source?.disconnect();
    this.node?.disconnect();
    this.node?.port.close();
    for (const track of this.stream?.getTracks() ?? []) track.stop();
    this.context?.close().catch(() => {}); // closing twice is harmless
    this.source = this.node = this.stream = this.context = null;
  }
}

let recording = null;

ui.start.addEventListener("click", () => {
  if (recording !== null && recording.state !== "closed") return;
  ui.samplesSent.textContent = "0";
  ui.capturedSeconds.textContent = "0.000";
  ui.resultsReceived.textContent = "0";
  setRecording(true);
  const started = new Recording(selectedMode(), ui.apiKey.value.trim());
  recording = started;
  started.start().catch((error) => started.fail(`Could not start: ${error.message}`));
});

ui.stop.addEventListener("click", () => recording?.stop());
ui.clear.addEventListener("click", () => transcript.clear());

ui.fileForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const file = ui.file.files[0];
  if (!file) {
    setStatus(ui.fileStatus, "Choose a WAV file first.", "error");
    return;
  }
  const body = new FormData();
  body.append("file", file, file.name);
  const key = ui.apiKey.value.trim();
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  ui.transcribe.disabled = true;
  ui.fileResult.textContent = "";
  setStatus(ui.fileStatus, `Transcribing ${file.name}…`);
  try {
    const response = await fetch("/v1/transcribe", { method: "POST", body, headers });
    const text = await response.text();
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {
      // a proxy's HTML error page, say: shown as it is
    }
    if (response.ok && json !== null) {
      setStatus(ui.fileStatus, `${json.source}: ${json.duration_s} s of audio.`, "done");
      ui.fileResult.textContent = json.text || "(no text)";
    } else {
      const message = json?.error?.message ?? text;
      setStatus(ui.fileStatus, `Refused with HTTP ${response.status}: ${message}`, "error");
      ui.fileResult.textContent = json !== null ? JSON.stringify(json, null, 2) : text;
    }
  } catch (error) {
    setStatus(ui.fileStatus, `The request failed: ${error.message}`, "error");
  } finally {
    ui.transcribe.disabled = false;
  }
});

if (!window.isSecureContext || !navigator.mediaDevices?.getUserMedia || !window.AudioWorkletNode) {
  ui.start.disabled = true;
  setStatus(
    ui.status,
    "The microphone needs a secure context: open this page as http://localhost:PORT/ or " +
      "over https://. Files can still be transcribed below.",
    "error",
  );
}
