"""What the live speaker tracker (``gateway.speakers.tracker``) costs, and how often its
live labels differ from funasr's clustering of the same windows, on synthetic embeddings.

Cost: ``assign`` per sentence (µs of one core, in the gateway's event loop) by the
sentence's windows and the speakers known, the history full; ``finish`` by the windows
held; the memory a tracker holds after an hour of sentences (tracemalloc).

Agreement (``--agreement``): streams of 2-4 speakers whose centres are ``c`` alike, each
window its speaker's centre plus noise (window cosines from 0.34 to 0.74), sentences of
2-10 or 1-4 windows; the share of sentences whose live label differs from funasr's final one (the
revisions ``finish`` sends), for the tracker, for FunASR's realtime server's way
(re-cluster the last 128 windows at each sentence, centres mapped to ids at cosine 0.6) and
for one fixed cosine on the sentence's normalised mean (sherpa-onnx's way).

    OPENBLAS_NUM_THREADS=1 python -m bench.models.speaker_tracker_cost
    OPENBLAS_NUM_THREADS=1 python -m bench.models.speaker_tracker_cost --agreement

One BLAS thread: ``finish``'s eigendecomposition is what it measures, and several threads
on a busy machine cost more CPU, not less.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import tracemalloc
from collections import Counter, deque
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from gateway.speakers.tracker import SpeakerTracker, cluster_windows

DIMS = 192
Stream = list[npt.NDArray[np.float32]]


def centres(rng: np.random.Generator, speakers: int, alike: float) -> npt.NDArray[np.float64]:
    """Unit vectors whose pairwise cosines are ``alike``: a shared part and their own."""
    shared = rng.standard_normal(DIMS)
    shared /= np.linalg.norm(shared)
    own = rng.standard_normal((speakers, DIMS))
    own -= np.outer(own @ shared, shared)
    own /= np.linalg.norm(own, axis=1, keepdims=True)
    vectors: npt.NDArray[np.float64] = np.sqrt(alike) * shared + np.sqrt(1 - alike) * own
    return vectors


def stream(
    rng: np.random.Generator,
    speakers: int,
    alike: float,
    noise: float,
    sentences: int,
    windows_each: tuple[int, int] = (2, 10),
) -> Stream:
    """Sentences of ``windows_each`` windows (at least, at most); the speaker changes at
    a sentence with chance 0.6."""
    points = centres(rng, speakers, alike)
    speaker, out = 0, []
    for index in range(sentences):
        if index and rng.random() < 0.6:
            speaker = int(rng.integers(speakers))
        windows = int(rng.integers(windows_each[0], windows_each[1] + 1))
        jitter = noise * rng.standard_normal((windows, DIMS)) / np.sqrt(DIMS)
        out.append((points[speaker] + jitter).astype(np.float32))
    return out


def funasr_labels(sentences: Stream) -> list[int]:
    """funasr's clustering of every window, each sentence given its windows' majority."""
    labels = cluster_windows(np.concatenate(sentences))
    out, at = [], 0
    for sentence in sentences:
        counts = Counter(labels[at : at + len(sentence)].tolist())
        out.append(max(counts, key=lambda label: counts[label]))
        at += len(sentence)
    return out


def differing(live: Sequence[int], final: Sequence[int]) -> int:
    """Sentences whose label differs once final clusters are matched to live ids greedily
    by sentences shared (as ``finish`` matches them)."""
    shared = Counter(zip(final, live, strict=True))
    ids: dict[int, int] = {}
    for (cluster, speaker), _ in shared.most_common():
        if cluster not in ids and speaker not in ids.values():
            ids[cluster] = speaker
    return sum(ids.get(f, -1) != s for s, f in zip(live, final, strict=True))


def tracker_labels(sentences: Stream) -> list[int]:
    tracker = SpeakerTracker(history_windows=2047)
    return [tracker.assign(n, windows) for n, windows in enumerate(sentences)]


def fixed_cosine(threshold: float) -> Callable[[Stream], list[int]]:
    def labels(sentences: Stream) -> list[int]:
        known: list[npt.NDArray[np.float64]] = []
        out = []
        for windows in sentences:
            units = windows / np.linalg.norm(windows, axis=1, keepdims=True)
            mean = units.mean(axis=0) / np.linalg.norm(units.mean(axis=0))
            scores = [float(c @ mean) for c in known]
            if scores and max(scores) >= threshold:
                best = int(np.argmax(scores))
                moved = known[best] + len(windows) / 64 * (mean - known[best])
                known[best] = moved / np.linalg.norm(moved)
                out.append(best)
            else:
                known.append(mean)
                out.append(len(known) - 1)
        return out

    return labels


def funasr_realtime(sentences: Stream) -> list[int]:
    """FunASR's ``HybridSpeakerTracker.assign_streaming``, in outline: the last 128 windows
    re-clustered at each sentence, cluster centres mapped to ids at cosine 0.6."""
    history: deque[npt.NDArray[np.float32]] = deque(maxlen=128)
    known: list[npt.NDArray[np.float64]] = []
    updates: list[int] = []
    out = []
    for windows in sentences:
        history.extend(windows)
        x = np.array(history, dtype=np.float64)
        labels = cluster_windows(x)
        order = {label: n for n, label in enumerate(dict.fromkeys(labels.tolist()))}
        labels = np.array([order[label] for label in labels.tolist()])
        ids, used = [], set()
        for cluster in range(labels.max() + 1):
            centre = x[labels == cluster].mean(axis=0)
            centre /= np.linalg.norm(centre)
            scores = [float(c @ centre) for c in known]
            free = [n for n in np.argsort(scores)[::-1] if n not in used]
            if free and scores[free[0]] >= 0.6:
                best = int(free[0])
                weight = 1 / min(updates[best] + 1, 20)
                moved = (1 - weight) * known[best] + weight * centre
                known[best], updates[best] = moved / np.linalg.norm(moved), updates[best] + 1
            else:
                best = len(known)
                known.append(centre)
                updates.append(1)
            ids.append(best)
            used.add(best)
        own = Counter(labels[-len(windows) :].tolist())
        out.append(ids[max(own, key=lambda label: own[label])])
    return out


def agreement(streams: int) -> None:
    methods: dict[str, Callable[[Stream], list[int]]] = {
        "tracker": tracker_labels,
        "funasr-realtime": funasr_realtime,
        "cosine 0.4": fixed_cosine(0.4),
        "cosine 0.6": fixed_cosine(0.6),
    }
    print("% of sentences whose live label differs from funasr's (the revisions at the end);")
    print(f"{streams} streams of 30-80 sentences per row; ms per sentence in brackets")
    print(
        "| centres' cosine | windows' cosine | windows a sentence | " + " | ".join(methods) + " |"
    )
    print("|---" * (3 + len(methods)) + "|")
    rng = np.random.default_rng(0)
    for alike, noise, each in itertools.product(
        (0.0, 0.3, 0.5, 0.6, 0.7), (0.6, 1.0, 1.4), ((2, 10), (1, 4))
    ):
        wrong = dict.fromkeys(methods, 0)
        seconds = dict.fromkeys(methods, 0.0)
        total = 0
        for _ in range(streams):
            speakers, count = int(rng.integers(2, 5)), int(rng.integers(30, 81))
            sentences = stream(rng, speakers, alike, noise, count, each)
            final = funasr_labels(sentences)
            total += len(sentences)
            for name, method in methods.items():
                started = time.process_time()
                live = method(sentences)
                seconds[name] += time.process_time() - started
                wrong[name] += differing(live, final)
        cells = [f"{100 * wrong[n] / total:.1f} ({1e3 * seconds[n] / total:.2f})" for n in methods]
        row = f"| {alike} | {1 / (1 + noise**2):.2f} | {each[0]}-{each[1]} | "
        print(row + " | ".join(cells) + " |", flush=True)


def cost(repeat: int) -> None:
    rng = np.random.default_rng(0)
    print("assign(): µs of one core per sentence, history full (512 windows)")
    print("| speakers known | windows | µs (median) | µs (p95) |")
    print("|---:|---:|---:|---:|")
    for speakers in (2, 15):
        points = centres(rng, speakers, 0.0)
        for windows in (2, 6, 10, 40):
            tracker = SpeakerTracker()
            for number in range(600):  # every speaker known, the history full
                speaker = points[number % speakers]
                tracker.assign(number, speaker + rng.standard_normal((6, DIMS)) / 14)
            times = []
            for number in range(600, 600 + repeat):
                batch = points[number % speakers] + rng.standard_normal((windows, DIMS)) / 14
                started = time.process_time()
                tracker.assign(number, batch.astype(np.float32))
                times.append((time.process_time() - started) * 1e6)
            times.sort()
            median, p95 = times[len(times) // 2], times[int(len(times) * 0.95)]
            print(f"| {speakers} | {windows} | {median:.0f} | {p95:.0f} |")
    print("\nfinish(): seconds of one core by the windows held (3 speakers)")
    print("| windows | s |")
    print("|---:|---:|")
    points = centres(rng, 3, 0.0)
    for held in (128, 512, 1024, 2047):
        tracker = SpeakerTracker(history_windows=held)
        for number in range(held // 6 + 1):
            tracker.assign(number, points[number % 3] + rng.standard_normal((6, DIMS)) / 14)
        started = time.process_time()
        tracker.finish()
        print(f"| {held} | {time.process_time() - started:.3f} |")
    tracemalloc.start()
    tracker = SpeakerTracker()
    points = centres(rng, 4, 0.0)
    sentences = 4800 // 6  # an hour of speech: 4,800 windows of 0.75 s
    for number in range(sentences):
        windows = points[number % 4] + rng.standard_normal((6, DIMS)) / 14
        tracker.assign(number, windows.astype(np.float32))
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\nafter an hour ({sentences} sentences): {tracker.windows_held} windows held, ", end="")
    print(f"{held / 1024:.0f} KiB traced (the tracker and this loop's last arrays)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models.speaker_tracker_cost")
    parser.add_argument("--agreement", action="store_true", help="live labels against funasr's")
    parser.add_argument("--streams", type=int, default=8, help="streams per --agreement row")
    parser.add_argument("--repeat", type=int, default=300, help="sentences timed per row")
    args = parser.parse_args(argv)
    if args.agreement:
        agreement(args.streams)
    else:
        cost(args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
