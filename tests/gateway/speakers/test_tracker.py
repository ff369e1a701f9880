"""The live speaker tracker: its ids against funasr's ``ClusterBackend`` labels of the same
windows (synthetic embeddings: unit speaker centres in 192 dims plus noise), its bounds,
and its end-of-stream revisions; and, slow, on the synthetic CAM++'s embeddings of the
synthetic voices."""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from gateway.speakers.tracker import SpeakerRevision, SpeakerTracker, cluster_windows
from workers.engines.runtime.funasr_quiet import quiet_funasr

DIMS = 192
Windows = npt.NDArray[np.float32]
Cluster = Callable[[Windows], npt.NDArray[np.intp]]


@pytest.fixture(scope="module")
def funasr_cluster() -> Cluster:
    """funasr's ``ClusterBackend`` as ``generate(spk_model=...)`` builds and calls it."""
    import torch

    with quiet_funasr():
        from funasr.models.campplus.cluster_backend import ClusterBackend
    backend = ClusterBackend()

    def cluster(windows: Windows) -> npt.NDArray[np.intp]:
        return np.asarray(backend(torch.from_numpy(windows), oracle_num=None), dtype=np.intp)

    return cluster


def centres(rng: np.random.Generator, speakers: int, alike: float = 0.0) -> npt.NDArray[np.float64]:
    """Unit speaker centres whose pairwise cosines are ``alike``."""
    shared = rng.standard_normal(DIMS)
    shared /= np.linalg.norm(shared)
    own = rng.standard_normal((speakers, DIMS))
    own -= np.outer(own @ shared, shared)
    own /= np.linalg.norm(own, axis=1, keepdims=True)
    points: npt.NDArray[np.float64] = np.sqrt(alike) * shared + np.sqrt(1 - alike) * own
    return points


def sentences(
    points: npt.NDArray[np.float64],
    speakers: Sequence[int],
    sizes: Sequence[int],
    noise: float,
    seed: int,
) -> list[Windows]:
    """Each sentence's windows: its speaker's centre plus noise (window cosine about
    ``1 / (1 + noise**2)``)."""
    rng = np.random.default_rng(seed)
    return [
        (points[speaker] + noise * rng.standard_normal((size, DIMS)) / np.sqrt(DIMS)).astype(
            np.float32
        )
        for speaker, size in zip(speakers, sizes, strict=True)
    ]


def by_sentence(labels: npt.NDArray[np.intp], stream: Sequence[Windows]) -> list[int]:
    """Each sentence's label: the one most of its windows have, the first heard of a tie."""
    out, at = [], 0
    for windows in stream:
        own = labels[at : at + len(windows)]
        counts = np.bincount(own)
        out.append(int(next(label for label in own if counts[label] == counts.max())))
        at += len(windows)
    return out


def renamed(ours: Sequence[int], theirs: Sequence[int]) -> bool:
    """Whether the two labellings are the same up to renaming."""
    pairs = set(zip(ours, theirs, strict=True))
    return len(pairs) == len(set(ours)) == len(set(theirs))


def live_and_revised(
    tracker: SpeakerTracker, stream: Sequence[Windows]
) -> tuple[list[int], list[int], tuple[SpeakerRevision, ...]]:
    live = [tracker.assign(number, windows) for number, windows in enumerate(stream)]
    revisions = tracker.finish()
    final = list(live)
    for revision in revisions:
        assert final[revision.sentence] == revision.old
        final[revision.sentence] = revision.new
    return live, final, revisions


def first_appearance_order(labels: Sequence[int]) -> bool:
    return list(dict.fromkeys(labels)) == list(range(len(set(labels))))


@pytest.mark.parametrize(
    ("speakers", "alike", "noise", "windows", "seed"),
    [
        (speakers, alike, noise, windows, seed)
        for seed, (speakers, alike, noise, windows) in enumerate(
            itertools.product((1, 2, 4), (0.0, 0.5), (0.6, 1.2), (20, 90, 400))
        )
    ],
)
def test_windows_cluster_as_funasrs_cluster_backend_clusters_them(
    funasr_cluster: Cluster, speakers: int, alike: float, noise: float, windows: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    points = centres(rng, speakers, alike)
    who = rng.integers(0, speakers, windows)
    x = (points[who] + noise * rng.standard_normal((windows, DIMS)) / np.sqrt(DIMS)).astype(
        np.float32
    )
    theirs = funasr_cluster(x)
    assert renamed(cluster_windows(x).tolist(), theirs.tolist())
    assert len(set(theirs.tolist())) > 1 or speakers == 1  # a partition: not vacuous


@pytest.mark.parametrize("speakers", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_live_ids_are_funasrs_labels_and_finish_revises_nothing(
    funasr_cluster: Cluster, speakers: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    who = [0, *rng.integers(0, speakers, 39)]
    stream = sentences(centres(rng, speakers), who, rng.integers(2, 11, 40).tolist(), 1.0, seed)
    theirs = by_sentence(funasr_cluster(np.concatenate(stream)), stream)
    assert len(set(theirs)) == speakers
    live, final, revisions = live_and_revised(SpeakerTracker(), stream)
    assert renamed(live, theirs)
    assert first_appearance_order(live)
    assert revisions == ()
    assert final == live


def test_finish_revises_to_funasrs_labels_keeping_the_ids_of_clusters_that_persist(
    funasr_cluster: Cluster,
) -> None:
    # A and B 0.72 alike: one speaker live (it joins from 0.6), two for funasr (it merges
    # from 0.78); C unlike both.
    rng = np.random.default_rng(1)
    points = np.vstack([centres(rng, 2, 0.72), centres(rng, 1)])
    who = [0, 2, 1, 0, 2, 0, 1, 0, 2, 1, 0, 0]
    sizes = [6, 5, 4, 6, 6, 7, 5, 6, 5, 4, 6, 6]
    stream = sentences(points, who, sizes, 0.6, seed=0)
    live, final, revisions = live_and_revised(SpeakerTracker(), stream)
    assert live == [[0, 0, 1][speaker] for speaker in who]
    theirs = by_sentence(funasr_cluster(np.concatenate(stream)), stream)
    assert renamed(final, theirs)
    # A shares the most windows with live id 0 and keeps it, C keeps 1; B is new: 2.
    assert final == [[0, 2, 1][speaker] for speaker in who]
    assert revisions == tuple(
        SpeakerRevision(number, 0, 2) for number, speaker in enumerate(who) if speaker == 1
    )


def test_a_speaker_split_live_is_joined_at_the_end_and_the_others_keep_their_ids(
    funasr_cluster: Cluster,
) -> None:
    # A's second sentence is short and unlike the rest of A (0.45 alike): a new id live,
    # which funasr, seeing all of A's windows, puts back with A.
    rng = np.random.default_rng(3)
    a, b, other = centres(rng, 3)
    odd = 0.45 * a + np.sqrt(1 - 0.45**2) * other
    who = [0, 1, 2, 0, 2, 0, 2, 0]
    stream = sentences(np.vstack([a, odd, b]), who, [5, 2, 5, 5, 5, 5, 5, 5], 0.8, seed=0)
    live, final, revisions = live_and_revised(SpeakerTracker(), stream)
    assert live == [0, 1, 2, 0, 2, 0, 2, 0]
    assert revisions == (SpeakerRevision(1, 1, 0),)
    assert final == [0, 0, 2, 0, 2, 0, 2, 0]  # B keeps 2: ids are not renumbered
    assert renamed(final, by_sentence(funasr_cluster(np.concatenate(stream)), stream))


def test_a_returning_speaker_gets_their_old_id_after_the_history_forgot_them() -> None:
    rng = np.random.default_rng(3)
    points = centres(rng, 3)
    who = [0, 1, *[1, 2] * 60, 0]  # 600 windows between A's two sentences
    tracker = SpeakerTracker(history_windows=128)
    stream = sentences(points, who, [5] * len(who), 1.0, seed=3)
    live = [tracker.assign(number, windows) for number, windows in enumerate(stream)]
    assert live == who
    assert tracker.speakers == 3


def test_the_speakers_are_capped_and_one_past_the_cap_gets_the_nearest_id() -> None:
    rng = np.random.default_rng(4)
    a, b, other_a, other_b = centres(rng, 4)
    near_a = 0.5 * a + np.sqrt(1 - 0.5**2) * other_a  # 0.5 alike: apart, but nearest A
    near_b = 0.5 * b + np.sqrt(1 - 0.5**2) * other_b
    who = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    stream = sentences(np.vstack([a, b, near_a, near_b]), who, [6] * 12, 0.6, seed=4)
    uncapped = SpeakerTracker()
    assert [uncapped.assign(n, w) for n, w in enumerate(stream)] == who  # four apart
    tracker = SpeakerTracker(max_speakers=2)
    live, final, _ = live_and_revised(tracker, stream)
    assert live == [0, 1, 0, 1] * 3
    assert set(final) == {0, 1}
    assert tracker.speakers == 2


def test_the_history_holds_a_constant_number_of_windows_over_an_hour() -> None:
    rng = np.random.default_rng(5)
    points = centres(rng, 4)
    tracker = SpeakerTracker(history_windows=512)
    hour = 800  # sentences of 6 windows of 0.75 s

    def speak(first: int) -> None:
        for number in range(first, first + hour):
            windows = points[number % 4] + rng.standard_normal((6, DIMS)) / 14
            tracker.assign(number, windows.astype(np.float32))
            assert tracker.windows_held <= 512

    tracemalloc.start()
    try:
        speak(0)
        after_one_hour, _ = tracemalloc.get_traced_memory()
        speak(hour)
        after_two_hours, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tracker.windows_held > 500
    assert after_one_hour < 1024 * 1024  # 512 windows of 192 float32 are 384 KiB
    assert abs(after_two_hours - after_one_hour) < 16 * 1024


def test_only_the_sentences_still_in_the_history_are_revised() -> None:
    rng = np.random.default_rng(1)
    points = np.vstack([centres(rng, 2, 0.72), centres(rng, 1)])
    who = [0, 2, 1, 0, 2, 0, 1, 0, 2, 1, 0, 0] * 3
    stream = sentences(points, who, [6] * len(who), 0.6, seed=6)
    tracker = SpeakerTracker(history_windows=60)  # the last 10 sentences
    live, final, revisions = live_and_revised(tracker, stream)
    assert revisions  # B told apart from A at the end
    assert min(revision.sentence for revision in revisions) >= len(who) - 10
    assert final[: len(who) - 10] == live[: len(who) - 10]


def test_a_sentence_longer_than_the_history_keeps_its_last_windows() -> None:
    tracker = SpeakerTracker(history_windows=64)
    point = centres(np.random.default_rng(7), 1)
    assert tracker.assign(0, sentences(point, [0], [100], 1.0, seed=7)[0]) == 0
    assert tracker.windows_held == 64


def test_under_twenty_windows_the_live_labels_stand(funasr_cluster: Cluster) -> None:
    # funasr labels fewer than 20 windows all 0 without clustering them: no evidence of one
    # speaker, so the tracker's two speakers are not revised into one.
    rng = np.random.default_rng(8)
    stream = sentences(centres(rng, 2), [0, 1, 0], [4, 4, 4], 0.8, seed=8)
    assert set(funasr_cluster(np.concatenate(stream)).tolist()) == {0}
    live, final, revisions = live_and_revised(SpeakerTracker(), stream)
    assert live == final == [0, 1, 0]
    assert revisions == ()


def test_finish_on_an_empty_tracker_revises_nothing() -> None:
    assert SpeakerTracker().finish() == ()


def test_a_single_sentence_is_speaker_0_and_is_not_revised() -> None:
    tracker = SpeakerTracker()
    stream = sentences(centres(np.random.default_rng(9), 1), [0], [30], 1.0, seed=9)
    assert tracker.assign(0, stream[0]) == 0
    assert tracker.finish() == ()


def test_finish_is_safe_twice_and_ends_the_tracker() -> None:
    tracker = SpeakerTracker()
    stream = sentences(centres(np.random.default_rng(10), 2), [0, 1] * 5, [3] * 10, 0.8, 10)
    for number, windows in enumerate(stream):
        tracker.assign(number, windows)
    tracker.finish()
    assert tracker.finish() == ()
    with pytest.raises(RuntimeError, match="finished"):
        tracker.assign(10, stream[0])


def test_a_sentence_without_windows_is_the_previous_speakers() -> None:
    tracker = SpeakerTracker()
    assert tracker.assign(0, np.zeros((0, DIMS), np.float32)) == 0
    stream = sentences(centres(np.random.default_rng(11), 2), [0, 1], [4, 4], 0.8, seed=11)
    tracker.assign(1, stream[0])
    assert tracker.assign(2, stream[1]) == 1
    assert tracker.assign(3, []) == 1
    assert tracker.windows_held == 8


def test_sentence_numbers_must_increase_and_dimensions_must_agree() -> None:
    tracker = SpeakerTracker()
    tracker.assign(4, np.ones((2, DIMS), np.float32))
    with pytest.raises(ValueError, match="after sentence 4"):
        tracker.assign(4, np.ones((2, DIMS), np.float32))
    with pytest.raises(ValueError, match="dims"):
        tracker.assign(5, np.ones((2, DIMS + 1), np.float32))
    with pytest.raises(ValueError, match="finite"):
        tracker.assign(6, np.full((2, DIMS), np.nan, np.float32))
    with pytest.raises(ValueError, match="history_windows"):
        SpeakerTracker(history_windows=2048)
    with pytest.raises(ValueError, match="max_speakers"):
        SpeakerTracker(max_speakers=0)


@pytest.mark.slow
def test_the_synthetic_voices_through_campplus_are_told_apart_as_funasr_tells_them(
    campplus_model: Path, funasr_cluster: Cluster
) -> None:
    """The synthetic CAM++ embeds each sentence's ``sv_chunk`` windows in-process, as
    FunASR's realtime server embeds a sentence; the tracker's labels are the two voices,
    and funasr's clustering of all the windows (``generate(spk_model=...)``'s) agrees."""
    from workers.engines.paraformer.streaming import load_automodel, to_float
    from workers.models.synthetic.voices import HIGH, LOW, speak

    with quiet_funasr():
        from funasr.models.campplus.utils import sv_chunk

        model = load_automodel(str(campplus_model), "cpu", 1)
    turns = [(LOW, 3.0), (HIGH, 2.2), (LOW, 4.5), (HIGH, 3.0), (HIGH, 1.6), (LOW, 2.0)] * 2
    stream = []
    for seed, (voice, seconds) in enumerate(turns):
        audio = to_float(speak(voice, seconds, seed))
        windows = sv_chunk([[0.0, len(audio) / 16000, audio]])
        results = model.generate(input=[window[2] for window in windows], disable_pbar=True)
        stream.append(np.concatenate([r["spk_embedding"].cpu().numpy() for r in results]))
    voices = [0 if voice is LOW else 1 for voice, _ in turns]
    assert sum(map(len, stream)) >= 20  # funasr clusters them: the comparison can fail
    theirs = by_sentence(funasr_cluster(np.concatenate(stream)), stream)
    assert theirs == voices
    live, _, revisions = live_and_revised(SpeakerTracker(), stream)
    assert live == voices
    assert revisions == ()


def test_revise_relabels_and_goes_on_with_the_new_ids() -> None:
    """An utterance ends, the session does not: the re-cluster's relabels hold from then
    on, a second revision revises nothing new, and later sentences of the split speaker
    get its new id."""
    rng = np.random.default_rng(1)
    points = np.vstack([centres(rng, 2, 0.72), centres(rng, 1)])
    who = [0, 2, 1, 0, 2, 0, 1, 0, 2, 1, 0, 0]
    sizes = [6, 5, 4, 6, 6, 7, 5, 6, 5, 4, 6, 6]
    stream = sentences(points, who, sizes, 0.6, seed=0)
    tracker = SpeakerTracker()
    for number, windows in enumerate(stream):
        tracker.assign(number, windows)
    revised = tracker.revise()
    assert {(r.old, r.new) for r in revised} == {(0, 2)}
    assert tracker.revise() == ()  # applied: nothing left to change
    assert tracker.next_sentence == len(stream)
    (later,) = sentences(points, [1], [6], 0.6, seed=5)
    assert tracker.assign(tracker.next_sentence, later) == 2
