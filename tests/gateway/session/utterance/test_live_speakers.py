"""``2pass`` with ``"spk": true``, sans I/O: each sentence's windows embedded beside its
offline pass, its speaker on its frame from the utterance's live tracker, and the
tracker's end-of-utterance relabels as one revision frame before the final one."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from gateway.funasr.config import SessionConfig
from gateway.funasr.known_speakers import KnownSpeaker
from gateway.funasr.results import Label
from gateway.funasr.two_pass_frames import SentenceText, ShownPartials
from gateway.session.utterance import utterance_for
from gateway.session.utterance.actions import OpenStream, Pool, RelayResults
from gateway.speakers.tracker import SpeakerTracker
from shared.errors import ProtocolError
from shared.messages import Decoded, StreamResult
from tests.helpers.utterance import SETTINGS, audio_of, loud, opened, quiet

CONFIG = SessionConfig(mode="2pass", chunk_size=(0, 1, 5), spk=True)
SPEAKERS = replace(SETTINGS, speakers=True, speaker_tracker=SpeakerTracker())
DIMS = 192  # CAM++'s: random voices nearly orthogonal, as trained speakers are apart


def voice(seed: int) -> np.ndarray:
    centre = np.random.default_rng(seed).standard_normal(DIMS)
    return centre / np.linalg.norm(centre)


def windows(centre: np.ndarray, count: int, seed: int) -> tuple[tuple[float, ...], ...]:
    noise = np.random.default_rng(seed).standard_normal((count, DIMS)) * 0.05
    return tuple(tuple(float(v) for v in row) for row in centre + noise)


def sentence_frames(
    tracker: SpeakerTracker,
    number: int,
    embeddings: tuple[tuple[float, ...], ...],
    last: bool,
    known: tuple[KnownSpeaker, ...] = (),
) -> list[dict[str, Any]]:
    frames = SentenceText(
        ShownPartials(),
        number,
        _label(),
        final=last,
        offset_ms=0,
        text_is_delta=True,
        speakers=tracker,
        known=known,
    )
    frames.push(StreamResult(1, 0, Decoded(f"sentence {number}"), is_final=True), 0)
    frames.push(StreamResult(2, 0, Decoded(window_embeddings=embeddings), is_final=True), 0)
    return [json.loads(frame) for frame in frames.finish()]


def _label() -> Label:
    return Label("2pass", "talk")


def test_each_sentence_gets_its_speakers_id_and_a_returning_voice_its_old_one() -> None:
    tracker = SpeakerTracker()
    a, b = voice(1), voice(2)
    said = [
        sentence_frames(tracker, n, windows(centre, 6, n), last=n == 4)
        for n, centre in enumerate([a, b, a, b], start=1)
    ]
    offline = [frames[-1] for frames in said]
    assert [(f["sentence"], f["spk"]) for f in offline] == [(1, 0), (2, 1), (3, 0), (4, 1)]
    assert offline[-1]["is_final"]
    assert all(len(frames) == 1 for frames in said)  # no relabel: no revision frame


def test_a_relabel_at_the_end_goes_out_as_one_revision_frame_before_the_final() -> None:
    """Two voices close enough that the live tracker gives them one id; the re-cluster of
    the utterance at its end tells them apart, and says so before the final frame."""
    tracker = SpeakerTracker()
    a = voice(3)
    b = a + 0.9 * voice(4)
    b /= np.linalg.norm(b)
    sentences = [a, b] * 6
    said = [
        sentence_frames(tracker, n, windows(c, 4, n), last=n == len(sentences))
        for n, c in enumerate(sentences, start=1)
    ]
    *revision, final = said[-1]
    live = [frames[-1]["spk"] for frames in said]
    assert set(live) == {0}  # one id live (cosine 0.74: under what the tracker splits)
    (frame,) = revision
    assert (frame["mode"], frame["text"], frame["is_final"]) == ("2pass-online", "", False)
    changes = frame["spk_revisions"]
    assert all(live[c["sentence"] - 1] == c["was"] != c["spk"] for c in changes)
    relabelled = list(live)
    for change in changes:
        relabelled[change["sentence"] - 1] = change["spk"]
    assert len(set(relabelled[0::2])) == len(set(relabelled[1::2])) == 1
    assert relabelled[0] != relabelled[1]
    assert final["is_final"]


def test_2pass_with_spk_embeds_each_sentence_beside_its_offline_pass() -> None:
    utterance = utterance_for(CONFIG, SPEAKERS, vad=False)
    actions = utterance.start()
    first = loud(600) + quiet(900)
    actions += utterance.audio(first + loud(300))
    actions += utterance.end()
    offline = opened(actions, Pool.WHOLE)
    speaker = opened(actions, Pool.SPEAKER)
    assert len(offline) == len(speaker) == 2
    for whole, windows_of in zip(offline, speaker, strict=True):
        assert audio_of(actions, whole) == audio_of(actions, windows_of)
    options = [a.options for a in actions if isinstance(a, OpenStream) and a.stream in speaker]
    assert all(o.window_embeddings for o in options)
    for stream, asked in zip(speaker, options, strict=True):  # its speech, one region
        ((start, end),) = asked.speech_regions
        assert 0 <= start < end == len(audio_of(actions, stream)) // 32
    # The second sentence's audio starts a pre-roll before its speech: the windows do not.
    assert options[1].speech_regions[0][0] == SPEAKERS.endpoint.preroll_ms
    relays = [a for a in actions if isinstance(a, RelayResults) and len(a.streams) == 2]
    assert [r.streams for r in relays] == list(zip(offline, speaker, strict=True))


def test_spk_in_online_mode_or_without_a_speaker_model_is_refused() -> None:
    with pytest.raises(ProtocolError, match="offline and 2pass"):
        utterance_for(replace(CONFIG, mode="online"), SPEAKERS, vad=False)
    with pytest.raises(ProtocolError, match="no speaker model"):
        utterance_for(CONFIG, SETTINGS, vad=False)


def test_a_known_speakers_voice_names_its_id_and_another_voice_stays_unnamed() -> None:
    """The server's set (ASR_SPEAKERS): an id whose centre sounds like a known voiceprint
    gets its name on the frame and its sentences; the other voice's none."""
    tracker = SpeakerTracker()
    a, b = voice(5), voice(6)
    alice = KnownSpeaker("alice", tuple(float(v) for v in a))
    said = [
        sentence_frames(tracker, n, windows(c, 6, n), last=n == 3, known=(alice,))[-1]
        for n, c in enumerate([a, b, a], start=1)
    ]
    assert [f.get("spk_name") for f in said] == ["alice", None, "alice"]
