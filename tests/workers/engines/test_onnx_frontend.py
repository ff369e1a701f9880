"""The offline graphs' batch of features (``pad_rows``)."""

from __future__ import annotations

import numpy as np

from workers.engines.runtime.onnx_frontend import pad_rows


def test_rows_are_padded_with_zeros_to_the_longest_and_keep_their_lengths() -> None:
    rows = [np.full((n, 3), n, np.float32) for n in (2, 4, 1)]
    speech, lengths = pad_rows(rows)
    assert speech.shape == (3, 4, 3)
    assert speech.dtype == np.float32
    assert lengths.tolist() == [2, 4, 1]
    assert lengths.dtype == np.int32
    for row, feats in zip(speech, rows, strict=True):
        np.testing.assert_array_equal(row[: len(feats)], feats)
        assert not row[len(feats) :].any()


def test_a_row_without_frames_is_all_padding() -> None:
    speech, lengths = pad_rows([np.zeros((0, 2), np.float32), np.ones((3, 2), np.float32)])
    assert lengths.tolist() == [0, 3]
    assert not speech[0].any()
    assert speech[1].all()
