"""Speaker labels through a real uvicorn: FSMN-VAD, a BiCifParaformer with punctuation, and
CAM++ in a speaker pool. The turns the gateway answers with give each of funasr's own
sentences (``generate(spk_model=...)`` on the same file) the speaker funasr gives it; our
sentences' ``spk`` are funasr's ``distribute_spk`` of our turns; OpenAI's SDK reads a
``speaker`` on each ``verbose_json`` segment, and ``diarized_json``'s speakers named by known
speakers: a request's reference clips, and the server's set (ASR_SPEAKERS, made by
``python -m gateway.ops.enrol``); so are a FunASR ``offline`` result's, by its config's
``spk_refs``. A client that resets its connection after its upload stops the VAD, the
speakers and the decodes at once and gives its place back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from bench.common.gateway import Gateway, serve_blocking
from gateway.funasr.speaker_labels import sentence_speakers
from shared.messages import SpeakerTurn
from tests.helpers.http_reset import send_then_reset
from tests.helpers.speaker_clients import (
    clip_base64,
    clip_url,
    metric,
    offline_session,
    refused_config,
    wav,
    workers_cpu,
)
from tests.helpers.speakers import funasr_sentence_info
from workers.models.synthetic.voices import HIGH, LOW, Voice, conversation, speak

pytestmark = pytest.mark.slow

# As tests/live/workers/test_campplus.py: two voices, 2 s apart, 32 windows in all.
AUDIO = conversation([(LOW, 3.0), (HIGH, 3.0)] * 4, 2.0, seed=3)
# A third voice, the server's known speaker: the synthetic CAM++ puts it far from both of
# AUDIO's (its clip's cosines with their voiceprints are 0.23 and 0.02), so it names neither,
# and a conversation of it with the low voice is two speakers (its clip: 0.80 to its own).
CAROL = Voice(180.0, 3.0)


@pytest.fixture(scope="module")
def speakers_file(campplus_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ASR_SPEAKERS as an operator makes it: the enrolment command on a clip of carol."""
    folder = tmp_path_factory.mktemp("enrol")
    clip = folder / "carol.wav"
    clip.write_bytes(wav(speak(CAROL, 6.0, seed=30)))
    out = folder / "speakers.json"
    command = [sys.executable, "-m", "gateway.ops.enrol", str(out), f"carol={clip}"]
    enrolled = subprocess.run(
        [*command, "--model", str(campplus_model)], capture_output=True, text=True, timeout=300
    )
    assert enrolled.returncode == 0, enrolled.stderr
    assert enrolled.stdout.strip() == f"{out}: 1 speakers (carol)"
    return out


@pytest.fixture(scope="module")
def server(
    tiny_timestamp_model: Path,
    tiny_punc_model: Path,
    tiny_vad_model: Path,
    campplus_model: Path,
    speakers_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_OFFLINE_MODEL": str(tiny_timestamp_model),
        "ASR_PUNC_MODEL": str(tiny_punc_model),
        "ASR_VAD_MODEL": str(tiny_vad_model),
        "ASR_SPEAKER_MODEL": str(campplus_model),
        "ASR_SPEAKERS": str(speakers_file),
        # A FunASR config with two 6 s clips in base64 is 512 KiB of text, which costs a
        # token of the frame budget per KiB (gateway.limits.rate): room for both.
        "ASR_MAX_TEXT_BYTES": str(1 << 20),
        "ASR_MAX_FRAMES_PER_SECOND": "1000",
    }
    log = tmp_path_factory.mktemp("speakers") / "server.log"
    with serve_blocking(env, log, ready_timeout=240) as server:
        yield server


def transcribe(server: Gateway, **fields: str) -> httpx.Response:
    files = {"file": ("talk.wav", wav(AUDIO), "audio/wav")}
    return httpx.post(server.http + "/v1/transcribe", files=files, data=fields, timeout=120)


@pytest.fixture(scope="module")
def answer(server: Gateway) -> dict[str, Any]:
    response = transcribe(server, speakers="true")
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture(scope="module")
def funasr_sentences(
    tiny_timestamp_model: Path, tiny_vad_model: Path, tiny_punc_model: Path, campplus_model: Path
) -> list[dict[str, Any]]:
    return funasr_sentence_info(
        AUDIO, tiny_timestamp_model, tiny_vad_model, tiny_punc_model, campplus_model
    )


def turns_of(answer: dict[str, Any]) -> list[SpeakerTurn]:
    return [SpeakerTurn(t["start"], t["end"], t["spk"]) for t in answer["speakers"]]


def test_the_turns_follow_the_voices(answer: dict[str, Any]) -> None:
    turns = turns_of(answer)
    assert [turn.speaker for turn in turns] == [0, 1] * 4
    for index, turn in enumerate(turns):  # each turn: 3 s of speech after 2 s of quiet
        speech_start = 2000 + 5000 * index
        assert speech_start - 400 <= turn.start <= speech_start + 100
        assert speech_start + 2900 <= turn.end <= speech_start + 3400


def test_funasrs_sentences_get_funasrs_speakers_from_our_turns(
    answer: dict[str, Any], funasr_sentences: list[dict[str, Any]]
) -> None:
    expected = [sentence["spk"] for sentence in funasr_sentences]
    assert set(expected) == {0, 1}  # both voices: the comparison can fail
    spans = [(sentence["start"], sentence["end"]) for sentence in funasr_sentences]
    assert sentence_speakers(spans, turns_of(answer)) == expected


def test_each_sentence_has_its_speaker(answer: dict[str, Any]) -> None:
    sentences = answer["sentences"]
    assert sentences
    spans = [(sentence["start"], sentence["end"]) for sentence in sentences]
    assert [s["spk"] for s in sentences] == sentence_speakers(spans, turns_of(answer))
    assert {s["spk"] for s in sentences} == {0, 1}


def test_spk_is_funasr_servers_spelling_and_without_either_there_are_no_speakers(
    server: Gateway, answer: dict[str, Any]
) -> None:
    spelled = transcribe(server, spk="True").json()
    assert spelled["speakers"] == answer["speakers"]
    plain = transcribe(server).json()
    assert "speakers" not in plain
    assert all("spk" not in sentence for sentence in plain["sentences"])
    assert plain["text"] == answer["text"]
    refused = transcribe(server, speakers="maybe")
    assert refused.status_code == 400
    assert "not true or false" in refused.json()["error"]["message"]


def test_openais_sdk_reads_a_speaker_on_each_segment(
    server: Gateway, answer: dict[str, Any]
) -> None:
    with openai.OpenAI(base_url=server.http + "/v1", api_key="k", max_retries=0) as client:
        verbose = client.audio.transcriptions.create(
            model="whisper-1",
            file=("talk.wav", wav(AUDIO)),
            response_format="verbose_json",
            extra_body={"speakers": "true"},
        )
        segments = [json.loads(s.model_dump_json()) for s in verbose.segments or []]
        assert len(segments) == len(answer["sentences"])
        assert [s["speaker"] for s in segments] == [s["spk"] for s in answer["sentences"]]
        with pytest.raises(openai.BadRequestError, match="stream=true"):
            client.audio.transcriptions.create(
                model="whisper-1",
                file=("talk.wav", wav(AUDIO)),
                stream=True,
                extra_body={"speakers": "true"},
            )


def test_openais_sdk_reads_diarized_json_with_speakers_as_letters(
    server: Gateway, answer: dict[str, Any]
) -> None:
    """``gpt-4o-transcribe-diarize``'s format: a segment per sentence, each speaker a letter
    in the order they first speak; the same sentences and the same turns as our answer."""
    with openai.OpenAI(base_url=server.http + "/v1", api_key="k", max_retries=0) as client:
        diarized = client.audio.transcriptions.create(
            model="gpt-4o-transcribe-diarize",
            file=("talk.wav", wav(AUDIO)),
            response_format="diarized_json",
        )
    assert diarized.text == answer["text"]
    assert [s.text for s in diarized.segments] != []
    expected: dict[int, str] = {}
    for sentence in answer["sentences"]:
        expected.setdefault(sentence["spk"], "ABCDEFGH"[len(expected)])
    assert [s.speaker for s in diarized.segments] == [
        expected[s["spk"]] for s in answer["sentences"]
    ]
    assert len(set(expected)) > 1  # the voices were told apart: a test that can fail
    assert [s.id for s in diarized.segments] == [f"seg_{n}" for n in range(len(diarized.segments))]


# -- speakers by name --------------------------------------------------------------------------


def diarized_speakers(server: Gateway, audio: np.ndarray = AUDIO, **known: Any) -> list[str]:
    """``diarized_json``'s speakers through OpenAI's SDK, segment by segment."""
    with openai.OpenAI(base_url=server.http + "/v1", api_key="k", max_retries=0) as client:
        diarized = client.audio.transcriptions.create(
            model="gpt-4o-transcribe-diarize",
            file=("talk.wav", wav(audio)),
            response_format="diarized_json",
            **known,
        )
    return [segment.speaker for segment in diarized.segments]


def test_known_speakers_name_the_speakers_they_sound_like(
    server: Gateway, answer: dict[str, Any]
) -> None:
    speakers = diarized_speakers(
        server,
        known_speaker_names=["bob", "alice"],
        known_speaker_references=[clip_url(HIGH, 6.0, seed=11), clip_url(LOW, 6.0, seed=12)],
    )
    named = {0: "alice", 1: "bob"}  # speaker 0 is the low voice, which speaks first
    assert speakers == [named[sentence["spk"]] for sentence in answer["sentences"]]


def test_a_reference_like_no_speaker_leaves_a_letter(
    server: Gateway, answer: dict[str, Any]
) -> None:
    # dora sounds like carol, whom AUDIO does not have: the high voice keeps its letter.
    speakers = diarized_speakers(
        server,
        known_speaker_names=["dora", "alice"],
        known_speaker_references=[clip_url(CAROL, 4.0, seed=13), clip_url(LOW, 4.0, seed=14)],
    )
    named = {0: "alice", 1: "B"}
    assert speakers == [named[sentence["spk"]] for sentence in answer["sentences"]]


def test_the_servers_known_speaker_names_its_voice_and_a_reference_counts_first(
    server: Gateway,
) -> None:
    audio = conversation([(LOW, 3.0), (CAROL, 3.0)] * 4, 2.0, seed=5)
    plain = diarized_speakers(server, audio)  # ASR_SPEAKERS names carol; the low voice is A
    assert plain[0] == "A"
    assert set(plain) == {"A", "carol"}
    # The request's carol is the low voice: it counts over the server's carol, whose voice
    # then has no name, and keeps its letter.
    theirs = diarized_speakers(
        server,
        audio,
        known_speaker_names=["carol"],
        known_speaker_references=[clip_url(LOW, 6.0, seed=15)],
    )
    assert theirs == [{"A": "carol", "carol": "B"}[speaker] for speaker in plain]


def test_known_speakers_out_of_bounds_are_refused_where_used_and_ignored_elsewhere(
    server: Gateway, answer: dict[str, Any]
) -> None:
    short = clip_url(LOW, 1.0, seed=16)
    with openai.OpenAI(base_url=server.http + "/v1", api_key="k", max_retries=0) as client:

        def create(response_format: Any, names: list[str], references: list[str]) -> Any:
            return client.audio.transcriptions.create(
                model="gpt-4o-transcribe-diarize",
                file=("talk.wav", wav(AUDIO)),
                response_format=response_format,
                known_speaker_names=names,
                known_speaker_references=references,
            )

        with pytest.raises(openai.BadRequestError, match="a reference lasts 2 to 10 s"):
            create("diarized_json", ["alice"], [short])
        with pytest.raises(openai.BadRequestError, match="at most 4 are taken"):
            create("diarized_json", list("abcde"), [short] * 5)
        with pytest.raises(openai.BadRequestError, match="they pair up"):
            create("diarized_json", ["alice", "bob"], [short])
        # OpenAI's rule: what a format does not use is ignored, never refused.
        assert create("json", ["alice"], ["not a clip"]).text == answer["text"]


def test_the_offline_mode_labels_its_sentences_with_spk(
    server: Gateway, answer: dict[str, Any]
) -> None:
    (frame,) = offline_session(server, AUDIO, spk=True)
    assert frame["mode"] == "offline"
    assert frame["speakers"] == answer["speakers"]  # the same file, the same turns
    sentences = frame["stamp_sents"]
    spans = [(sentence["start"], sentence["end"]) for sentence in sentences]
    assert [s["spk"] for s in sentences] == sentence_speakers(spans, turns_of(answer))
    (plain,) = offline_session(server, AUDIO)
    assert "speakers" not in plain
    assert plain["text"] == frame["text"]
    assert all("spk" not in sentence for sentence in plain["stamp_sents"])


def test_the_offline_mode_names_the_speakers_its_configs_clips_sound_like(server: Gateway) -> None:
    (frame,) = offline_session(
        server,
        AUDIO,
        spk=True,
        spk_names=["bob", "alice"],
        spk_refs=[clip_base64(HIGH, 6.0, seed=11), clip_base64(LOW, 6.0, seed=12)],
    )
    assert frame["speaker_names"] == {"0": "alice", "1": "bob"}  # the low voice speaks first
    sentences = frame["stamp_sents"]
    assert {s["spk"] for s in sentences} == {0, 1}  # both voices: the names can be wrong
    assert [s["spk_name"] for s in sentences] == [
        frame["speaker_names"][str(s["spk"])] for s in sentences
    ]
    # The ints, the turns and the text are what they are without names.
    (plain,) = offline_session(server, AUDIO, spk=True)
    assert [s["spk"] for s in sentences] == [s["spk"] for s in plain["stamp_sents"]]
    assert (frame["speakers"], frame["text"]) == (plain["speakers"], plain["text"])
    assert plain["speaker_names"] == {}  # ASR_SPEAKERS' carol is neither voice


def test_an_offline_clip_like_no_speaker_names_none(server: Gateway) -> None:
    # dora sounds like carol, whom AUDIO does not have (nor does the server's carol name
    # either voice): no sentence gets a name.
    dora = clip_base64(CAROL, 4.0, seed=13)
    (frame,) = offline_session(server, AUDIO, spk=True, spk_names=["dora"], spk_refs=[dora])
    assert frame["speaker_names"] == {}
    assert frame["stamp_sents"]
    assert all("spk_name" not in sentence for sentence in frame["stamp_sents"])


def test_an_offline_configs_clip_out_of_bounds_is_refused_by_name(server: Gateway) -> None:
    short = clip_base64(LOW, 1.0, seed=16)
    error, code = refused_config(
        server, mode="offline", spk=True, spk_names=["alice"], spk_refs=[short]
    )
    assert code == 1008
    assert "spk_refs[0]: the clip lasts 1.00 s; a reference lasts 2 to 10 s" in error["message"]


def test_spk_in_the_online_mode_is_refused_by_name(server: Gateway) -> None:
    error, code = refused_config(server, mode="online", spk=True)
    assert code == 1008
    assert "offline and 2pass modes" in error["message"]


def test_2pass_sentences_get_live_speakers_as_funasrs_generate_labels_them(
    server: Gateway, funasr_sentences: list[dict[str, Any]]
) -> None:
    """A 2pass session with ``spk``: each 2pass-offline frame's live speaker labels its
    sentences as funasr's ``generate(spk_model=...)`` labels the ones they overlap most, up
    to renaming, one id per voice (a sentence of no one's speech, overlapping none of
    funasr's, is left out); the end's revisions say what each relabelled sentence was."""
    frames = offline_session(server, AUDIO, mode="2pass", spk=True)
    offline = [f for f in frames if f["mode"] == "2pass-offline"]
    assert offline[-1]["is_final"]
    live = {f["sentence"]: f["spk"] for f in offline}
    revisions = [change for f in frames for change in f.get("spk_revisions", [])]
    assert all(live[change["sentence"]] == change["was"] != change["spk"] for change in revisions)
    ours, theirs = [], []
    for frame in offline:
        for sentence in frame.get("stamp_sents", []):
            assert sentence["spk"] == frame["spk"]

            def overlap(other: dict[str, Any], sentence: dict[str, Any] = sentence) -> int:
                return int(
                    min(other["end"], sentence["end"]) - max(other["start"], sentence["start"])
                )

            best = max(funasr_sentences, key=overlap)
            if overlap(best) > 0:
                ours.append(frame["spk"])
                theirs.append(best["spk"])
    assert len(set(theirs)) == 2  # funasr hears the two voices
    renaming = dict(zip(ours, theirs, strict=True))
    why = f"ours {ours}, funasr's {theirs}"
    assert [renaming[label] for label in ours] == theirs, why
    assert len(set(renaming.values())) == len(renaming), why  # one of ours per one of theirs


# -- a client that leaves after its upload ---------------------------------------------------

# Long enough that its transcription with speakers takes the workers many CPU seconds.
LONG_AUDIO = conversation([(LOW, 3.0), (HIGH, 3.0)] * 5, 2.0, seed=4)
QUIET_CPU_S = 0.25  # the workers' CPU in the second after the place is back: idle


def _upload(path: str, **fields: str) -> httpx.Request:
    files = {"file": ("long.wav", wav(LONG_AUDIO), "audio/wav")}
    return httpx.Request("POST", "http://127.0.0.1" + path, files=files, data=fields)


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        pytest.param("/v1/transcribe", {"speakers": "true"}, id="transcribe"),
        pytest.param(
            "/v1/audio/transcriptions",
            {"model": "whisper-1", "response_format": "verbose_json", "speakers": "true"},
            id="openai",
        ),
        pytest.param(
            "/v1/audio/transcriptions", {"model": "whisper-1", "stream": "true"}, id="openai-sse"
        ),
    ],
)
def test_a_client_reset_after_its_upload_stops_the_work_and_frees_the_place(
    server: Gateway, path: str, fields: dict[str, str]
) -> None:
    gone_before = metric(server, "asr_transcriptions_total", status="499")
    cpu_before = workers_cpu(server)
    reset_at = time.monotonic()
    send_then_reset(server.port, _upload(path, **fields), hold_s=1.0)
    # The place is given back at once.
    deadline = time.monotonic() + 5.0
    while metric(server, "asr_transcriptions_active") > 0:
        assert time.monotonic() < deadline, "the place is still held"
        time.sleep(0.05)
    freed_after = time.monotonic() - reset_at
    # The workers were at work, and stop: a step begun may end, no new one starts.
    spent = workers_cpu(server) - cpu_before
    assert spent > 0.1, "the work never started: nothing to stop"
    time.sleep(0.3)
    quiet_from = workers_cpu(server)
    time.sleep(1.0)
    assert workers_cpu(server) - quiet_from < QUIET_CPU_S
    assert freed_after < 3.0
    # Counted as a client gone, unless the answer had begun (a stream is counted 200 once
    # its events start: the VAD's cuts come first, then the decodes stream).
    gone = metric(server, "asr_transcriptions_total", status="499") - gone_before
    assert gone == (0 if fields.get("stream") == "true" else 1)


def test_a_client_reset_mid_upload_is_a_counted_400_and_frees_the_place(server: Gateway) -> None:
    disconnected = metric(server, "asr_transcription_refusals_total", reason="disconnected")
    request = _upload("/v1/transcribe", speakers="true")
    half = len(request.read()) // 2
    send_then_reset(server.port, request, hold_s=0.5, body_bytes=half)
    deadline = time.monotonic() + 5.0
    while metric(server, "asr_transcriptions_active") > 0:
        assert time.monotonic() < deadline, "the place is still held"
        time.sleep(0.05)
    while metric(server, "asr_transcription_refusals_total", reason="disconnected") == (
        disconnected
    ):
        assert time.monotonic() < deadline, "the disconnect was not counted"
        time.sleep(0.05)
