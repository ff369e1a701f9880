"""Live speaker labels (sans I/O): each closed sentence's speaker id from the CAM++
embeddings of its windows, stable for the session; at the end of the stream a re-cluster
of the recent sentences, as funasr's ``generate(spk_model=...)`` clusters a whole file,
whose changes come back as :class:`SpeakerRevision` s, never as a silent change.

**Input.** A sentence's windows are funasr's ``sv_chunk`` windows of its speech (1.5 s
every 0.75 s), one CAM++ embedding each (192 floats), in time order. A sentence is taken
to be one speaker. Ids start at 0, in order of first appearance.

**Live: an online centre tracker on the sentence's mean.** Each window is scaled to unit
length and the sentence is their mean ``m``; each id has a centre ``C``, a weighted mean of
its sentences' unit windows. How alike the two speakers' clean centres are is estimated as
``m · C / rho``, where ``rho`` is the session's cosine between two windows of one speaker:
``m · C`` is ``rho`` times that cosine, however few windows ``m`` has. ``rho`` is learnt
from the windows of each sentence that are two or more apart (they share no audio), so one
threshold serves a trained CAM++ and the random-weight synthetic one, whose same-voice
windows are only ~0.35 alike. The sentence joins the best-scoring id at ``SAME_SPEAKER``
(0.6); else it opens a new id while fewer than ``max_speakers`` exist; else it gets the
best-scoring id, whose centre does not learn from it. A centre moves towards a sentence by
its share of the speaker's last ``CENTRE_WINDOWS`` windows, so a voice may drift slowly;
centres are never forgotten, so a speaker who returns gets their old id.

Why this and not FunASR's realtime server (re-cluster the last 128 windows at every
sentence, every label 0 until 20 windows exist, cluster centres mapped to ids at cosine
0.6) or sherpa-onnx (one fixed cosine on a segment's embedding): on synthetic streams
(``python -m bench.models.speaker_tracker_cost --agreement``: 2-4 speakers, 30-80
sentences, window cosines 0.34-0.74), the share of sentences whose live label differs from
funasr's final one was, for speakers whose centres are at most 0.3 alike, 0-0.4 % here
against 0.4-9 % for the re-cluster (its all-0 start, and short sentences) and up to 45 %
for a fixed 0.6 (short noisy sentences split); at 0.5 alike 0.2-6 % (re-cluster 2-8 %).
Speakers 0.6-0.78 alike, whom funasr still keeps apart, are one id here until ``finish``
(9-63 % of their sentences revised; the re-cluster 1.4-12 %). On the synthetic CAM++'s
embeddings of the synthetic voices (five streams of 2-3 voices, 162 sentences of 1-10
windows) one live label differed, a 1-window sentence's, and ``finish`` revised it. A
sentence costs ~0.1 ms of a core here, 4-8 ms with the re-cluster (the same table).

**Bounds.** At most ``max_speakers`` ids (15 by default, funasr's) and their centres; the
last ``history_windows`` windows (512 by default, ~6.4 min of speech, 384 KiB of float32),
kept as whole sentences, the oldest dropped first (a sentence longer than the history
keeps its last windows). A sentence costs O(windows x dims + speakers x dims), its
``rho`` at most ``PAIR_WINDOWS`` squared pairs.

**Finish.** ``finish()`` clusters the history's windows as ``ClusterBackend`` does a file
(``cluster_windows``: spectral clustering with funasr's pruning and eigen-gap, up to 15
clusters, merged at cosine 0.78; the history stays under the 2,048 windows from which
funasr switches to UMAP and HDBSCAN), gives each sentence the label most of its windows
have (funasr's ``distribute_spk`` gives a sentence the turn it overlaps most), and maps
the clusters to live ids greedily by the windows they share, most first: a cluster that
persists keeps its id, one left without an id takes the next (or, at the cap, the id whose
centre is nearest). Under 20 windows funasr labels every window 0 without clustering; that
is no evidence of one speaker, so the live labels stand. Sentences older than the history
keep their live labels, as in FunASR's realtime server. The cost is one eigendecomposition
of the history: ~0.08 s of a core at 512 windows, ~0.3 s at 1,024 (one BLAS thread).

funasr's own ``ClusterBackend`` is not imported: importing it imports funasr and torch,
~12 s and ~500 MB here, which the gateway's process never pays.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Labels = npt.NDArray[np.intp]

SAME_SPEAKER = 0.6  # estimated cosine of clean speaker centres at which a sentence joins
PRIOR_SIMILARITY = 0.5  # rho until a sentence has windows two apart
PAIR_WINDOWS = 16  # rho learns from a sentence's first windows: its cost stays bounded
MIN_SIMILARITY = 0.05  # rho's floor: embeddings unlike each other still divide safely
CENTRE_WINDOWS = 64  # a centre follows about this many of its speaker's latest windows
MAX_SPEAKERS = 15
HISTORY_WINDOWS = 512

# funasr's ClusterBackend, as AutoModel builds it for spk_model.
CLUSTER_MIN_WINDOWS = 20  # below: every window speaker 0
SPECTRAL_MAX_WINDOWS = 2048  # from here: UMAP and HDBSCAN, not reproduced
MAX_CLUSTERS = 15
PRUNE_SHARE = 0.022  # p-pruning: the share of each row's similarities kept
MERGE_COSINE = 0.78
KMEANS_RUNS = 10
KMEANS_STEPS = 100


@dataclass(frozen=True, slots=True)
class SpeakerRevision:
    """The end-of-stream re-cluster moved ``sentence`` from speaker ``old`` to ``new``."""

    sentence: int
    old: int
    new: int


@dataclass(frozen=True, slots=True)
class _Sentence:
    number: int
    speaker: int  # its live id
    embeddings: npt.NDArray[np.float32]  # as given: funasr clusters raw embeddings


class SpeakerTracker:
    """Speaker ids for a session's sentences, from their CAM++ window embeddings."""

    def __init__(
        self,
        *,
        max_speakers: int = MAX_SPEAKERS,
        history_windows: int = HISTORY_WINDOWS,
        same_speaker: float = SAME_SPEAKER,
    ) -> None:
        if max_speakers < 1:
            raise ValueError(f"max_speakers must be at least 1, not {max_speakers}")
        if not CLUSTER_MIN_WINDOWS <= history_windows < SPECTRAL_MAX_WINDOWS:
            raise ValueError(
                f"history_windows must be in [{CLUSTER_MIN_WINDOWS}, {SPECTRAL_MAX_WINDOWS}),"
                f" not {history_windows}"
            )
        self._max_speakers = max_speakers
        self._history_windows = history_windows
        self._same_speaker = same_speaker
        self._centres: Floats | None = None  # (max_speakers, dims) once the dims are known
        self._centre_windows: list[int] = []  # per id; len() is the ids handed out
        self._pair_sum = 0.0  # cosines of window pairs two or more apart in a sentence
        self._pairs = 0
        self._history: deque[_Sentence] = deque()
        self._held = 0
        self._last_number: int | None = None
        self._last_speaker = 0
        self._finished = False

    @property
    def speakers(self) -> int:
        """How many ids have been handed out: ids are ``0 .. speakers - 1``."""
        return len(self._centre_windows)

    @property
    def windows_held(self) -> int:
        """How many windows the history holds now (at most ``history_windows``)."""
        return self._held

    def assign(self, sentence: int, embeddings: npt.ArrayLike) -> int:
        """The speaker id of closed sentence number ``sentence`` (numbers increase), from
        its windows' embeddings, ``(windows, dims)``. A sentence without windows is given
        the previous sentence's speaker and is never revised."""
        if self._finished:
            raise RuntimeError("the speaker tracker has finished")
        if self._last_number is not None and sentence <= self._last_number:
            raise ValueError(f"sentence {sentence} after sentence {self._last_number}")
        windows = self._checked(embeddings)
        self._last_number = sentence
        if len(windows) == 0:
            return self._last_speaker
        units = _unit_rows(windows.astype(np.float64))
        self._learn_similarity(units[:PAIR_WINDOWS])
        speaker = self._match(units.mean(axis=0), len(units))
        self._remember(_Sentence(sentence, speaker, windows))
        self._last_speaker = speaker
        return speaker

    def centres(self) -> dict[int, tuple[float, ...]]:
        """Each id's centre, the mean of its speaker's recent unit windows: what a known
        speaker's voiceprint is compared with to name the id."""
        if self._centres is None:
            return {}
        return {
            speaker: tuple(float(v) for v in self._centres[speaker])
            for speaker in range(self.speakers)
        }

    @property
    def next_sentence(self) -> int:
        """The number the next sentence takes: the session's sentences, counted from 1."""
        return 1 if self._last_number is None else self._last_number + 1

    def revise(self) -> tuple[SpeakerRevision, ...]:
        """Re-cluster the history as funasr clusters a file; the sentences whose speaker
        that changes, in order. The tracker goes on: the relabelled sentences keep their
        new ids (a later revision starts from them), and more sentences may come (an
        utterance ended, the session did not)."""
        if self._finished:
            return ()
        sentences = list(self._history)
        if sum(len(s.embeddings) for s in sentences) < CLUSTER_MIN_WINDOWS:
            return ()
        embeddings = np.concatenate([s.embeddings for s in sentences]).astype(np.float64)
        labels = cluster_windows(embeddings)
        bounds = np.cumsum([0] + [len(s.embeddings) for s in sentences])
        finals = [_majority(labels[start:end]) for start, end in itertools.pairwise(bounds)]
        new_ids = self._ids_of_clusters(sentences, finals, labels, embeddings)
        self._history = deque(
            _Sentence(s.number, new_ids[final], s.embeddings)
            for s, final in zip(sentences, finals, strict=True)
        )
        return tuple(
            SpeakerRevision(s.number, s.speaker, new_ids[final])
            for s, final in zip(sentences, finals, strict=True)
            if new_ids[final] != s.speaker
        )

    def finish(self) -> tuple[SpeakerRevision, ...]:
        """The last revision (``revise``); the tracker takes no more sentences. Safe to
        call twice (the second time: none)."""
        revisions = self.revise()
        self._finished = True
        self._history.clear()
        self._held = 0
        return revisions

    def _checked(self, embeddings: npt.ArrayLike) -> npt.NDArray[np.float32]:
        windows = np.array(embeddings, dtype=np.float32)
        if windows.size == 0:
            return windows.reshape(0, 0)
        if windows.ndim != 2:
            raise ValueError(f"embeddings must be (windows, dims), not {windows.shape}")
        if not np.isfinite(windows).all():
            raise ValueError("embeddings must be finite")
        if self._centres is None:
            self._centres = np.zeros((self._max_speakers, windows.shape[1]))
        elif windows.shape[1] != self._centres.shape[1]:
            raise ValueError(f"embeddings of {windows.shape[1]} dims, not {self._centres.shape[1]}")
        return windows

    def _learn_similarity(self, units: Floats) -> None:
        # Windows two apart share no audio (a segment's last window, moved back to fit, may
        # share a little): their cosine is one speaker's, not one sound's.
        apart = np.triu(units @ units.T, 2)
        self._pair_sum += float(apart.sum())
        self._pairs += (len(units) - 1) * (len(units) - 2) // 2

    @property
    def _similarity(self) -> float:
        if not self._pairs:
            return PRIOR_SIMILARITY
        return max(self._pair_sum / self._pairs, MIN_SIMILARITY)

    def _match(self, mean: Floats, windows: int) -> int:
        assert self._centres is not None
        known = self.speakers
        if known:
            scores = self._centres[:known] @ mean / self._similarity
            best = int(np.argmax(scores))
            if scores[best] >= self._same_speaker:
                self._learn(best, mean, windows)
                return best
            if known == self._max_speakers:
                return best  # not learnt from: it is only the least unlike
        self._centres[known] = mean
        self._centre_windows.append(min(windows, CENTRE_WINDOWS))
        return known

    def _learn(self, speaker: int, mean: Floats, windows: int) -> None:
        assert self._centres is not None
        held = self._centre_windows[speaker]
        weight = windows / min(held + windows, CENTRE_WINDOWS)
        self._centres[speaker] += min(weight, 1.0) * (mean - self._centres[speaker])
        self._centre_windows[speaker] = min(held + windows, CENTRE_WINDOWS)

    def _remember(self, sentence: _Sentence) -> None:
        if len(sentence.embeddings) > self._history_windows:
            kept = sentence.embeddings[-self._history_windows :].copy()
            sentence = _Sentence(sentence.number, sentence.speaker, kept)
        self._history.append(sentence)
        self._held += len(sentence.embeddings)
        while self._held > self._history_windows:
            self._held -= len(self._history.popleft().embeddings)

    def _ids_of_clusters(
        self, sentences: list[_Sentence], finals: list[int], labels: Labels, embeddings: Floats
    ) -> dict[int, int]:
        shared: Counter[tuple[int, int]] = Counter()
        for sentence, final in zip(sentences, finals, strict=True):
            shared[final, sentence.speaker] += len(sentence.embeddings)
        ids: dict[int, int] = {}
        taken: set[int] = set()
        for (cluster, speaker), _ in sorted(shared.items(), key=lambda item: (-item[1], item[0])):
            if cluster not in ids and speaker not in taken:
                ids[cluster] = speaker
                taken.add(speaker)
        for cluster in dict.fromkeys(finals):  # the unmatched, in order of first appearance
            if cluster in ids:
                continue
            assert self._centres is not None
            mean = _unit_rows(embeddings[labels == cluster]).mean(axis=0)
            if self.speakers < self._max_speakers:
                ids[cluster] = self.speakers
                self._centres[self.speakers] = mean
                self._centre_windows.append(0)
            else:
                ids[cluster] = int(np.argmax(self._centres @ mean))
        return ids


def cluster_windows(embeddings: npt.ArrayLike) -> Labels:
    """Each window's cluster, as funasr's ``ClusterBackend()(embeddings, oracle_num=None)``
    labels fewer than 2,048 windows: all 0 under 20; else spectral clustering of the cosine
    similarities, each row pruned to its few highest, the number of clusters at the
    largest gap of the Laplacian's first 16 eigenvalues, k-means of the eigenvectors; then
    the two clusters with the most alike mean embeddings merged while that cosine is at
    least 0.78. Numbers are up to renaming; k-means is seeded, so a call is repeatable."""
    x = np.array(embeddings, dtype=np.float64)
    if len(x) < CLUSTER_MIN_WINDOWS:
        return np.zeros(len(x), dtype=np.intp)
    if len(x) >= SPECTRAL_MAX_WINDOWS:
        raise ValueError(f"{len(x)} windows: funasr clusters this many with UMAP and HDBSCAN")
    units = _unit_rows(x)
    similarity = units @ units.T
    # funasr's p_pruning, to the letter: every row keeps only its highest few.
    share = 6.0 / len(x) if len(x) * PRUNE_SHARE < 6 else PRUNE_SHARE
    lowest = np.argsort(similarity, axis=1)[:, : int((1 - share) * len(x))]
    np.put_along_axis(similarity, lowest, 0.0, axis=1)
    affinity = 0.5 * (similarity + similarity.T)
    np.fill_diagonal(affinity, 0.0)
    laplacian = np.diag(np.abs(affinity).sum(axis=1)) - affinity
    eigenvalues, eigenvectors = np.linalg.eigh(laplacian)
    clusters = int(np.argmax(np.diff(eigenvalues[: MAX_CLUSTERS + 1]))) + 1
    labels = _kmeans(eigenvectors[:, :clusters], clusters, np.random.default_rng(0))
    return _merge_alike(labels, x)


def _kmeans(points: Floats, k: int, rng: np.random.Generator) -> Labels:
    """Lloyd's k-means from k-means++ seeds, the best of ``KMEANS_RUNS`` (sklearn's
    ``k_means``, which funasr calls, does the same from one unseeded start)."""
    best: Labels = np.zeros(len(points), dtype=np.intp)
    best_inertia = np.inf
    for _ in range(KMEANS_RUNS if k > 1 else 0):
        centres = _kmeans_plus_plus(points, k, rng)
        for _ in range(KMEANS_STEPS):
            labels = _nearest(points, centres)
            moved = np.array(
                [
                    points[labels == j].mean(axis=0) if (labels == j).any() else centres[j]
                    for j in range(k)
                ]
            )
            if np.array_equal(moved, centres):
                break
            centres = moved
        labels = _nearest(points, centres)
        inertia = float(((points - centres[labels]) ** 2).sum())
        if inertia < best_inertia:
            best, best_inertia = labels, inertia
    # An emptied cluster leaves a gap in the numbers; the merge step wants them dense.
    return np.unique(best, return_inverse=True)[1].astype(np.intp)


def _kmeans_plus_plus(points: Floats, k: int, rng: np.random.Generator) -> Floats:
    centres = [points[rng.integers(len(points))]]
    for _ in range(1, k):
        distances = ((points[:, None, :] - np.array(centres)[None]) ** 2).sum(axis=2).min(axis=1)
        total = float(distances.sum())
        pick = rng.choice(len(points), p=distances / total) if total > 0 else 0
        centres.append(points[pick])
    return np.array(centres)


def _nearest(points: Floats, centres: Floats) -> Labels:
    distances: Floats = ((points[:, None, :] - centres[None]) ** 2).sum(axis=2)
    nearest: Labels = np.argmin(distances, axis=1).astype(np.intp)
    return nearest


def _merge_alike(labels: Labels, x: Floats) -> Labels:
    """funasr's ``merge_by_cos``: while the two most alike clusters' mean embeddings are at
    cosine ``MERGE_COSINE`` or more, the later joins the earlier and the numbers close up."""
    labels = labels.copy()
    while (count := int(labels.max()) + 1) > 1:
        centres = _unit_rows(np.stack([x[labels == i].mean(axis=0) for i in range(count)]))
        alike = np.triu(centres @ centres.T, 1)
        first, second = np.unravel_index(np.argmax(alike), alike.shape)
        if alike[first, second] < MERGE_COSINE:
            break
        labels[labels == second] = first
        labels[labels > second] -= 1
    return labels


def _majority(labels: Labels) -> int:
    """The label most windows have; of a tie, the one heard first."""
    counts = np.bincount(labels)
    top = counts.max()
    return int(next(label for label in labels if counts[label] == top))


def _unit_rows(x: Floats) -> Floats:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit: Floats = x / np.maximum(norms, 1e-12)
    return unit
