"""Export a FunASR CT-Transformer (``ct-punc``) directory to ONNX, for ``OnnxPunctuator``.

    python -m workers.models.export.punctuation MODEL_DIR

Writes ``MODEL_DIR/onnx-gateway/`` (``workers.engines.runtime.onnx_files.PuncOnnxFiles``):

- ``punc.onnx``: funasr's own export graph (``CTTransformer.export``: the embedding, the
  SANM encoder with its length mask, the classifier), token ids ``[B, T]`` and lengths
  ``[B]`` in, logits ``[B, T, classes]`` out, batch and length dynamic. The mask makes a
  padded row's logits at its own positions those of the row alone, so the punctuator may
  batch texts.
- ``punctuation.json``: what funasr resolved while loading the directory and what its
  ``inference`` then reads, so that the torch-free host side needs no funasr: the
  tokenizer's vocabulary and unknown id, the punctuation classes, the sentence-end class,
  the mini-sentence size, and whether the model is word-level.
- ``jieba_usr_dict``: a copy of the model's, for a word-level model (the real ``ct-punc``,
  ``punc_ct-transformer_cn-en-common-vocab471067-large``, ships one: funasr then splits
  Chinese into words with jieba; ``ct-punc-c`` and the synthetic model are per character).
- ``manifest.json``, written last: what they were exported from. A later call (every
  start of a pool that punctuates with ONNX may make one) finds them up to date and
  returns at once. Offline: the model directory is all it reads.

As the streaming export (``workers.models.export.paraformer``): torch's classic exporter
(``dynamo=False``) at the same opset, fp32. No int8: dynamic quantization picks its scales
per call, so a text's punctuation would depend on its batch-mates, and a static one would
need calibration text; with fp32 the punctuator's text is funasr's.

Refused (funasr itself fails on every text of such a model, since its ``inference`` hands
the tokenizer a list of words): a tokenizer other than ``CharTokenizer``, or one with a
``seg_dict`` or non-linguistic symbols.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workers.engines.runtime.onnx_files import (
    MANIFEST,
    PUNC_FORMAT_VERSION,
    PUNC_KIND,
    PUNC_SOURCES,
    PuncOnnxFiles,
    punc_up_to_date,
    source_fingerprint,
)
from workers.models.export.common import trace_to_onnx
from workers.models.export.paraformer import _write_atomically

DEFAULT_SPLIT_SIZE = 20  # funasr's CTTransformer.inference: kwargs.get("split_size", 20)


class UnsupportedPunctuationModel(ValueError):
    """The directory is not a CT-Transformer the ONNX punctuator can reproduce."""


def export_punc(model_dir: Path, threads: int = 2) -> PuncOnnxFiles:
    """Export (or find up to date) the punctuation model's graph and host-side facts."""
    files = PuncOnnxFiles.of(model_dir)
    if punc_up_to_date(model_dir):
        return files
    files.directory.mkdir(exist_ok=True)
    (files.directory / MANIFEST).unlink(missing_ok=True)  # nothing counts until rewritten
    _export(model_dir, files, threads)
    manifest = {
        "kind": PUNC_KIND,
        "format": PUNC_FORMAT_VERSION,
        "source": source_fingerprint(model_dir, PUNC_SOURCES),
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_atomically(files.directory / MANIFEST, json.dumps(manifest, indent=1).encode())
    return files


def _export(model_dir: Path, files: PuncOnnxFiles, threads: int) -> None:
    import torch

    from workers.engines.paraformer.streaming import load_automodel

    automodel = load_automodel(str(model_dir), "cpu", threads)
    meta, jieba_dict = host_meta(automodel.kwargs, automodel.model)
    kwargs: dict[str, Any] = {
        k: v for k, v in automodel.kwargs.items() if k not in ("model", "tokenizer")
    }
    # export() swaps the encoder for its export wrapper in place: on a copy, as AutoModel.export
    # (which fails on a word-level model: its jieba_usr_dict is the jieba module, shared here).
    jieba = automodel.model.jieba_usr_dict
    model = copy.deepcopy(automodel.model, {id(jieba): jieba}).eval()
    del automodel
    graph = _rebuild_for_export(model, kwargs)
    # funasr's own dummy inputs: two rows of different lengths, so that the traced mask and
    # positions follow the lengths fed.
    generator = torch.Generator().manual_seed(0)
    length = 120
    dummy = (
        torch.randint(0, graph.embed.num_embeddings, (2, length), generator=generator).int(),
        torch.tensor([length - 20, length], dtype=torch.int32),
    )
    trace_to_onnx(
        graph,
        dummy,
        files.model,
        graph.export_input_names(),
        graph.export_output_names(),
        graph.export_dynamic_axes(),
    )
    if jieba_dict is not None:
        with tempfile.NamedTemporaryFile(dir=files.directory, delete=False) as handle:
            shutil.copyfile(jieba_dict, handle.name)
        os.replace(handle.name, files.jieba_dict)
    else:
        files.jieba_dict.unlink(missing_ok=True)
    _write_atomically(files.meta, json.dumps(meta, ensure_ascii=False).encode())


def _rebuild_for_export(model: Any, kwargs: dict[str, Any]) -> Any:
    """funasr's ``CTTransformer.export``. Its ``SANMEncoderExport`` reads ``encoders[0]``
    (for two attributes its forward never uses), which a one-block encoder (the tiny
    synthetic model: its one block is ``encoders0``) lacks; such an encoder is lent a copy
    of its block for the wrapping, taken back before tracing."""
    encoders = model.encoder.encoders
    lent = len(encoders) == 0
    if lent:
        encoders.append(copy.deepcopy(model.encoder.encoders0[0]))
    graph = model.export(type="onnx", **copy.deepcopy(kwargs))
    if lent:
        del graph.encoder.model.encoders[0]
    return graph.eval()


def host_meta(kwargs: dict[str, Any], model: Any) -> tuple[dict[str, Any], Path | None]:
    """What funasr's ``CTTransformer.inference`` reads besides the network, as loaded by
    funasr (``AutoModel.kwargs``, the model), and the jieba dictionary it loaded, if any."""
    tokenizer: Any = kwargs.get("tokenizer")
    name = type(tokenizer).__name__
    if name != "CharTokenizer":
        raise UnsupportedPunctuationModel(f"tokenizer {name} (only CharTokenizer is supported)")
    if tokenizer.seg_dict is not None or tokenizer.non_linguistic_symbols:
        raise UnsupportedPunctuationModel(
            "a CharTokenizer with seg_dict or non_linguistic_symbols: funasr's CT-Transformer"
            " cannot use them either"
        )
    jieba_dict = kwargs.get("jieba_usr_dict") if model.jieba_usr_dict is not None else None
    meta = {
        "punc_list": [str(p) for p in model.punc_list],
        "sentence_end_id": int(model.sentence_end_id),
        "split_size": int(kwargs.get("split_size", DEFAULT_SPLIT_SIZE)),
        "tokens": [str(t) for t in tokenizer.token_list],
        "unk_id": int(tokenizer.unk_id),
        "word_level": jieba_dict is not None,
    }
    return meta, None if jieba_dict is None else Path(jieba_dict)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.models.export.punctuation", description=__doc__
    )
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if not (args.model_dir / "config.yaml").is_file():
        print(f"{args.model_dir} is not a FunASR model directory", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        files = export_punc(args.model_dir, args.threads)
    except UnsupportedPunctuationModel as exc:
        print(f"{args.model_dir}: cannot punctuate under ONNX: {exc}", file=sys.stderr)
        return 2
    print(f"{files.model} ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
