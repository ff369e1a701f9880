"""gateway.openai_api.formats, errors and the request's fields without a socket; and how the
SDK reads the bytes we stream (its ``Stream`` over an in-memory transport)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import httpx2
import openai
import pytest
from openai.types.audio import TranscriptionStreamEvent, TranscriptionVerbose

from gateway.files.errors import TranscribeError
from gateway.files.multipart import Form
from gateway.openai_api.errors import (
    OpenAIError,
    error_response,
    openai_error_body,
    stream_error_event,
)
from gateway.openai_api.formats import (
    FileTranscript,
    TimedSegment,
    compression_ratio,
    delta_event,
    diarized_json,
    done_event,
    render,
    speaker_letter,
    srt,
    sse,
    timecode,
    verbose_json,
    vtt,
    words_of,
)
from gateway.openai_api.transcriptions import TranscriptionRequest, parse_request
from shared.messages import SpeakerTurn

TWO = FileTranscript(
    text="你好 hello world",
    duration_s=4.25,
    language="zh",
    segments=(
        TimedSegment(0, 2000, "你好", ((120, 400), (400, 730))),
        TimedSegment(2000, 3500, "", ()),  # silence: no cue, no segment
        TimedSegment(3500, 4250, "hello world", ()),
    ),
)


@pytest.mark.parametrize(
    ("ms", "srt_code", "vtt_code"),
    [
        (0, "00:00:00,000", "00:00:00.000"),
        (1000, "00:00:01,000", "00:00:01.000"),
        (61_042, "00:01:01,042", "00:01:01.042"),
        (3_723_004, "01:02:03,004", "01:02:03.004"),
    ],
)
def test_timecodes_are_hours_minutes_seconds_millis(ms: int, srt_code: str, vtt_code: str) -> None:
    assert timecode(ms, ",") == srt_code
    assert timecode(ms, ".") == vtt_code


def test_srt_has_a_numbered_cue_per_segment_with_text_timed_by_its_tokens() -> None:
    assert srt(TWO) == (
        "1\n00:00:00,120 --> 00:00:00,730\n你好\n\n"
        "2\n00:00:03,500 --> 00:00:04,250\nhello world\n\n"
    )


def test_vtt_has_its_header_and_a_cue_per_segment_with_text() -> None:
    assert vtt(TWO) == (
        "WEBVTT\n\n00:00:00.120 --> 00:00:00.730\n你好\n\n"
        "00:00:03.500 --> 00:00:04.250\nhello world\n\n"
    )


def test_verbose_json_follows_the_sdks_types_field_by_field() -> None:
    body = verbose_json(TWO, ("segment", "word"))
    parsed = TranscriptionVerbose.model_validate(body)  # strict: validated
    assert (parsed.language, parsed.duration, parsed.text) == ("zh", 4.25, TWO.text)
    assert body["task"] == "transcribe"
    assert parsed.segments is not None
    first, second = parsed.segments
    assert (first.id, first.seek, first.start, first.end, first.text) == (0, 0, 0.12, 0.73, "你好")
    assert (second.id, second.seek, second.start, second.end) == (1, 350, 3.5, 4.25)
    assert (first.tokens, first.temperature, first.avg_logprob, first.no_speech_prob) == (
        [],
        0.0,
        0.0,
        0.0,
    )
    assert first.compression_ratio == compression_ratio("你好")
    assert parsed.words is not None
    assert [(w.word, w.start, w.end) for w in parsed.words] == [
        ("你", 0.12, 0.4),
        ("好", 0.4, 0.73),
    ]
    assert parsed.usage is not None
    assert (parsed.usage.type, parsed.usage.seconds) == ("duration", 5)  # rounded up


def test_verbose_json_has_words_only_when_asked() -> None:
    assert "words" not in verbose_json(TWO, ("segment",))


@pytest.mark.parametrize(
    ("text", "times", "words"),
    [
        ("欢迎大家", ((0, 1), (1, 2), (2, 3), (3, 4)), ["欢", "迎", "大", "家"]),
        (
            "欢迎\uff0chello world\u3002",
            ((0, 1), (1, 2), (2, 3), (3, 4)),
            ["欢", "迎", "hello", "world"],
        ),
        ("欢迎大家", ((0, 1), (1, 2)), []),  # counts differ: no word gets another's time
        ("欢迎", (), []),
    ],
    ids=["cjk", "punctuated", "mismatch", "no-times"],
)
def test_words_pair_tokens_with_their_times_or_none(
    text: str, times: tuple[tuple[int, int], ...], words: list[str]
) -> None:
    assert [word for word, _ in words_of(TimedSegment(0, 9, text, times))] == words


def test_json_and_text_bodies() -> None:
    json_body = render(TWO, "json")
    assert json.loads(json_body.body) == {
        "text": TWO.text,
        "usage": {"type": "duration", "seconds": 5},
    }
    assert json_body.media_type == "application/json"
    assert render(TWO, "text").body == TWO.text + "\n"


def test_events_are_one_data_line_each_that_the_sdk_parses() -> None:
    frames = [
        sse(delta_event("第一\n行")),
        sse(delta_event(" two")),
        sse(done_event("第一\n行 two", 1.5)),
    ]
    assert all(frame.startswith(b"data: {") and frame.count(b"\n") == 2 for frame in frames)
    events = list(stream_of(b"".join(frames)))
    assert [event.type for event in events] == [
        "transcript.text.delta",
        "transcript.text.delta",
        "transcript.text.done",
    ]
    assert events[-1].text == "第一\n行 two"  # type: ignore[union-attr]


def test_an_stream_error_event_is_raised_by_the_sdks_stream_with_its_code() -> None:
    error = TranscribeError(503, "unavailable", "no worker is ready")
    body = sse(delta_event("a")) + sse(stream_error_event(error))
    stream = stream_of(body)
    assert next(stream).type == "transcript.text.delta"
    with pytest.raises(openai.APIError) as raised:
        next(stream)
    assert raised.value.message == "no worker is ready"
    assert (raised.value.code, raised.value.type) == ("unavailable", "server_error")


def stream_of(body: bytes) -> openai.Stream[TranscriptionStreamEvent]:
    """The SDK's own ``Stream`` over ``body`` as our server would send it."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = openai.OpenAI(
        base_url="http://gateway.test/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
    )
    return client.audio.transcriptions.create(file=("a.wav", b"RIFF"), model="m", stream=True)


@pytest.mark.parametrize(
    ("error", "expected", "headers"),
    [
        (
            TranscribeError(401, "unauthorized", "m"),
            ("authentication_error", None, "invalid_api_key"),
            {"www-authenticate": "Bearer"},
        ),
        (
            TranscribeError(429, "busy", "m"),
            ("requests", None, "rate_limit_exceeded"),
            {"retry-after": "1"},
        ),
        (TranscribeError(413, "too_long", "m"), ("invalid_request_error", "file", "too_long"), {}),
        (TranscribeError(403, "forbidden_origin", "m"), ("permission_error", None, None), {}),
        (
            TranscribeError(500, "internal", "m"),
            ("server_error", None, "internal"),
            {"x-should-retry": "false"},
        ),
        (TranscribeError(503, "unavailable", "m"), ("server_error", None, "unavailable"), {}),
    ],
    ids=["401", "429", "413", "403", "500", "503"],
)
def test_refusals_map_to_openais_type_param_code_and_headers(
    error: TranscribeError, expected: tuple[str, str | None, str | None], headers: dict[str, str]
) -> None:
    kind, param, code = expected
    mapped = OpenAIError.of(error)
    assert (mapped.type, mapped.param) == (kind, param)
    assert mapped.code == (code or error.reason)
    response = error_response(error)
    assert response.status_code == error.status
    assert json.loads(bytes(response.body)) == {
        "error": openai_error_body("m", kind, param, mapped.code)
    }
    assert {k: v for k, v in response.headers.items() if k in headers} == headers
    assert "x-should-retry" in headers or "x-should-retry" not in response.headers


def form(**fields: str | list[str]) -> Form:
    return Form(
        b"RIFF",
        "a.wav",
        {name: tuple(v) if isinstance(v, list) else (v,) for name, v in fields.items()},
    )


def test_a_request_takes_openais_fields() -> None:
    fields: dict[str, str | list[str]] = {
        "model": "whisper-1",
        "response_format": "verbose_json",
        "timestamp_granularities[]": ["word", "segment"],
        "language": "zh",
        "prompt": "阿里巴巴 达摩院",
        "keywords[]": ["FunASR", "达摩院"],
        "temperature": "0.2",
        "stream": "true",
        "include[]": ["logprobs"],
    }
    asked = parse_request(form(**fields), served=("checksum",))
    assert asked == TranscriptionRequest(
        model="whisper-1",
        response_format="verbose_json",
        granularities=("segment", "word"),
        language="zh",
        hotwords=("FunASR", "达摩院", "阿里巴巴"),  # the keywords first, each once
        stream=True,
    )
    assert parse_request(form(model="checksum"), served=("checksum",)) == TranscriptionRequest(
        "checksum"
    )


@pytest.mark.parametrize(
    ("fields", "status", "reason"),
    [
        ({}, 400, "bad_model"),
        ({"model": "whisper-9"}, 404, "model_not_found"),
        ({"response_format": "xml_json"}, 400, "bad_response_format"),
        ({"timestamp_granularities[]": ["segment", "char"]}, 400, "bad_timestamp_granularities"),
        ({"temperature": "hot"}, 400, "bad_temperature"),
        ({"temperature": "nan"}, 400, "bad_temperature"),
        ({"stream": "yes"}, 400, "bad_stream"),
        ({"include[]": ["everything"]}, 400, "bad_include"),
    ],
)
def test_a_bad_field_is_refused_by_name(
    fields: dict[str, str | list[str]], status: int, reason: str
) -> None:
    fields = {"model": "whisper-1", **fields} if fields else {}
    with pytest.raises(TranscribeError) as refused:
        parse_request(form(**fields), served=("checksum",))
    assert (refused.value.status, refused.value.reason) == (status, reason)
    assert OpenAIError.of(refused.value).param is not None


def test_a_prompt_is_free_text_never_refused() -> None:
    """OpenAI's prompt is prose: its words that fit a hotword are kept, the rest (a token
    over 32 characters, a URL, more words than a config takes) dropped without a 400."""
    fields: dict[str, str | list[str]] = {
        "model": "gpt-4o-transcribe",
        "prompt": "A call about a refund: 退款 and https://example.com/refund-policy "
        + "x" * 200
        + " "
        + " ".join(f"w{n}" for n in range(2000)),
        "keywords[]": ["Acme Cloud", "k" * 40],
        "languages[]": ["en", "zh"],  # read past by the form: not among FIELDS
    }
    hotwords = parse_request(form(**fields), served=("checksum",)).hotwords
    kept = ("Acme", "Cloud", "A", "call", "about", "a", "refund", "退款", "and", "w0")
    assert hotwords[: len(kept)] == kept
    assert len(hotwords) == 256


def test_diarized_json_is_openais_shape_with_speakers_lettered_in_order_of_speech() -> None:
    # The second speaker (1) speaks first: letters go by order of speech, not by number.
    turns = (SpeakerTurn(0, 2000, 1), SpeakerTurn(3400, 4300, 0))
    body = diarized_json(replace(TWO, speaker_turns=turns))
    assert body == {
        "task": "transcribe",
        "duration": TWO.duration_s,
        "text": TWO.text,
        "segments": [
            {
                "type": "transcript.text.segment",
                "id": "seg_0",
                "start": 0.12,
                "end": 0.73,
                "text": "你好",
                "speaker": "A",
            },
            {
                "type": "transcript.text.segment",
                "id": "seg_1",
                "start": 3.5,
                "end": 4.25,
                "text": "hello world",
                "speaker": "B",
            },
        ],
        "usage": {"type": "duration", "seconds": math.ceil(TWO.duration_s)},
    }
    assert render(TWO, "diarized_json").media_type == "application/json"


def test_speaker_letters_go_on_past_z() -> None:
    assert [speaker_letter(n) for n in (0, 1, 25, 26, 27, 701, 702)] == [
        "A",
        "B",
        "Z",
        "AA",
        "AB",
        "ZZ",
        "AAA",
    ]
