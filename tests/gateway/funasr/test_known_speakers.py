"""gateway.funasr.known_speakers: which speaker a known one names, and a reference's bounds."""

from __future__ import annotations

import base64
import math

import pytest

from gateway.funasr.known_speakers import (
    MAX_KNOWN_SPEAKERS,
    MAX_NAME_CHARS,
    REFERENCE_MAX_BYTES,
    SAME_SPEAKER,
    EnrolmentError,
    KnownSpeaker,
    check_clip_seconds,
    check_names,
    check_pairs,
    clip_bytes,
    name_speakers,
    normalised,
    speaker_names,
    with_server_set,
)
from shared.messages import MAX_VOICEPRINT_DIMS, SpeakerTurn


def towards(degrees: float) -> tuple[float, float]:
    """A unit voiceprint at ``degrees``: cosines between them are those of the angles."""
    return math.cos(math.radians(degrees)), math.sin(math.radians(degrees))


def known(name: str, degrees: float) -> KnownSpeaker:
    return KnownSpeaker(name, towards(degrees))


def test_a_speaker_at_least_as_alike_as_the_threshold_takes_the_name() -> None:
    edge = math.degrees(math.acos(SAME_SPEAKER))
    assert name_speakers({0: towards(0)}, [known("alice", edge - 0.5)]) == {0: "alice"}
    assert name_speakers({0: towards(0)}, [known("alice", edge + 0.5)]) == {}


def test_the_most_alike_pair_goes_first_and_each_name_is_used_once() -> None:
    # Speaker 0 is nearer to bob than to alice, and speaker 1 nearer still to bob: bob goes
    # to speaker 1 (the best pair), and speaker 0 gets alice, its second best.
    speakers = {0: towards(0), 1: towards(30)}
    people = [known("alice", -35), known("bob", 28)]
    assert name_speakers(speakers, people) == {1: "bob", 0: "alice"}
    # One name for two alike speakers: the nearer takes it, the other keeps no name.
    assert name_speakers({0: towards(0), 1: towards(10)}, [known("alice", 8)]) == {1: "alice"}


def test_a_voiceprint_of_another_model_or_of_no_direction_is_never_compared() -> None:
    other = KnownSpeaker("alice", (1.0, 0.0, 0.0))  # 3 numbers against 2
    assert name_speakers({0: towards(0)}, [other]) == {}
    assert name_speakers({0: (0.0, 0.0), 1: ()}, [known("alice", 0)], threshold=-1.0) == {}
    assert name_speakers({0: towards(0)}, [KnownSpeaker("bob", (0.0, 0.0))], -1.0) == {}
    # Of two lengths, each is compared with its own.
    speakers = {0: towards(0), 1: (2.0, 0.0, 0.0)}
    assert name_speakers(speakers, [other, known("bob", 0)]) == {0: "bob", 1: "alice"}


def test_only_the_speakers_the_turns_show_are_named() -> None:
    # Label 1's windows were given to its neighbours: it has a voiceprint, no turn.
    turns = [SpeakerTurn(0, 1000, 0), SpeakerTurn(1000, 2000, 2)]
    voiceprints = (towards(0), towards(90), towards(180))
    people = [known("bob", 90), known("carol", 180)]
    assert speaker_names(turns, voiceprints, people) == {2: "carol"}
    assert speaker_names(turns, voiceprints[:1], people) == {}  # no voiceprint for 2


def test_a_requests_reference_counts_over_the_servers_for_its_name() -> None:
    server = (known("alice", 0), known("bob", 90))
    request = (known("alice", 180),)
    assert with_server_set(request, server) == (known("alice", 180), known("bob", 90))
    assert name_speakers({0: towards(0)}, with_server_set(request, server)) == {}


def test_voiceprints_are_normalised_and_must_have_a_direction() -> None:
    assert normalised([3.0, 4.0]) == (0.6, 0.8)
    for bad in ([0.0, 0.0], [math.inf, 1.0], [], [1.0] * (MAX_VOICEPRINT_DIMS + 1)):
        with pytest.raises(ValueError, match="a voiceprint"):
            normalised(bad)


def test_names_are_short_printable_and_given_once() -> None:
    assert check_names([" alice ", "bob"], "names") == ("alice", "bob")
    for bad in (["a" * (MAX_NAME_CHARS + 1)], [""], ["tab\there"], ["alice", "alice "]):
        with pytest.raises(EnrolmentError, match="names"):
            check_names(bad, "names")


def test_a_clip_is_a_data_url_or_bare_base64_strictly_decoded() -> None:
    wav = b"RIFF\x00\x01WAVE"
    encoded = base64.b64encode(wav).decode()
    assert clip_bytes(f"data:audio/wav;base64,{encoded}", "ref") == wav
    assert clip_bytes(encoded, "ref") == wav
    for bad, why in [
        ("data:audio/wav," + encoded, "data URL"),  # percent-encoded, not base64
        ("data:audio/wav;base64", "data URL"),
        ("not base64!", "base64"),
        ("data:audio/wav;base64,", "empty"),
    ]:
        with pytest.raises(EnrolmentError, match=why):
            clip_bytes(bad, "ref")


def test_a_clips_text_is_bounded_before_it_is_decoded() -> None:
    with pytest.raises(EnrolmentError, match=f"at most {REFERENCE_MAX_BYTES} bytes"):
        clip_bytes("A" * (REFERENCE_MAX_BYTES + 1), "ref")


def test_names_and_clips_pair_up_four_at_most() -> None:
    check_pairs(["a", "b"], [b"1", b"2"], "known")
    with pytest.raises(EnrolmentError, match="pair up"):
        check_pairs(["a"], [b"1", b"2"], "known")
    many = [str(n) for n in range(MAX_KNOWN_SPEAKERS + 1)]
    with pytest.raises(EnrolmentError, match=f"at most {MAX_KNOWN_SPEAKERS}"):
        check_pairs(many, many, "known")


@pytest.mark.parametrize("seconds", [1.99, 10.01])
def test_a_clip_lasts_two_to_ten_seconds(seconds: float) -> None:
    check_clip_seconds(2.0, "ref")
    check_clip_seconds(10.0, "ref")
    with pytest.raises(EnrolmentError, match="2 to 10 s"):
        check_clip_seconds(seconds, "ref")
