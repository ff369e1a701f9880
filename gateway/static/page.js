// The page: the microphone, 16 kHz s16le from an AudioWorklet, streamed over the gateway's
// WebSocket (FunASR's protocol); results shown as they arrive. The session is resumable (our
// opt-in extension): a dropped connection is resumed on a new one, and nothing said meanwhile
// is lost. And a file sent to POST /v1/transcribe. No dependencies, no build step.

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
  resumes: $("resumes"),
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

// -- resumable sessions (the opt-in "resumable": true protocol) -----------------------------

// Closed without our error frame and with one of these: the connection was lost, not the
// session (1006: no close frame came). Anything else (the refusals 44xx, a policy close 1008,
// a draining server's 1012) is the server's decision, which a retry would only meet again.
const DROPPED_CLOSE_CODES = new Set([1000, 1001, 1006, 1011]);
const FIRST_BACKOFF_S = 0.05;
const MAX_BACKOFF_S = 2.0;

export function isDropped(closeCode) {
  return DROPPED_CLOSE_CODES.has(closeCode);
}

// Waits between reconnects: doubling up to the cap, each drawn from its upper half so that
// pages cut off together do not come back together.
export function* backoffDelays(
  firstS = FIRST_BACKOFF_S,
  capS = MAX_BACKOFF_S,
  uniform = Math.random,
) {
  let base = firstS;
  for (;;) {
    yield base * (0.5 + 0.5 * uniform());
    base = Math.min(2 * base, capS);
  }
}

// One utterance's side of the protocol, without I/O (the page's only utterance: 1). It keeps
// the PCM from the newest ack on, and what the current connection has not had yet: audio
// captured while the connection is down waits here, and a resumed server says from which
// sample to send again. Memory stays small: acked audio is dropped. It also keeps the newest
// resume token (each works once) and the highest result_id seen, to drop the results a
// resumed server sends again.
export class ResumeBook {
  static UTTERANCE = 1;

  constructor() {
    this.token = null;
    this.windowS = 0;
    this.lastResult = 0;
    this.resumes = 0;
    this.chunks = []; // ArrayBuffers of s16le PCM, in order, from sample `base` on
    this.base = 0; // samples before chunks[0]: taken by the server and dropped here
    this.captured = 0; // samples of the utterance so far: where the last chunk ends
    this.sent = 0; // samples handed to the current connection
    this.sentOnce = 0; // samples handed to any connection: each counted once
  }

  get canResume() {
    return this.token !== null;
  }

  get keptSamples() {
    return this.captured - this.base;
  }

  append(pcm) {
    this.chunks.push(pcm);
    this.captured += pcm.byteLength / 2;
  }

  // The PCM the current connection has not had, in order (the first piece may start inside
  // a chunk, after a resume); from now on it has had it.
  takeUnsent() {
    const pieces = [];
    let start = this.base;
    for (const chunk of this.chunks) {
      const end = start + chunk.byteLength / 2;
      if (end > this.sent) {
        pieces.push(start >= this.sent ? chunk : chunk.slice(2 * (this.sent - start)));
      }
      start = end;
    }
    this.sent = this.captured;
    this.sentOnce = Math.max(this.sentOnce, this.sent);
    return pieces;
  }

  // A session frame (`{"type": "session", ...}`). Returns what to send on this connection:
  // `sendEnd` false when a resumed server has the end frame already. Throws on a frame that
  // contradicts what this page sent or was told.
  opened(frame) {
    const counts = ["utterance", "samples", "last_result"];
    const badCount = counts.find((key) => !Number.isInteger(frame[key]) || frame[key] < 0);
    if (typeof frame.resume_token !== "string" || badCount !== undefined) {
      throw new Error(`a session frame with a bad field: ${badCount ?? "resume_token"}`);
    }
    if (frame.resumed) {
      if (this.token === null) throw new Error("a resumed session frame on a session never opened");
      if (frame.utterance !== ResumeBook.UTTERANCE) {
        throw new Error(`the server resumed utterance ${frame.utterance}; this page sent one`);
      }
      if (frame.samples < this.base || frame.samples > this.captured) {
        throw new Error(
          `the server says it took ${frame.samples} samples; it had acknowledged ${this.base} ` +
            `and this page captured ${this.captured}`,
        );
      }
      this.sent = frame.samples; // send again from there
      this.resumes++;
    }
    this.token = frame.resume_token;
    this.windowS = Number(frame.resume_window_s) || 0;
    this.acked(frame.utterance, frame.samples);
    return { sendEnd: !frame.input_ended };
  }

  // An ack (`{"type": "ack", ...}`), or a session frame's count: the server has taken these
  // samples for good, so they are never sent again. The chunk they end in stays whole.
  acked(utterance, samples) {
    if (utterance !== ResumeBook.UTTERANCE || !Number.isInteger(samples)) return;
    while (this.chunks.length > 0 && this.base + this.chunks[0].byteLength / 2 <= samples) {
      this.base += this.chunks.shift().byteLength / 2;
    }
  }

  // Whether a result frame is one this page has had already (a resumed server sends again
  // every numbered frame after the last_result it was given).
  isDuplicate(message) {
    const id = message.result_id;
    if (!Number.isInteger(id)) return false; // not a resumable session's frame
    if (id <= this.lastResult) return true;
    this.lastResult = id;
    return false;
  }

  // `url` with resume=<token>&last_result=<K> added (its other parameters, the key, kept).
  resumeUrl(url) {
    const resumed = new URL(url);
    resumed.searchParams.set("resume", this.token);
    resumed.searchParams.set("last_result", String(this.lastResult));
    return resumed.href;
  }
}

// One recording: getUserMedia -> worklet -> WebSocket, until the final result. A resumable
// session: when the connection drops, the microphone goes on into the book, and the page
// reconnects with the newest token and sends again what the server had not taken.
class Recording {
  constructor(mode, key) {
    this.mode = mode;
    this.endpoint = socketUrl(key);
    this.state = "connecting"; // -> recording -> stopping -> finishing -> closed
    this.book = new ResumeBook();
    this.results = 0;
    this.serverError = null;
    this.context = null;
    this.stream = null;
    this.source = null;
    this.node = null;
    this.socket = null;
    this.live = false; // whether audio may go on this.socket now
    this.ended = false; // the utterance's audio is all in the book: the end frame is due
    this.endSent = false; // on this.socket (or the server had it already)
    this.reconnect = null; // while the connection is down: {deadline, delays, attempt, timer}
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
    this.connect(this.endpoint.full);
  }

  connect(url) {
    const socket = (this.socket = new WebSocket(url, ["binary"]));
    socket.binaryType = "arraybuffer";
    // Each handler checks that its socket is still the current one: an old connection's late
    // events are not this one's.
    socket.onopen = () => socket === this.socket && this.opened();
    socket.onmessage = (event) => socket === this.socket && this.received(event.data);
    socket.onclose = (event) => socket === this.socket && this.closed(event);
  }

  opened() {
    if (this.state !== "connecting") return; // a resumed connection waits for its session frame
    this.socket.send(
      JSON.stringify({
        mode: this.mode,
        chunk_size: CHUNK_SIZE,
        chunk_interval: CHUNK_INTERVAL,
        wav_name: "microphone",
        wav_format: "pcm",
        audio_fs: TARGET_RATE,
        is_speaking: true,
        resumable: true, // FunASR's servers ignore it; ours sends a session frame
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
    this.live = true;
    this.showProgress();
  }

  // What the recording is doing, unless the connection is down: then that it reconnects.
  showProgress() {
    if (this.reconnect !== null) {
      const attempt = this.reconnect.attempt > 1 ? ` (attempt ${this.reconnect.attempt})` : "";
      const still = this.state === "recording" ? " The microphone is still recording." : "";
      setStatus(ui.status, `Connection lost: reconnecting…${attempt}${still}`, "reconnecting");
      return;
    }
    switch (this.state) {
      case "recording":
        setStatus(ui.status, `Recording (${this.mode}): speak now, then press Stop.`);
        break;
      case "stopping":
        setStatus(ui.status, "Stopping…");
        break;
      case "finishing":
        setStatus(ui.status, "Waiting for the final result…");
        break;
    }
  }

  fromWorklet(message) {
    switch (message.type) {
      case "audio":
        this.book.append(message.pcm);
        this.flush();
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

  // Send what the connection has not had: audio (resent or queued), then the end frame once
  // it is due.
  flush() {
    if (!this.live || this.socket.readyState !== WebSocket.OPEN) return;
    for (const pcm of this.book.takeUnsent()) this.socket.send(pcm);
    ui.samplesSent.textContent = String(this.book.sentOnce);
    if (this.ended && !this.endSent) {
      this.socket.send(JSON.stringify({ is_speaking: false }));
      this.endSent = true;
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
        this.showProgress();
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
    this.ended = true;
    this.flush();
    this.showProgress();
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
    switch (message.type) {
      case "error":
        // Our extension: the reason, just before the server closes with that code.
        this.serverError = message;
        setStatus(ui.status, `Server error ${message.code}: ${message.message}`, "error");
        return;
      case "session":
        this.sessionOpened(message);
        return;
      case "ack":
        this.book.acked(message.utterance, message.samples);
        return;
    }
    if (this.book.isDuplicate(message)) return; // had before the connection dropped
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
      const times = this.book.resumes;
      const resumes = { 0: "", 1: ", resumed once" }[times] ?? `, resumed ${times} times`;
      setStatus(ui.status, `Done: ${this.book.sentOnce} samples sent, ${results}${resumes}.`, "done");
      setRecording(false);
    }
  }

  sessionOpened(frame) {
    let sending;
    try {
      sending = this.book.opened(frame);
    } catch (error) {
      this.fail(`The server's session frame makes no sense here: ${error.message}`);
      return;
    }
    if (!frame.resumed) return; // the first connection: already sending
    this.reconnect = null;
    ui.resumes.textContent = String(this.book.resumes);
    this.live = true;
    this.endSent = !sending.sendEnd;
    this.flush(); // from where the server got to, then what waited meanwhile
    this.showProgress();
  }

  closed(event) {
    const was = this.state;
    this.live = false;
    if (was === "closed") return; // we closed it
    const resumable = this.serverError === null && this.book.canResume && isDropped(event.code);
    if (was !== "connecting" && resumable) {
      this.reconnectLater(event);
      return;
    }
    this.state = "closed";
    clearTimeout(this.timer);
    this.releaseAudio();
    setRecording(false);
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

  // The connection dropped (or a reconnect failed before its session frame): try again with
  // the newest token after the next backoff, for as long as the server holds the session.
  reconnectLater(event) {
    const now = performance.now();
    if (this.reconnect === null) {
      const deadline = now + 1000 * this.book.windowS;
      this.reconnect = { deadline, delays: backoffDelays(), attempt: 0, timer: null };
    }
    const reconnect = this.reconnect;
    if (now >= reconnect.deadline) {
      this.fail(
        `Disconnected before the final result (close code ${event.code}); ` +
          `not resumed within ${this.book.windowS} s.`,
      );
      return;
    }
    reconnect.attempt++;
    this.showProgress();
    const delayMs = Math.min(1000 * reconnect.delays.next().value, reconnect.deadline - now);
    reconnect.timer = setTimeout(() => {
      if (this.reconnect === reconnect) this.connect(this.book.resumeUrl(this.endpoint.full));
    }, delayMs);
  }

  fail(text) {
    this.state = "closed";
    this.live = false;
    clearTimeout(this.timer);
    clearTimeout(this.reconnect?.timer);
    this.reconnect = null;
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
  ui.resumes.textContent = "0";
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
