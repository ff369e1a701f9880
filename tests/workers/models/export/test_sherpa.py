"""The export for sherpa-onnx: the encoder metadata its online Paraformer reads, and the
files it names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from workers.engines.runtime.onnx_frontend import load_cmvn
from workers.models.export.sherpa import (
    METADATA_KEYS,
    SherpaFiles,
    metadata,
    read_metadata,
    set_metadata,
)


def test_the_metadata_holds_every_key_sherpa_reads(tiny_streaming_model: Path) -> None:
    assert set(METADATA_KEYS) <= set(metadata(tiny_streaming_model))


def test_the_metadata_is_the_tiny_models_shapes(tiny_streaming_model: Path) -> None:
    meta = metadata(tiny_streaming_model)
    tokens = json.loads((tiny_streaming_model / "tokens.json").read_text(encoding="utf-8"))
    assert meta["vocab_size"] == str(len(tokens))
    assert (meta["lfr_window_size"], meta["lfr_window_shift"]) == ("7", "6")
    # The tiny model's encoder is 64 wide; its decoder one layer of an 11-frame FSMN.
    assert meta["encoder_output_size"] == "64"
    assert (meta["decoder_num_blocks"], meta["decoder_kernel_size"]) == ("1", "11")


def test_the_cmvn_is_am_mvns_unscaled(tiny_streaming_model: Path) -> None:
    """sherpa scales inv_stddev by sqrt(encoder_output_size) itself."""
    meta = metadata(tiny_streaming_model)
    neg_mean = np.array(meta["neg_mean"].split(","), dtype=np.float32)
    inv_stddev = np.array(meta["inv_stddev"].split(","), dtype=np.float32)
    shift, scale = load_cmvn(tiny_streaming_model / "am.mvn")
    assert len(neg_mean) == len(inv_stddev) == 7 * 80
    assert np.array_equal(neg_mean, shift)
    assert np.array_equal(inv_stddev, scale)


def test_each_precision_names_funasrs_files(tmp_path: Path) -> None:
    fp32, int8 = SherpaFiles.of(tmp_path, "fp32"), SherpaFiles.of(tmp_path, "int8")
    assert (fp32.encoder.name, fp32.decoder.name) == ("model.onnx", "decoder.onnx")
    assert (int8.encoder.name, int8.decoder.name) == ("model_quant.onnx", "decoder_quant.onnx")
    assert fp32.tokens == int8.tokens == tmp_path / "onnx-sherpa" / "tokens.txt"
    assert not fp32.exist()


def _graph(path: Path, external: bool = False) -> None:
    values = np.array([1.0, 2.0], dtype=np.float32).tobytes()
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], values, raw=True)
    node = helper.make_node("Add", ["x", "w"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [weight],
    )
    model = helper.make_model(graph)
    model.metadata_props.add(key="vocab_size", value="old")
    model.metadata_props.add(key="kept", value="yes")
    onnx.save_model(
        model, str(path), save_as_external_data=external, size_threshold=0, location="w.data"
    )


def test_set_metadata_replaces_keys_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    _graph(path)
    set_metadata(path, {"vocab_size": "300", "neg_mean": "1.0,2.0"})
    assert read_metadata(path) == {"kept": "yes", "vocab_size": "300", "neg_mean": "1.0,2.0"}
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]  # one file, nothing beside


def test_a_graph_with_external_data_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    _graph(path, external=True)
    assert (tmp_path / "w.data").is_file()
    with pytest.raises(ValueError, match="external data"):
        set_metadata(path, {"vocab_size": "300"})
