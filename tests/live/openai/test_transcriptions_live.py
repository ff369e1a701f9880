"""``/v1/audio/transcriptions`` and ``/v1/models`` through OpenAI's own SDK, against a real
uvicorn with the checksum engine: every response format, streaming, long files in
segments, and each refusal as the SDK's exception class.

The checksum engine's text is ``"<samples>:<crc32>"`` of the 16 kHz int16 audio that
reached the pool, so each answer is checked against audio resampled here as the gateway
resamples it.
"""

from __future__ import annotations

import io
import itertools
import re
import select
import socket
import time
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
import soundfile
import soxr

from bench.common.gateway import Gateway, serve_blocking
from tests.helpers.checksums import checksum

pytestmark = pytest.mark.slow

KEY = "sk-test-key"
MAX_BYTES = 400_000  # ASR_TRANSCRIBE_MAX_BYTES: 12 s of 16 kHz PCM
SEGMENT_S = 2  # ASR_MAX_SEGMENT_SECONDS


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_API_KEYS": KEY,
        "ASR_MAX_SEGMENT_SECONDS": str(SEGMENT_S),
        "ASR_TRANSCRIBE_MAX_BYTES": str(MAX_BYTES),
        "ASR_TRANSCRIBE_CONCURRENCY": "1",
    }
    log = tmp_path_factory.mktemp("openai-transcriptions") / "server.log"
    with serve_blocking(env, log) as server:
        yield server


@pytest.fixture(scope="module")
def client(server: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.http + "/v1", api_key=KEY, max_retries=0) as client:
        yield client


def wav(samples: np.ndarray, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def loud(seconds: float, seed: int, rate: int = 16000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-12000, 12000, int(seconds * rate), dtype=np.int16)


def quiet(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * 16000), dtype=np.int16)


def pcm(samples: np.ndarray) -> bytes:
    return samples.astype("<i2").tobytes()


def as_the_gateway_resamples(data: bytes) -> bytes:
    """The 16 kHz int16 PCM ``gateway.files.request.decode_wav`` makes of a mono WAV."""
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    resampled = soxr.resample(audio, rate, 16000) * 32768.0
    samples: np.ndarray = np.rint(np.clip(resampled, -32768, 32767)).astype("<i2")
    return samples.tobytes()


def pieces(text: str, audio: bytes) -> list[str]:
    """The segments' checksums a joined text is made of, each checked against the audio
    it claims, in order and covering all of it."""
    parts = text.split(" ")
    start = 0
    for part in parts:
        end = start + int(part.split(":")[0]) * 2
        assert part == checksum(audio[start:end])
        start = end
    assert start == len(audio)
    return parts


SHORT = loud(1.0, 1)
LONG = np.concatenate(
    [loud(1.5, 2), quiet(0.4), loud(1.5, 3), quiet(0.4), loud(1.5, 4), quiet(0.4), loud(1.0, 5)]
)


def test_json_is_the_default_and_its_text_is_the_audio_that_reached_the_pool(
    client: openai.OpenAI,
) -> None:
    result = client.audio.transcriptions.create(file=("a.wav", wav(SHORT)), model="whisper-1")
    assert result.text == checksum(pcm(SHORT))
    assert result.usage is not None
    assert result.usage.type == "duration"
    assert result.usage.seconds == 1


@pytest.mark.parametrize("rate", [8000, 24000])
def test_another_rate_is_resampled_to_16_khz_as_decode_wav_does(
    client: openai.OpenAI, rate: int
) -> None:
    data = wav(loud(1.0, 7, rate), rate)
    result = client.audio.transcriptions.create(file=("a.wav", data), model="gpt-4o-transcribe")
    assert result.text == checksum(as_the_gateway_resamples(data))


def test_text_is_plain_text(client: openai.OpenAI) -> None:
    text = client.audio.transcriptions.create(
        file=("a.wav", wav(SHORT)), model="whisper-1", response_format="text"
    )
    assert text == checksum(pcm(SHORT)) + "\n"


def test_verbose_json_has_one_segment_for_a_short_file_and_the_language_asked(
    client: openai.OpenAI,
) -> None:
    result = client.audio.transcriptions.create(
        file=("a.wav", wav(SHORT)),
        model="whisper-1",
        response_format="verbose_json",
        language="zh",
        timestamp_granularities=["segment", "word"],
    )
    assert result.text == checksum(pcm(SHORT))
    assert (result.language, result.duration) == ("zh", 1.0)
    assert result.segments is not None
    [segment] = result.segments
    assert (segment.id, segment.start, segment.end, segment.text) == (0, 0.0, 1.0, result.text)
    assert segment.tokens == []
    assert result.words == []  # the checksum engine gives no token times
    assert result.model_extra is not None
    assert result.model_extra["task"] == "transcribe"


def test_verbose_json_without_word_has_no_words(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(
        file=("a.wav", wav(SHORT)), model="whisper-1", response_format="verbose_json"
    )
    assert result.words is None
    assert result.segments is not None
    assert len(result.segments) == 1


def test_a_long_file_is_decoded_in_segments_cut_at_its_pauses(client: openai.OpenAI) -> None:
    audio = pcm(LONG)
    result = client.audio.transcriptions.create(
        file=("long.wav", wav(LONG)), model="whisper-1", response_format="verbose_json"
    )
    parts = pieces(result.text, audio)
    assert len(parts) >= 3
    assert result.segments is not None
    assert [segment.text for segment in result.segments] == parts
    bounds = [(segment.start, segment.end) for segment in result.segments]
    assert bounds[0][0] == 0.0
    assert bounds[-1][1] == result.duration
    assert all(end - start <= SEGMENT_S for start, end in bounds)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))


def test_srt_and_vtt_have_a_cue_per_segment(client: openai.OpenAI) -> None:
    parts = pieces(
        client.audio.transcriptions.create(file=("a.wav", wav(LONG)), model="whisper-1").text,
        pcm(LONG),
    )
    srt = client.audio.transcriptions.create(
        file=("a.wav", wav(LONG)), model="whisper-1", response_format="srt"
    )
    cues = srt.strip().split("\n\n")
    assert [cue.split("\n")[2] for cue in cues] == parts
    assert [cue.split("\n")[0] for cue in cues] == [str(n) for n in range(1, len(parts) + 1)]
    assert cues[0].split("\n")[1].startswith("00:00:00,000 --> 00:00:0")
    assert re.fullmatch(r"\d\d:\d\d:\d\d,\d{3} --> 00:00:06,700", cues[-1].split("\n")[1])
    vtt = client.audio.transcriptions.create(
        file=("a.wav", wav(LONG)), model="whisper-1", response_format="vtt"
    )
    header, *vtt_cues = vtt.strip().split("\n\n")
    assert header == "WEBVTT"
    assert [cue.split("\n")[1] for cue in vtt_cues] == parts
    assert vtt_cues[-1].split("\n")[0].endswith(" --> 00:00:06.700")  # 6.7 s of audio


def test_a_stream_sends_a_delta_per_segment_then_the_whole_text(client: openai.OpenAI) -> None:
    events = list(
        client.audio.transcriptions.create(
            file=("a.wav", wav(LONG)), model="gpt-4o-mini-transcribe", stream=True
        )
    )
    *deltas, done = events
    assert [event.type for event in deltas] == ["transcript.text.delta"] * len(deltas)
    assert done.type == "transcript.text.done"
    assert len(deltas) == len(pieces(done.text, pcm(LONG))) >= 3
    assert "".join(event.delta for event in deltas) == done.text  # type: ignore[union-attr]


def test_a_short_stream_is_one_delta(client: openai.OpenAI) -> None:
    stream = client.audio.transcriptions.create(
        file=("a.wav", wav(SHORT)), model="whisper-1", stream=True
    )
    assert [(e.type, getattr(e, "delta", None) or getattr(e, "text", None)) for e in stream] == [
        ("transcript.text.delta", checksum(pcm(SHORT))),
        ("transcript.text.done", checksum(pcm(SHORT))),
    ]


def test_a_stream_left_early_gives_its_place_back(client: openai.OpenAI) -> None:
    # ASR_TRANSCRIBE_CONCURRENCY=1: the next request gets the place once the server has
    # seen the client go (at once on loopback; a bounded wait for it, not a sleep).
    stream = client.audio.transcriptions.create(
        file=("a.wav", wav(LONG)), model="whisper-1", stream=True
    )
    assert next(iter(stream)).type == "transcript.text.delta"
    stream.close()
    deadline = time.monotonic() + 10
    while True:
        try:
            result = client.audio.transcriptions.create(
                file=("a.wav", wav(SHORT)), model="whisper-1"
            )
            break
        except openai.RateLimitError:
            assert time.monotonic() < deadline, "the stream's place was never given back"
    assert result.text == checksum(pcm(SHORT))


def test_the_models_listed_are_served(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [model.id for model in models] == ["checksum"]
    assert {(model.object, model.owned_by) for model in models} == {("model", "funasr")}
    result = client.audio.transcriptions.create(file=("a.wav", wav(SHORT)), model="checksum")
    assert result.text == checksum(pcm(SHORT))


def test_an_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.audio.transcriptions.create(file=("a.wav", wav(SHORT)), model="whisper-9")
    assert (raised.value.code, raised.value.param) == ("model_not_found", "model")
    assert raised.value.type == "invalid_request_error"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": "xml_json"}, "response_format"),
        ({"timestamp_granularities": ["sentence"]}, "timestamp_granularities"),
        ({"temperature": 2.0}, "temperature"),
    ],
    ids=["response_format", "granularity", "temperature"],
)
def test_a_bad_field_is_a_bad_request_naming_it(
    client: openai.OpenAI, fields: dict[str, object], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.audio.transcriptions.create(  # type: ignore[call-overload]  # values it types out
            file=("a.wav", wav(SHORT)), model="whisper-1", **fields
        )
    assert raised.value.param == param
    assert raised.value.code == "bad_" + param
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["type"] == "invalid_request_error"


def test_a_corrupt_wav_is_a_bad_request_about_the_file(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.audio.transcriptions.create(file=("a.wav", wav(SHORT)[:30]), model="whisper-1")
    assert (raised.value.code, raised.value.param) == ("bad_wav", "file")
    assert "truncated or corrupt" in raised.value.message


def test_audio_that_is_not_wav_is_a_415(client: openai.OpenAI) -> None:
    buffer = io.BytesIO()
    soundfile.write(buffer, SHORT, 16000, format="FLAC")
    with pytest.raises(openai.APIStatusError) as raised:
        client.audio.transcriptions.create(file=("a.flac", buffer.getvalue()), model="whisper-1")
    assert raised.value.status_code == 415
    assert (raised.value.code, raised.value.param) == ("not_wav", "file")


def test_a_file_over_the_cap_is_a_413(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        client.audio.transcriptions.create(file=("a.wav", bytes(MAX_BYTES + 1)), model="whisper-1")
    assert raised.value.status_code == 413
    assert (raised.value.code, raised.value.param) == ("too_large", "file")


def test_a_wrong_key_is_an_authentication_error(server: Gateway) -> None:
    with openai.OpenAI(base_url=server.http + "/v1", api_key="sk-wrong", max_retries=0) as other:
        with pytest.raises(openai.AuthenticationError) as raised:
            other.audio.transcriptions.create(file=("a.wav", wav(SHORT)), model="whisper-1")
        assert (raised.value.code, raised.value.type) == ("invalid_api_key", "authentication_error")
        assert raised.value.response.headers["www-authenticate"] == "Bearer"
        with pytest.raises(openai.AuthenticationError):
            other.models.list()


def test_no_key_is_a_401_in_openais_shape(server: Gateway) -> None:
    # The SDK will not send a request without a key: plain HTTP, as curl would.
    with httpx.Client(base_url=server.http, trust_env=False) as http:
        response = http.post(
            "/v1/audio/transcriptions",
            files={"file": ("a.wav", wav(SHORT))},
            data={"model": "whisper-1"},
        )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error.keys() == {"message", "type", "param", "code"}
    assert "Authorization: Bearer" in error["message"]


class Holder:
    """A ``/v1/transcribe`` upload whose body stops after its first part header: it holds
    a transcription place until ``finish``."""

    BOUNDARY = "b0undary"

    def __init__(self, server: Gateway) -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        head = (
            f'--{self.BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"'
            "\r\n\r\n"
        ).encode()
        self.tail = wav(SHORT) + f"\r\n--{self.BOUNDARY}--\r\n".encode()
        self.sock.sendall(
            b"POST /v1/transcribe HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: multipart/form-data; boundary=%s\r\n"
            b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s"
            % (self.BOUNDARY.encode(), KEY.encode(), len(head) + len(self.tail), head)
        )

    def answered(self) -> bool:
        """Whether the server has answered already (it was refused: another had the place)."""
        return bool(select.select([self.sock], [], [], 0)[0])

    def finish(self) -> bytes:
        self.sock.sendall(self.tail)
        self.sock.settimeout(10)
        with self.sock, self.sock.makefile("rb") as answer:
            return answer.readline()


def test_a_transcription_over_the_concurrency_is_a_rate_limit_error(
    server: Gateway, client: openai.OpenAI
) -> None:
    # ASR_TRANSCRIBE_CONCURRENCY=1: a held upload takes the one place, unless it came
    # while the SDK's request had it (then it is answered at once, and tried again).
    holder = Holder(server)
    refused = None
    for _ in range(100):
        try:
            client.audio.transcriptions.create(file=("a.wav", wav(SHORT)), model="whisper-1")
        except openai.RateLimitError as error:
            refused = error
            break
        if holder.answered():
            holder.sock.close()
            holder = Holder(server)
    assert holder.finish().startswith(b"HTTP/1.1 200 ")
    assert refused is not None
    assert (refused.code, refused.type) == ("rate_limit_exceeded", "requests")
    assert refused.response.headers["retry-after"] == "1"


def counted(server: Gateway, sample: str) -> float:
    with httpx.Client(base_url=server.http, trust_env=False) as http:
        metrics = http.get("/metrics", headers={"authorization": f"Bearer {KEY}"}).text
    found = re.search(re.escape(sample) + r" (\S+)", metrics)
    return float(found[1]) if found else 0.0


def test_answers_and_refusals_are_counted_as_the_file_endpoints_are(
    server: Gateway, client: openai.OpenAI
) -> None:
    refusals = 'asr_transcription_refusals_total{reason="model_not_found"}'
    statuses = ['asr_transcriptions_total{status="404"}', 'asr_transcriptions_total{status="200"}']
    before = [counted(server, sample) for sample in (refusals, *statuses)]
    with pytest.raises(openai.NotFoundError):
        client.audio.transcriptions.create(file=("a.wav", wav(SHORT)), model="nope")
    client.audio.transcriptions.create(file=("a.wav", wav(SHORT)), model="whisper-1")
    after = [counted(server, sample) for sample in (refusals, *statuses)]
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 1]


def test_a_form_that_is_not_multipart_is_a_415(server: Gateway) -> None:
    with httpx.Client(base_url=server.http, trust_env=False) as http:
        response = http.post(
            "/v1/audio/transcriptions",
            json={"model": "whisper-1"},
            headers={"authorization": f"Bearer {KEY}"},
        )
    assert response.status_code == 415
    assert response.json()["error"]["type"] == "invalid_request_error"
