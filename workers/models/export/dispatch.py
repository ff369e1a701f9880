"""Which export a model directory takes: an offline model (a Paraformer, SenseVoiceSmall)
goes to ``workers.models.export.offline``, a streaming Paraformer to
``workers.models.export.paraformer``. ``python -m workers.models.export`` and
``workers.models.ready`` both export through here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workers.engines.runtime.onnx_session import own_weights
from workers.models.export import offline as export_offline
from workers.models.export import paraformer as export_paraformer


def export_model(
    model_dir: Path,
    int8: bool = False,
    threads: int = 2,
    qdq: bool = False,
    written: Callable[[Path], None] | None = None,
) -> list[Path]:
    """The graphs the engine of ``model_dir`` opens at the asked precision, exported unless
    up to date; ``written`` is told each as soon as it is in place (the streaming export's,
    while the rest goes on; the offline export's, at its end). Raises ``ValueError`` for a
    model class that has no export here."""
    with own_weights():
        return _export(model_dir, int8, threads, qdq, written)


def _export(
    model_dir: Path,
    int8: bool,
    threads: int,
    qdq: bool,
    written: Callable[[Path], None] | None,
) -> list[Path]:
    if export_offline.is_offline_model_dir(model_dir):  # a whole-utterance model
        graph = export_offline.export_offline(model_dir, int8, threads).model
        if written is not None:
            written(graph)
        return [graph]
    files = export_paraformer.export(model_dir, int8, threads, qdq=qdq, written=written)
    return [files.encoder, files.decoder]
