"""Messages between the pool and its workers, and the results a stream yields.

Frozen dataclasses, never positional tuples. Worker-to-parent messages are small (text and
a few numbers) and cross the result pipe pickled; audio goes the other way through the slab.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.engines import EngineCapabilities, EngineName, Precision

SAMPLE_RATE = 16000
SAMPLES_PER_CHUNK_UNIT = 960  # FunASR's chunk_size counts 60 ms units at 16 kHz
OPEN_END_MS = -1  # a VAD segment's end (or start) not in this piece
# A stream's hotwords: SeACo-Paraformer embeds every one on every decode, so their number
# bounds what one client can make a worker spend; FunASR's clients send a handful.
MAX_HOTWORDS = 256
MAX_HOTWORD_CHARS = 32
MAX_HOTWORDS_BYTES = 16 * 1024  # UTF-8, separators included: the OPEN command's payload
# The languages SenseVoiceSmall takes (its lid_dict), "auto" first: it then says which it heard.
SPOKEN_LANGUAGES = ("auto", "zh", "en", "yue", "ja", "ko", "nospeech")
# A speaker stream's speech regions (``StreamOptions.speech_regions``): its OPEN command
# carries them, 8 bytes each; an hour of speech has a few thousand.
MAX_SPEECH_REGIONS = 16384
# A speaker model's voiceprints (``Decoded.voiceprints``): one per speaker label, CAM++'s
# of 192 floats. Bounded so that a final result stays small on the results pipe (at most
# 2.4 MB pickled): an hour of speech has a few dozen speakers, and the clustering of one
# (HDBSCAN's clusters of 10 windows or more) at most 481 labels.
MAX_VOICEPRINTS = 512
MAX_VOICEPRINT_DIMS = 512


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Per-stream decoding settings, as FunASR's streaming Paraformer takes them.

    ``chunk_size`` is in 60 ms units: ``(look-back, chunk, look-ahead)``; ``(0, 10, 5)`` is
    a 600 ms chunk with 300 ms of look-ahead.
    """

    chunk_size: tuple[int, int, int] = (0, 10, 5)
    encoder_chunk_look_back: int = 4
    decoder_chunk_look_back: int = 1
    # Words that an offline model able to use them (SeACo-Paraformer) favours; others
    # ignore them, as FunASR does. Already split into words: no weights, no whitespace.
    hotwords: tuple[str, ...] = ()
    # Inverse text normalization of the text an offline model gives ("一百二十三" as
    # "123"): offline engines do it; streaming partials never get it, as in FunASR's server.
    itn: bool = False
    # A model that takes them (SenseVoiceSmall): the language spoken (``SPOKEN_LANGUAGES``),
    # and whether its own ITN and punctuation are on (FunASR's ``svs_lang``, ``svs_itn``).
    language: str = "auto"
    model_itn: bool = True
    # A speaker model's stream (CAM++): where the stream's audio has speech, [start, end]
    # in ms from its start, in order (the VAD's regions, as funasr embeds each one).
    speech_regions: tuple[tuple[int, int], ...] = ()
    # A re-decoding streaming engine's final result is its decode of the whole region;
    # False: the last partial's text again, where another pass decodes the whole (2pass).
    final_decode: bool = True
    # A speaker model's stream (CAM++): its result is each window's embedding
    # (``Decoded.window_embeddings``) rather than clustered turns: a 2pass sentence's, for
    # the session's live speaker tracker (``gateway.speakers.tracker``).
    window_embeddings: bool = False

    def __post_init__(self) -> None:
        _check_regions(self.speech_regions)
        if self.language not in SPOKEN_LANGUAGES:
            raise ValueError(f"language must be one of {', '.join(SPOKEN_LANGUAGES)}")
        if len(self.chunk_size) != 3 or any(
            not isinstance(v, int) or not 0 <= v <= 0xFFFF for v in self.chunk_size
        ):
            raise ValueError("chunk_size must be three integers in 0..65535")
        if self.chunk_size[1] <= 0:
            raise ValueError("chunk_size[1] (the chunk length) must be positive")
        for look_back in (self.encoder_chunk_look_back, self.decoder_chunk_look_back):
            if not isinstance(look_back, int) or not 0 <= look_back <= 0xFFFF:
                raise ValueError("look-back values must be integers in 0..65535")
        if not isinstance(self.hotwords, tuple):  # a str would pass as its characters
            raise ValueError("hotwords must be a tuple of words")
        if len(self.hotwords) > MAX_HOTWORDS:
            raise ValueError(f"at most {MAX_HOTWORDS} hotwords")
        for word in self.hotwords:
            if not isinstance(word, str) or not 0 < len(word) <= MAX_HOTWORD_CHARS:
                raise ValueError(f"a hotword is a string of 1..{MAX_HOTWORD_CHARS} characters")
            if any(character.isspace() for character in word):
                raise ValueError(f"a hotword has no whitespace in it: {word!r}")
        try:
            size = len(" ".join(self.hotwords).encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800"): no UTF-8 to send
            raise ValueError("a hotword is not valid Unicode text") from None
        if size > MAX_HOTWORDS_BYTES:
            raise ValueError(f"hotwords take at most {MAX_HOTWORDS_BYTES} bytes of UTF-8")

    @property
    def chunk_samples(self) -> int:
        """Samples in one model chunk: ``chunk_size[1] x 60 ms``."""
        return self.chunk_size[1] * SAMPLES_PER_CHUNK_UNIT


def _check_regions(regions: tuple[tuple[int, int], ...]) -> None:
    if not isinstance(regions, tuple) or len(regions) > MAX_SPEECH_REGIONS:
        raise ValueError(f"speech regions are a tuple of at most {MAX_SPEECH_REGIONS}")
    previous_end = 0
    for region in regions:
        start, end = region
        if not (isinstance(start, int) and isinstance(end, int)):
            raise ValueError("a speech region is two integers (ms)")
        if not previous_end <= start < end <= 0xFFFFFFFF:
            raise ValueError(f"speech regions are in order and do not overlap: {region}")
        previous_end = end


@dataclass(frozen=True, slots=True)
class SpeakerTurn:
    """Who spoke when: ``speaker`` (0, 1, ... in order of first appearance) from ``start``
    to ``end``, in ms from the start of the stream's audio (funasr's diarization output,
    ``postprocess``'s ``[start, end, speaker]``)."""

    start: int
    end: int
    speaker: int


@dataclass(frozen=True, slots=True)
class Decoded:
    """What a decode says: of one audio piece, or of a whole utterance. One payload from the
    engine's answer to the wire, carried whole (``ChunkOutput``, ``StreamResult``, a whole
    utterance's decode: ``workers.pool.stream.decode_whole``).

    ``text``: the new text of the piece for a streaming engine (a delta), the whole text for
    a whole-utterance engine's final result (``EngineCapabilities.text_is_delta``).
    """

    text: str = ""
    # Whole-utterance engines whose model predicts them (BiCifParaformer): each token's
    # [start, end] in ms from the start of the stream's audio. Empty otherwise.
    timestamps: tuple[tuple[int, int], ...] = ()
    # A VAD engine's segments seen in this piece, as funasr gives them: [start, end] in ms
    # from the stream's start, ``OPEN_END_MS`` for an end not seen here ([start, -1]: speech
    # started; [-1, end]: it ended). Empty otherwise.
    segments: tuple[tuple[int, int], ...] = ()
    # A whole-utterance result with token times: its sentences (``SentenceStamp``), split at
    # punctuation as funasr splits them, before ITN. Empty otherwise.
    sentences: tuple[SentenceStamp, ...] = ()
    # A model that tags what it heard (SenseVoiceSmall): its tags, never left in ``text``.
    tags: SpeechTags | None = None
    # A speaker model's final result (CAM++): the stream's speaker turns, in order.
    speakers: tuple[SpeakerTurn, ...] = ()
    # The same result: speaker label k's voiceprint at index k (the labels of ``speakers``),
    # the L2-normalised mean of the embeddings of that label's windows; at most
    # MAX_VOICEPRINTS of at most MAX_VOICEPRINT_DIMS floats. Empty otherwise.
    voiceprints: tuple[tuple[float, ...], ...] = ()
    # A speaker model's stream that asked for them (``StreamOptions.window_embeddings``):
    # each window's embedding, in time order; bounded as the voiceprints are.
    window_embeddings: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        # Checked where a result is made (the worker): unpickling does not run it.
        if any(
            len(vectors) > MAX_VOICEPRINTS
            or any(len(vector) > MAX_VOICEPRINT_DIMS for vector in vectors)
            for vectors in (self.voiceprints, self.window_embeddings)
        ):
            raise ValueError(
                f"at most {MAX_VOICEPRINTS} voiceprints of at most {MAX_VOICEPRINT_DIMS} floats"
            )


NOTHING = Decoded()  # a piece that said nothing (yet)


@dataclass(frozen=True, slots=True)
class StreamResult:
    """One result of a stream: one per audio piece sent, and a final one at the end.

    ``decoded`` is what the engine said of the piece. ``queue_ms`` is the time the piece
    waited between the parent's send and the worker picking it up; ``compute_ms`` the time
    of the engine step that processed it (with ``batch_size`` items).
    """

    stream_id: int
    seq: int
    decoded: Decoded
    is_final: bool
    queue_ms: float = 0.0
    compute_ms: float = 0.0
    batch_size: int = 1

    @property
    def text(self) -> str:
        """The decoded text: what nearly every reader of a result reads."""
        return self.decoded.text


@dataclass(frozen=True, slots=True)
class SpeechTags:
    """SenseVoice's rich-transcription tags of one result, lower-cased, "" where the model
    wrote none: the language heard (``zh``, ``en``, ``yue``, ``ja``, ``ko``, ``nospeech``),
    the emotion (``neutral``, ``happy``, ``sad``, ``angry``, ...) and the audio event
    (``speech``, ``bgm``, ``laughter``, ``applause``, ...)."""

    language: str = ""
    emotion: str = ""
    event: str = ""


@dataclass(frozen=True, slots=True)
class SentenceStamp:
    """One sentence of a whole-utterance result with token times, in FunASR's C++ server's
    ``stamp_sents`` shape: its tokens joined by spaces (``text_seg``), the punctuation that
    ends it (``punc``, "" for none), its first token's start and last token's end, and each
    token's [start, end] (``ts_list``), in ms from the start of the stream's audio."""

    text_seg: str
    punc: str
    start: int
    end: int
    ts_list: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """The answer to one audio piece that could not be decoded; the stream is lost."""

    stream_id: int
    message: str


@dataclass(frozen=True, slots=True)
class StreamExpired:
    """The worker dropped an idle stream's state on its own (no audio piece answered)."""

    stream_id: int
    message: str


@dataclass(frozen=True, slots=True)
class SlotsFreed:
    """Slots the worker has copied out of and the parent may fill again."""

    slots: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WorkerReady:
    pid: int
    engine: EngineName
    device: str  # the label it was asked for (cuda:1), whatever index it sees it by
    load_seconds: float
    capabilities: EngineCapabilities
    # What its models really run on, as their runtime said (workers.engines.runtime.placement:
    # CUDAExecutionProvider, torch-cuda, ...); None where its engine did not say.
    provider: str | None = None
    # The GPU memory its load took, by the driver's count (workers.worker.gpu_memory);
    # None on the CPU, or where the driver could not be asked.
    gpu_memory_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerLoadFailed:
    error: str


@dataclass(frozen=True, slots=True)
class WorkerStopped:
    """The worker's last message before a clean exit."""

    streams_dropped: int = 0


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """Sent about once a second: the streams whose decoder state the worker holds, and the
    GPU memory it holds now, where it can tell (workers.worker.gpu_memory)."""

    engine_streams: int
    gpu_memory_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerQuit:
    """The worker's last message before it exits to be replaced: it can no longer serve
    (its GPU's context is broken: every later step would fail too)."""

    reason: str


WorkerMessage = (
    StreamResult
    | StreamFailed
    | StreamExpired
    | SlotsFreed
    | WorkerReady
    | WorkerLoadFailed
    | WorkerStopped
    | WorkerStats
    | WorkerQuit
)


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """What a worker loads: an engine by name, its model directory, its device."""

    engine: EngineName
    device: str = "cpu"
    model_dir: str | None = None
    threads: int = 1
    stream_idle_timeout_s: float = 300.0
    precision: Precision = "fp32"  # paraformer-onnx's graphs
    # ONNX Runtime on a CPU: weights mapped from one file the workers share (mapped_copy).
    mapped_weights: bool = True
    punc_model_dir: str | None = None  # paraformer-offline: punctuate with this CT-Transformer
    redecode_window_s: float = 8.0  # a re-decoding streaming engine's window (SenseVoice)
