from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gateway.audio.chunker import ChunkCutter
from gateway.funasr.config import SessionConfig
from gateway.funasr.parser import (
    AudioReceived,
    ConfigReceived,
    ConfigUpdated,
    EndOfUtterance,
    Event,
)
from gateway.session.gather import FrameGatherer

ONLINE = SessionConfig(mode="online")
CHUNK = ONLINE.chunk_bytes  # 19,200 bytes: 600 ms
FRAME = CHUNK // 10  # FunASR's clients' 60 ms frames
MAX_PIECE = 1 << 20


def audio_of(events: list[Event]) -> bytes:
    return b"".join(e.pcm for e in events if isinstance(e, AudioReceived))


def frame(index: int, size: int = FRAME) -> bytes:
    return bytes([index % 251]) * size


def test_an_online_chunks_frames_are_handed_on_together_at_its_end() -> None:
    gatherer = FrameGatherer(MAX_PIECE)
    assert gatherer.gather([ConfigReceived(ONLINE)]) == [ConfigReceived(ONLINE)]
    frames = [frame(i) for i in range(10)]
    for pcm in frames[:9]:
        assert gatherer.gather([AudioReceived(pcm)]) == []
    assert gatherer.held_bytes == 9 * FRAME
    assert gatherer.gather([AudioReceived(frames[9])]) == [AudioReceived(b"".join(frames))]
    assert gatherer.held_bytes == 0


def test_an_end_hands_on_the_held_audio_first() -> None:
    gatherer = FrameGatherer(MAX_PIECE)
    gatherer.gather([ConfigReceived(ONLINE), AudioReceived(frame(1)), AudioReceived(frame(2))])
    end = EndOfUtterance(acknowledge=True)
    assert gatherer.gather([end]) == [AudioReceived(frame(1) + frame(2)), end]


def test_an_update_hands_on_the_held_audio_first_and_gathering_goes_on() -> None:
    gatherer = FrameGatherer(MAX_PIECE)
    gatherer.gather([ConfigReceived(ONLINE), AudioReceived(frame(1))])
    update = ConfigUpdated(replace(ONLINE, wav_name="b"))
    assert gatherer.gather([update]) == [AudioReceived(frame(1)), update]
    assert gatherer.gather([AudioReceived(frame(2, 9 * FRAME - 1))]) == []
    assert gatherer.gather([AudioReceived(frame(3, 1))]) == [
        AudioReceived(frame(2, 9 * FRAME - 1) + frame(3, 1))
    ]


def test_a_frame_past_the_chunks_end_hands_on_all_of_itself() -> None:
    gatherer = FrameGatherer(MAX_PIECE)
    gatherer.gather([ConfigReceived(ONLINE)])
    big = frame(7, CHUNK + 100)
    assert gatherer.gather([AudioReceived(big)]) == [AudioReceived(big)]
    # The next chunk ends 100 bytes sooner: counted from the utterance's start.
    assert gatherer.gather([AudioReceived(frame(8, CHUNK - 101))]) == []
    assert gatherer.gather([AudioReceived(frame(9, 1))]) == [
        AudioReceived(frame(8, CHUNK - 101) + frame(9, 1))
    ]


def test_a_piece_never_exceeds_the_frame_cap() -> None:
    cap = 3 * FRAME
    gatherer = FrameGatherer(cap)
    out = gatherer.gather([ConfigReceived(ONLINE)])
    for i in range(9):
        out += gatherer.gather([AudioReceived(frame(i))])
    pieces = [e.pcm for e in out if isinstance(e, AudioReceived)]
    assert pieces
    assert all(len(p) <= cap for p in pieces)
    assert audio_of(out) + audio_of(gatherer.flush()) == b"".join(frame(i) for i in range(9))


def test_flush_hands_on_what_is_held_once() -> None:
    gatherer = FrameGatherer(MAX_PIECE)
    gatherer.gather([ConfigReceived(ONLINE), AudioReceived(frame(1))])
    assert gatherer.flush() == [AudioReceived(frame(1))]
    assert gatherer.flush() == []


def test_other_modes_and_rates_get_every_frame_as_it_comes() -> None:
    for config in (
        SessionConfig(mode="2pass"),
        SessionConfig(mode="offline"),
        SessionConfig(mode="online", audio_fs=8000),
    ):
        gatherer = FrameGatherer(MAX_PIECE)
        gatherer.gather([ConfigReceived(config)])
        assert gatherer.gather([AudioReceived(frame(1))]) == [AudioReceived(frame(1))]
        assert gatherer.held_bytes == 0


def test_after_an_end_frames_are_not_held() -> None:
    gatherer = FrameGatherer(MAX_PIECE)
    gatherer.gather([ConfigReceived(ONLINE), EndOfUtterance()])
    assert gatherer.gather([AudioReceived(frame(1))]) == [AudioReceived(frame(1))]


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=3 * CHUNK // 2).map(lambda n: n * 2)),
    cap_frames=st.integers(min_value=1, max_value=40),
)
def test_the_utterance_gets_the_same_chunks_at_the_same_frames(
    sizes: list[int], cap_frames: int
) -> None:
    """Fed through the gatherer or not, the online utterance's cutter gives the same chunks
    after each frame: nothing waits that it could use, and no byte is lost or reordered."""
    cap = cap_frames * FRAME
    gatherer = FrameGatherer(cap)
    gatherer.gather([ConfigReceived(ONLINE)])
    direct, gathered = ChunkCutter(CHUNK), ChunkCutter(CHUNK)
    sent = bytearray()
    handed = bytearray()
    for i, size in enumerate(sizes):
        pcm = frame(i, min(size, cap))  # the parser refuses frames over the cap
        sent += pcm
        out = gatherer.gather([AudioReceived(pcm)])
        pieces = [e.pcm for e in out if isinstance(e, AudioReceived)]
        assert all(0 < len(p) <= cap for p in pieces)
        handed += b"".join(pieces)
        from_gathered = [c for p in pieces for c in gathered.push(p)]
        assert from_gathered == direct.push(pcm)
        assert gatherer.held_bytes < CHUNK
    handed += audio_of(gatherer.gather([EndOfUtterance()])[:-1])
    assert handed == sent
