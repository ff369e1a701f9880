"""CAM++: who spoke when in a file, as funasr's ``generate(spk_model="cam++")`` finds it.

A stream is a whole file; its OPEN command carries the speech regions the VAD found
(``StreamOptions.speech_regions``). Its audio is buffered in the worker, and at its final
piece funasr's own pipeline runs on it, step by step as ``AutoModel.inference_with_vad``
runs it: each region cut into 1.5 s windows every 0.75 s (``sv_chunk``), a CAM++ embedding
of each window (the model's own ``inference``: fbank, mean removed), the embeddings
clustered (``ClusterBackend``: none under 20 windows, spectral clustering under 2,048,
UMAP and HDBSCAN above, similar speakers merged), and the windows' labels turned into
speaker turns (``postprocess``: merged, overlaps split, turns under 0.7 s given to a
neighbour). The final result's ``speakers`` are those turns, in ms, and its
``voiceprints`` each label's voiceprint: the L2-normalised mean of the embeddings of the
windows given that label (funasr's ``return_spk_center``, normalised), by which the gateway
names a speaker after a reference clip; its text is empty.

The embeddings are computed ``EMBEDDING_BATCH`` windows at a time, so a long file costs
the worker its audio and one batch's features, never all of them at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shared.audio import Samples
from shared.engines import EngineCapabilities
from shared.messages import MAX_VOICEPRINTS, SAMPLE_RATE, Decoded, EngineSpec, SpeakerTurn
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.runtime.funasr_quiet import quiet_funasr
from workers.engines.table import Step, engine_error
from workers.engines.whole_utterance import Final, Utterance, WholeUtteranceEngine

EMBEDDING_BATCH = 64  # windows of 1.5 s per CAM++ forward pass
SAMPLES_PER_MS = SAMPLE_RATE // 1000


class CamppEngine(WholeUtteranceEngine):
    name = "campplus"
    # One result at the end, of speaker turns (no text): a whole-utterance engine.
    capabilities = EngineCapabilities(text_is_delta=True, decodes_at_final=True)

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._model = model  # funasr's AutoModel of the CAM++ directory
        with quiet_funasr():
            from funasr.models.campplus.cluster_backend import ClusterBackend

        # As AutoModel builds it for spk_model, with its default merge threshold.
        self._cluster = ClusterBackend()

    @classmethod
    def load(cls, spec: EngineSpec) -> CamppEngine:
        if spec.model_dir is None:
            raise ValueError("the campplus engine needs a model directory")
        return cls(load_automodel(spec.model_dir, spec.device, spec.threads))

    def _answer_finals(self, step: Step[Utterance], finals: list[Final]) -> None:
        # A file at a time: its windows are batched already, and files seldom end together.
        for final in finals:
            try:
                if final.options.window_embeddings:  # a live sentence's, for the tracker
                    decoded = self.window_embeddings(final.audio, final.options.speech_regions)
                else:
                    decoded = self.diarize(final.audio, final.options.speech_regions)
            except Exception as exc:
                step.fail(final.item.stream_id, engine_error(exc))
                continue
            step.answer(final.index, decoded)

    def speaker_turns(
        self, audio: Samples, regions: Sequence[tuple[int, int]]
    ) -> tuple[SpeakerTurn, ...]:
        """Who spoke when in ``audio``, from the windows of its speech ``regions`` (ms)."""
        return self.diarize(audio, regions).speakers

    def diarize(self, audio: Samples, regions: Sequence[tuple[int, int]]) -> Decoded:
        """``audio``'s speaker turns, from the windows of its speech ``regions`` (ms), and
        each speaker label's voiceprint."""
        with quiet_funasr():
            from funasr.models.campplus.utils import postprocess

        windows, embeddings = self._windows(audio, regions)
        if not windows:
            return Decoded()
        import torch

        # A tensor, as funasr passes it: its speaker merging averages in torch's arithmetic.
        labels = self._cluster(torch.from_numpy(embeddings), oracle_num=None)
        turns = postprocess(windows, None, labels, embeddings)
        return Decoded(
            speakers=tuple(
                SpeakerTurn(round(start * 1000), round(end * 1000), int(speaker))
                for start, end, speaker in turns
            ),
            voiceprints=voiceprints(np.asarray(labels), embeddings),
        )

    def window_embeddings(self, audio: Samples, regions: Sequence[tuple[int, int]]) -> Decoded:
        """Each window's embedding, in time order, unclustered: at most MAX_VOICEPRINTS
        (a 2pass sentence of ASR_MAX_SEGMENT_SECONDS has far fewer)."""
        _, embeddings = self._windows(audio, regions)
        rows = embeddings[:MAX_VOICEPRINTS]
        return Decoded(window_embeddings=tuple(tuple(float(v) for v in row) for row in rows))

    def _windows(
        self, audio: Samples, regions: Sequence[tuple[int, int]]
    ) -> tuple[list[Any], np.ndarray[Any, Any]]:
        """funasr's ``sv_chunk`` windows of the speech ``regions`` (ms), in time order, and
        their CAM++ embeddings (EMBEDDING_BATCH windows a forward pass)."""
        with quiet_funasr():
            from funasr.models.campplus.utils import sv_chunk

        speech = to_float(audio)
        # As funasr's slice_padding_audio_samples cuts each VAD segment out of the file.
        segments = [
            [start / 1000.0, end / 1000.0, speech[start * SAMPLES_PER_MS : end * SAMPLES_PER_MS]]
            for start, end in regions
            if start * SAMPLES_PER_MS < len(speech)
        ]
        windows = sorted(sv_chunk(segments), key=lambda window: window[0])
        if not windows:
            return [], np.zeros((0, 0), np.float32)
        embeddings = np.concatenate(
            [
                self._embed([window[2] for window in windows[at : at + EMBEDDING_BATCH]])
                for at in range(0, len(windows), EMBEDDING_BATCH)
            ]
        )
        return windows, embeddings

    def _embed(self, windows: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        """CAM++ embeddings of equal-length windows, through the model's own inference."""
        import torch

        with torch.no_grad():
            results, _ = self._model.model.inference(
                data_in=windows, device=self._model.kwargs["device"]
            )
        return np.asarray(results[0]["spk_embedding"].cpu().numpy(), dtype=np.float32)


def voiceprints(
    labels: np.ndarray[Any, Any], embeddings: np.ndarray[Any, Any]
) -> tuple[tuple[float, ...], ...]:
    """Each speaker label's voiceprint, label k's at index k: the L2-normalised mean of
    its windows' ``embeddings``. The labels are numbered as ``postprocess`` numbers the
    turns' (funasr's ``correct_labels``: 0, 1, ... in order of first appearance), so that
    a turn's speaker indexes its voiceprint; past MAX_VOICEPRINTS labels none is sent."""
    with quiet_funasr():
        from funasr.models.campplus.utils import correct_labels

    numbered = correct_labels(labels)
    prints = []
    for label in range(min(int(numbered.max(initial=-1)) + 1, MAX_VOICEPRINTS)):
        mean = embeddings[numbered == label].astype(np.float64).mean(axis=0)
        norm = float(np.linalg.norm(mean))
        # A zero mean has no direction: sent as zeros, which match nothing.
        prints.append(tuple(float(v) for v in (mean / norm if norm > 0 else mean)))
    return tuple(prints)
