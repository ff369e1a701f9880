// The microphone's audio -> 16 kHz mono s16le frames, on the audio rendering thread.
//
// Every render quantum is mixed down to mono and fed to a windowed-sinc resampler (a low-pass
// below the output's Nyquist, so that 48 kHz speech does not alias); the output is cut into
// frames of `frameSamples` and posted to the page as little-endian int16 ArrayBuffers.
// On {type: "stop"} the resampler's tail is flushed, the last short frame is posted, then
// {type: "stopped"} with the counts the page shows: the output holds exactly
// ceil(inputFrames * targetRate / sampleRate) samples.

const PHASES = 256; // kernel table entries per input sample
const ZERO_CROSSINGS = 8; // kernel half width, in output samples

class Resampler {
  constructor(inputRate, outputRate) {
    this.step = inputRate / outputRate; // input samples per output sample
    // Cut off a little below the lower of the two Nyquist frequencies (0.5 = input Nyquist).
    const cutoff = 0.5 * Math.min(1, outputRate / inputRate) * 0.92;
    this.half = Math.ceil(ZERO_CROSSINGS / (2 * cutoff));
    const size = 2 * this.half * PHASES + 1;
    this.kernel = new Float32Array(size);
    for (let i = 0; i < size; i++) {
      const d = i / PHASES - this.half;
      const x = 2 * cutoff * d;
      const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
      const window = 0.42 + 0.5 * Math.cos((Math.PI * d) / this.half)
        + 0.08 * Math.cos((2 * Math.PI * d) / this.half); // Blackman
      this.kernel[i] = sinc * window;
    }
    this.buffer = new Float32Array(4096);
    this.start = 0; // the absolute index of buffer[0]
    this.length = 0;
    this.received = 0; // input samples so far
    this.produced = 0; // output samples so far
  }

  push(samples, emit) {
    if (this.length + samples.length > this.buffer.length) {
      const bigger = new Float32Array(2 * (this.length + samples.length));
      bigger.set(this.buffer.subarray(0, this.length));
      this.buffer = bigger;
    }
    this.buffer.set(samples, this.length);
    this.length += samples.length;
    this.received += samples.length;
    this.run(emit, false);
  }

  flush(emit) {
    this.run(emit, true);
  }

  run(emit, flushing) {
    const end = this.start + this.length;
    for (;;) {
      const position = this.produced * this.step;
      if (flushing ? position >= this.received : Math.floor(position) + this.half >= end) break;
      emit(this.sample(position, end));
      this.produced++;
    }
    // Keep only what the next output still needs.
    const keepFrom = Math.max(this.start, Math.floor(this.produced * this.step) - this.half);
    const drop = keepFrom - this.start;
    if (drop > 0) {
      this.buffer.copyWithin(0, drop, this.length);
      this.length -= drop;
      this.start = keepFrom;
    }
  }

  sample(position, end) {
    const centre = Math.floor(position);
    let sum = 0;
    let weights = 0;
    for (let k = centre - this.half + 1; k <= centre + this.half; k++) {
      const weight = this.kernel[Math.round((position - k + this.half) * PHASES)];
      weights += weight;
      // Before the first sample and past the last (at the flush): silence.
      if (k >= this.start && k < end) sum += weight * this.buffer[k - this.start];
    }
    return sum / weights; // normalised: no gain ripple between kernel phases
  }
}

class RecorderProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate, frameSamples } = options.processorOptions;
    this.resampler = new Resampler(sampleRate, targetRate);
    this.frameSamples = frameSamples;
    this.newFrame();
    this.inputFrames = 0;
    this.quanta = 0;
    this.stopping = false;
    this.emit = (value) => {
      const clamped = Math.max(-1, Math.min(1, value));
      const int = Math.round(clamped < 0 ? clamped * 0x8000 : clamped * 0x7fff);
      this.view.setInt16(2 * this.filled, int, true); // little-endian on every platform
      this.filled++;
      if (this.filled === this.frameSamples) this.post();
    };
    this.port.onmessage = (event) => {
      if (event.data.type === "stop") this.stopping = true;
    };
  }

  newFrame() {
    this.frame = new ArrayBuffer(2 * this.frameSamples);
    this.view = new DataView(this.frame);
    this.filled = 0;
  }

  post() {
    const pcm = this.filled === this.frameSamples ? this.frame : this.frame.slice(0, 2 * this.filled);
    this.port.postMessage({ type: "audio", pcm }, [pcm]);
    this.newFrame();
  }

  process(inputs) {
    if (this.stopping) {
      this.resampler.flush(this.emit);
      if (this.filled > 0) this.post();
      this.port.postMessage({
        type: "stopped",
        inputFrames: this.inputFrames,
        inputRate: sampleRate,
        samples: this.resampler.produced,
      });
      return false; // done: the node may be collected
    }
    const channels = inputs[0];
    // No channels: the source is not (or no longer) connected. Its time is not audio captured.
    if (channels.length === 0) return true;
    const frames = channels[0].length;
    let mono = channels[0];
    if (channels.length > 1) {
      mono = new Float32Array(frames);
      for (const channel of channels) {
        for (let i = 0; i < frames; i++) mono[i] += channel[i];
      }
      for (let i = 0; i < frames; i++) mono[i] /= channels.length;
    }
    this.inputFrames += frames;
    this.resampler.push(mono, this.emit);
    if (++this.quanta % 16 === 0) {
      this.port.postMessage({ type: "progress", inputFrames: this.inputFrames, inputRate: sampleRate });
    }
    return true;
  }
}

registerProcessor("recorder", RecorderProcessor);
