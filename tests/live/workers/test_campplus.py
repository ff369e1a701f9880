"""CAM++: the synthetic build, and the engine's speaker turns against funasr's own
``generate(spk_model=...)`` on the same audio."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from gateway.funasr.known_speakers import SAME_SPEAKER
from shared.messages import EngineSpec, SpeakerTurn, StreamOptions
from tests.helpers.speakers import funasr_sentence_info, funasr_speaker_centres
from workers.engines.base import ChunkItem
from workers.engines.campplus.engine import CamppEngine
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.runtime.funasr_quiet import quiet_funasr
from workers.engines.runtime.model_dir import model_class
from workers.models.synthetic.voices import HIGH, LOW, conversation, speak

pytestmark = pytest.mark.slow

REFERENCE = Path(__file__).parents[3] / ".." / "shared" / "reference" / "campplus-sv-zh.yaml"
# Two voices taking turns, 2 s apart (the synthetic FSMN-VAD's sentence end needs > 1.5 s of
# silence), 3 s each: 32 windows of 1.5 s, past the 20 under which funasr clusters nothing.
TURNS = [(LOW, 3.0), (HIGH, 3.0)] * 4
PAUSE_S = 2.0


@pytest.fixture(scope="module")
def audio() -> np.ndarray:
    return conversation(TURNS, PAUSE_S, seed=3)


@pytest.fixture(scope="module")
def engine(campplus_model: Path) -> CamppEngine:
    return CamppEngine.load(EngineSpec("campplus", model_dir=str(campplus_model)))


@pytest.fixture(scope="module")
def funasr_regions(audio: np.ndarray, tiny_vad_model: Path) -> list[tuple[int, int]]:
    """FunASR's FSMN-VAD's speech regions of the whole file, as ``generate`` finds them."""
    vad = load_automodel(str(tiny_vad_model), "cpu", 1)
    regions = vad.generate(input=to_float(audio), disable_pbar=True)[0]["value"]
    return [(int(start), int(end)) for start, end in regions]


def test_the_build_has_the_real_architecture(campplus_model: Path) -> None:
    assert model_class(campplus_model) == "CAMPPlus"
    config = yaml.safe_load((campplus_model / "config.yaml").read_text())
    if REFERENCE.is_file():  # the team's reference (outside the repository)
        reference = yaml.safe_load(REFERENCE.read_text())
        assert config == {key: reference[key] for key in ("model", "model_conf")}
    model = load_automodel(str(campplus_model), "cpu", 1).model
    assert 6_500_000 < sum(p.numel() for p in model.parameters()) < 7_500_000
    assert not model.training


def test_turns_follow_the_two_voices(
    engine: CamppEngine, audio: np.ndarray, funasr_regions: list[tuple[int, int]]
) -> None:
    assert len(funasr_regions) == len(TURNS)  # one region per turn: each window is one voice
    turns = engine.speaker_turns(audio, funasr_regions)
    # Each region is one turn of one voice; the low voice speaks first, so it is speaker 0.
    assert [turn.speaker for turn in turns] == [0, 1] * 4
    for turn, (start, end) in zip(turns, funasr_regions, strict=True):
        assert (turn.start, turn.end) == (start, end)


def test_labels_equal_funasrs_generate_with_a_speaker_model(
    engine: CamppEngine,
    audio: np.ndarray,
    funasr_regions: list[tuple[int, int]],
    tiny_timestamp_model: Path,
    tiny_vad_model: Path,
    tiny_punc_model: Path,
    campplus_model: Path,
) -> None:
    """funasr's own pipeline end to end: VAD, ASR with token times, punctuation, CAM++ and
    clustering; each of its sentences' speaker is where our turns put that sentence."""
    with quiet_funasr():
        from funasr.models.campplus.utils import distribute_spk
    sentences = funasr_sentence_info(
        audio, tiny_timestamp_model, tiny_vad_model, tiny_punc_model, campplus_model
    )
    funasr_labels = [sentence["spk"] for sentence in sentences]
    assert set(funasr_labels) == {0, 1}  # both voices heard: the comparison can fail
    turns = engine.speaker_turns(audio, funasr_regions)
    ours = copy.deepcopy([{"start": s["start"], "end": s["end"]} for s in sentences])
    distribute_spk(ours, [(t.start / 1000, t.end / 1000, t.speaker) for t in turns])
    assert [sentence["spk"] for sentence in ours] == funasr_labels


def test_the_engine_takes_a_file_as_one_stream_and_answers_at_its_end(
    engine: CamppEngine, audio: np.ndarray, funasr_regions: list[tuple[int, int]]
) -> None:
    engine.open_stream(7, StreamOptions(speech_regions=tuple(funasr_regions)))
    pieces = np.array_split(audio, 5)
    outputs = []
    for seq, piece in enumerate(pieces):
        outputs += engine.feed([ChunkItem(7, seq, piece, final=seq == len(pieces) - 1)])
    assert [output.decoded.speakers for output in outputs[:-1]] == [()] * 4
    assert outputs[-1].final
    assert outputs[-1].error is None
    assert outputs[-1].decoded.speakers == engine.speaker_turns(audio, funasr_regions)
    assert engine.active_streams == 0


def test_under_twenty_windows_is_one_speaker_and_no_speech_no_turns(
    engine: CamppEngine, audio: np.ndarray, funasr_regions: list[tuple[int, int]]
) -> None:
    # Two turns, one of each voice: 8 windows, which funasr gives to one speaker.
    two = engine.speaker_turns(audio, funasr_regions[:2])
    assert {turn.speaker for turn in two} == {0}
    assert two[0] == SpeakerTurn(funasr_regions[0][0], two[0].end, 0)
    assert engine.speaker_turns(audio, []) == ()
    # A region past the audio's end has nothing to embed.
    assert engine.speaker_turns(audio[:16000], [(5000, 6000)]) == ()


def test_each_speakers_voiceprint_is_funasrs_speaker_centre_normalised(
    engine: CamppEngine,
    audio: np.ndarray,
    funasr_regions: list[tuple[int, int]],
    tiny_timestamp_model: Path,
    tiny_vad_model: Path,
    tiny_punc_model: Path,
    campplus_model: Path,
) -> None:
    """``generate(return_spk_center=True)``'s centres, label by label: the mean embedding
    of each speaker's windows, which the voiceprints are, made unit length."""
    decoded = engine.diarize(audio, funasr_regions)
    assert decoded.speakers == engine.speaker_turns(audio, funasr_regions)
    centres = funasr_speaker_centres(
        audio, tiny_timestamp_model, tiny_vad_model, tiny_punc_model, campplus_model
    )
    assert centres.shape == (2, 192)  # the two voices: the comparison can fail
    expected = centres / np.linalg.norm(centres, axis=1, keepdims=True)
    np.testing.assert_allclose(np.array(decoded.voiceprints), expected, atol=1e-5)


def test_a_clip_of_one_voice_is_one_speaker_whose_voiceprint_is_its_own(
    engine: CamppEngine, audio: np.ndarray, funasr_regions: list[tuple[int, int]]
) -> None:
    """A reference clip (under 20 windows, one region over it all) is one speaker, and its
    voiceprint is near the cluster of its voice in a conversation, far from the other's."""
    conversation_prints = np.array(engine.diarize(audio, funasr_regions).voiceprints)
    for voice, label in ((LOW, 0), (HIGH, 1)):
        clip = speak(voice, 6.0, seed=20 + label)
        decoded = engine.diarize(clip, [(0, 6000)])
        assert {turn.speaker for turn in decoded.speakers} == {0}
        (voiceprint,) = decoded.voiceprints
        assert abs(np.linalg.norm(voiceprint) - 1.0) < 1e-9
        similarity = conversation_prints @ np.array(voiceprint)
        assert similarity[label] >= SAME_SPEAKER > similarity[1 - label]
