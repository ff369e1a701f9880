"""``2pass`` with the FSMN-VAD pool as a sans-I/O utterance: each piece waits for the VAD's
answer, and sentences end where the VAD says."""

from __future__ import annotations

from dataclasses import replace

from gateway.funasr.config import SessionConfig
from gateway.session.utterance import Utterance, utterance_for
from gateway.session.utterance.actions import (
    Action,
    AskVad,
    CloseStream,
    OpenStream,
    Pool,
    SendAudio,
)
from gateway.session.utterance.two_pass_vad import piece_bytes
from gateway.whole.vad import VAD_PIECE_BYTES, SpeechEnded, SpeechStarted
from tests.helpers.utterance import SETTINGS, audio_of, loud, names, opened

CONFIG = SessionConfig(mode="2pass", chunk_size=(0, 10, 5))


def answer_all(actions: list[Action], utterance: Utterance) -> list[Action]:
    """Answer every question with no speech heard; all the actions, in order."""
    answers = actions
    while answers and isinstance(answers[-1], AskVad):
        answers = utterance.vad_answered([])
        actions = actions + answers
    return actions


def test_the_config_opens_the_streaming_pass_and_a_vad_stream() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=True)
    actions = utterance.start()
    assert names(actions) == ["OpenStream", "RelayResults", "OpenStream"]
    (vad,) = opened(actions, Pool.VAD)
    assert isinstance(actions[2], OpenStream)
    assert actions[2].stream is vad


def test_each_piece_goes_to_the_vad_first_then_waits_for_its_answer() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=True)
    (vad,) = opened(utterance.start(), Pool.VAD)
    pcm = loud(500)  # two and a half pieces
    actions = utterance.audio(pcm)
    assert actions[0] == SendAudio(vad, pcm[:VAD_PIECE_BYTES])
    assert actions[-1] == AskVad(vad)
    assert names(actions)[-2] == "HoldAudio"
    second = utterance.vad_answered([])
    assert second[0] == SendAudio(vad, pcm[VAD_PIECE_BYTES : 2 * VAD_PIECE_BYTES])
    # Half a piece: held until the rest of it comes, or the end.
    assert utterance.vad_answered([]) == []
    third = utterance.audio(loud(100))
    assert third[0] == SendAudio(vad, pcm[2 * VAD_PIECE_BYTES :] + loud(100))


def test_the_end_waits_for_the_last_answer_then_drops_the_vad_stream() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=True)
    (vad,) = opened(utterance.start(), Pool.VAD)
    assert utterance.audio(loud(100)) == []  # half a piece
    assert utterance.end()[-1] == AskVad(vad)  # the end sends what there is
    assert utterance.end() == []  # the piece's answer first
    actions = utterance.vad_answered([])
    assert actions[0] == CloseStream(vad)
    assert "AskVad" not in names(actions)
    assert names(actions)[-5:] == [
        "FinishStream",
        "OpenStream",
        "RelayResults",
        "FinishStream",
        "ReleaseAudio",
    ]


def test_a_sentence_ends_after_the_piece_in_which_the_vad_heard_its_end() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=True)
    actions = utterance.start()
    pcm = loud(1000)  # five pieces
    actions += utterance.audio(pcm)  # piece 1
    actions += utterance.vad_answered([SpeechStarted(at_byte=100 * 32)])  # piece 2
    actions += utterance.vad_answered([])  # piece 3
    actions += utterance.vad_answered([SpeechEnded(at_byte=500 * 32)])  # ends; piece 4
    actions = answer_all(actions, utterance)
    actions += utterance.end()
    online = opened(actions, Pool.STREAMING)
    offline = opened(actions, Pool.WHOLE)
    assert len(online) == len(offline) == 2
    first = pcm[: 3 * VAD_PIECE_BYTES]
    assert audio_of(actions, online[0]) == first
    assert audio_of(actions, online[1]) == pcm[3 * VAD_PIECE_BYTES :]
    assert audio_of(actions, offline[0]) == first  # speech at 100 ms: preroll to 0
    assert audio_of(actions, offline[1]) == pcm[3 * VAD_PIECE_BYTES :]


def test_speech_long_before_the_end_skips_the_silence_before_the_preroll() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=True)
    actions = utterance.start()
    pcm = loud(1000)
    actions += utterance.audio(pcm)
    for _ in range(3):
        actions += utterance.vad_answered([])
    actions += utterance.vad_answered([SpeechStarted(at_byte=700 * 32)])
    actions = answer_all(actions, utterance)
    actions += utterance.end()
    (offline,) = opened(actions, Pool.WHOLE)
    assert audio_of(actions, offline) == pcm[400 * 32 :]


def test_a_sentence_the_vad_never_ends_is_cut_at_the_segment_limit() -> None:
    settings = replace(SETTINGS, max_segment_bytes=500 * 32)
    utterance = utterance_for(CONFIG, settings, vad=True)
    actions = utterance.start()
    pcm = loud(1200)
    actions = answer_all(actions + utterance.audio(pcm), utterance)
    actions += utterance.end()
    online = opened(actions, Pool.STREAMING)
    sizes = [len(audio_of(actions, stream)) for stream in online]
    assert sizes == [500 * 32, 500 * 32, 200 * 32]  # no piece crosses the limit


def test_pieces_are_whole_fractions_of_a_chunk() -> None:
    assert piece_bytes(SessionConfig(chunk_size=(5, 10, 5)).chunk_bytes) == VAD_PIECE_BYTES
    assert piece_bytes(SessionConfig(chunk_size=(0, 8, 4)).chunk_bytes) == 160 * 32
    assert piece_bytes(SessionConfig(chunk_size=(0, 1, 1)).chunk_bytes) == 60 * 32
    assert piece_bytes(SessionConfig(chunk_size=(0, 7, 1)).chunk_bytes) == 140 * 32


def test_a_chunk_is_whole_at_the_end_of_a_piece_whatever_the_frames() -> None:
    config = SessionConfig(mode="2pass", chunk_size=(0, 8, 4))  # 480 ms chunks
    utterance = utterance_for(config, SETTINGS, vad=True)
    (online,) = opened(utterance.start(), Pool.STREAMING)
    actions: list[Action] = []
    for _ in range(8):  # 60 ms frames
        sent = utterance.audio(loud(60))
        actions += sent
        if sent and isinstance(sent[-1], AskVad):
            actions += utterance.vad_answered([])
    assert audio_of(actions, online) == loud(60) * 8  # the chunk, sent at its last frame
