"""The batched FSMN-VAD engine (``fsmn-vad-onnx``) against funasr's own streaming VAD."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from shared.messages import EngineSpec, StreamOptions
from tests.helpers.vad import funasr_final, funasr_vad, spoken
from workers.engines import load_engine
from workers.engines.base import ChunkItem, Engine
from workers.engines.fsmn_vad.onnx_engine import (
    AlignedWaveform,
    EncoderShape,
    encoder_graph,
    layout,
)
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.runtime.onnx_frontend import (
    FrontendState,
    OnlineFbankFrontend,
    OnlineFbankState,
    StreamingFrontend,
)

Segments = tuple[tuple[int, int], ...]
SIL_LOGIT = float(np.log(0.25))  # speech_noise_thres 0.6: a frame is speech below s0 = 0.2

# Streams of "speech" and near-silence, each cut into its own piece sizes: 60 ms strides,
# sizes that are no multiple of a stride, one shorter than a stride, and random cuts.
STREAMS: tuple[tuple[tuple[tuple[str, float], ...], int | None], ...] = (
    ((("quiet", 0.5), ("speech", 1.5), ("quiet", 1.2), ("speech", 1.0), ("quiet", 1.0)), 3200),
    ((("speech", 0.8), ("quiet", 1.1), ("speech", 0.4), ("quiet", 0.9)), 960),
    ((("quiet", 0.3), ("speech", 2.2), ("quiet", 0.2), ("speech", 0.6), ("quiet", 1.0)), 2500),
    ((("speech", 1.2), ("quiet", 1.0), ("speech", 0.9)), 700),
    ((("quiet", 1.4), ("speech", 0.7), ("quiet", 1.3), ("speech", 1.1)), None),
)


def pieces(seed: int, audio: np.ndarray, size: int | None) -> list[np.ndarray]:
    if size is not None:
        return [audio[start : start + size] for start in range(0, len(audio), size)]
    rng = np.random.default_rng(seed)
    cuts = sorted(rng.integers(0, len(audio), 9).tolist())
    bounds = [0, *cuts, len(audio)]
    return [audio[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]


def funasr_segments(model_dir: Path, streams: list[list[np.ndarray]]) -> list[list[Segments]]:
    """funasr's own streaming VAD on each stream, piece by piece, the last one final."""
    reference = load_automodel(str(model_dir), "cpu", 1)
    answers: list[list[Segments]] = []
    for stream in streams:
        cache: dict[str, Any] = {}
        found = [funasr_vad(reference, piece, cache) for piece in stream[:-1]]
        found.append(funasr_final(reference, stream[-1], cache))
        answers.append([tuple((beg, end) for beg, end in piece) for piece in found])
    return answers


def make_streams() -> list[list[np.ndarray]]:
    return [pieces(seed, spoken(seed, *parts), size) for seed, (parts, size) in enumerate(STREAMS)]


def one_by_one(engine: Engine, streams: list[list[np.ndarray]]) -> list[list[Segments]]:
    answers: list[list[Segments]] = []
    for s, stream in enumerate(streams):
        engine.open_stream(s, StreamOptions())
        found: list[Segments] = []
        for seq, piece in enumerate(stream):
            (output,) = engine.feed([ChunkItem(s, seq, piece, seq == len(stream) - 1)])
            assert output.error is None
            assert output.text == ""
            found.append(output.decoded.segments)
        answers.append(found)
    assert engine.active_streams == 0  # each final piece freed its stream
    return answers


def interleaved(engine: Engine, streams: list[list[np.ndarray]]) -> list[list[Segments]]:
    """All streams in the same steps: stream ``s`` starts at step ``s``; every third step
    takes two pieces of each stream at once."""
    answers: list[list[Segments]] = [[] for _ in streams]
    next_piece = [0] * len(streams)
    step = 0
    while any(n < len(stream) for n, stream in zip(next_piece, streams, strict=True)):
        items = []
        for s, stream in enumerate(streams):
            if s > step:
                continue
            if s == step:
                engine.open_stream(s, StreamOptions())
            for _ in range(2 if step % 3 == 2 else 1):
                seq = next_piece[s]
                if seq < len(stream):
                    items.append(ChunkItem(s, seq, stream[seq], seq == len(stream) - 1))
                    next_piece[s] += 1
        outputs = engine.feed(items)
        assert [(o.stream_id, o.seq) for o in outputs] == [(i.stream_id, i.seq) for i in items]
        for output in outputs:
            assert output.error is None
            answers[output.stream_id].append(output.decoded.segments)
        step += 1
    assert engine.active_streams == 0
    return answers


def count_events(answers: list[list[Segments]]) -> tuple[int, int]:
    events = [segment for stream in answers for piece in stream for segment in piece]
    return sum(beg != -1 for beg, _ in events), sum(end != -1 for _, end in events)


# -- models ------------------------------------------------------------------------------


def with_model_conf(source: Path, target: Path, **changes: Any) -> Path:
    shutil.copytree(source, target)
    config = yaml.safe_load((target / "config.yaml").read_text())
    config["model_conf"].update(changes)
    (target / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return target


def network_vad(source: Path, target: Path) -> Path:
    """The synthetic VAD, deciding by its network's scores instead of by energy.

    Random weights score every frame alike. Here the biases are zeroed (the scores then
    follow the features), the silence logit reads the direction in which the last hidden
    layer tells quiet frames from speech ones, scaled to a few units either side of the
    speech/silence threshold, and the decibel threshold is off."""
    import torch
    from funasr.models.fsmn_vad_streaming.encoder import FSMN

    with_model_conf(source, target, decibel_thres=-100.0)
    config = yaml.safe_load((target / "config.yaml").read_text())
    state = torch.load(target / "model.pt", weights_only=True)
    for name, tensor in state.items():
        if name.endswith(".bias"):
            tensor.zero_()
    encoder = FSMN(**config["encoder_conf"]).eval()
    encoder.load_state_dict({k.removeprefix("encoder."): v for k, v in state.items()})
    frontend = StreamingFrontend(target / "am.mvn", config["frontend_conf"])
    hidden: list[torch.Tensor] = []
    encoder.out_linear1.register_forward_hook(lambda *args: hidden.append(args[2][0]))
    with torch.no_grad():
        for kind in ("speech", "quiet"):
            feats = frontend(to_float(spoken(99, (kind, 3.0))), FrontendState(), True)
            encoder(torch.from_numpy(feats)[None], cache={})
    speech, quiet = hidden
    direction = quiet.mean(0) - speech.mean(0)
    direction /= direction.norm()
    low, high = (speech @ direction).median(), (quiet @ direction).median()
    scale = 12.0 / float(high - low)
    # The other logits are about 0: s0 = 0.2 where the silence logit is ln(0.25 * 247).
    threshold = SIL_LOGIT + float(np.log(config["encoder_conf"]["output_dim"] - 1))
    state["encoder.out_linear2.linear.weight"][0] = scale * direction
    state["encoder.out_linear2.linear.bias"][0] = threshold - scale * float(low + high) / 2
    torch.save(state, target / "model.pt")
    return target


MODELS = {
    "energy": {},  # the synthetic VAD as it is
    "network": None,  # network_vad
    "short segments": {"max_single_segment_time": 900},  # cut speech at 0.9 s
    # One utterance a stream; 1.4 s of silence first (the last stream) times out.
    "single utterance": {"detect_mode": 0, "max_start_silence_time": 1000},
    "no extension": {"do_extend": 0},
    "two silence pdfs": {"sil_pdf_ids": [0, 7], "silence_pdf_num": 2},
}


@pytest.fixture(scope="module", params=list(MODELS))
def vad_model(
    request: pytest.FixtureRequest, tiny_vad_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    name: str = request.param
    changes = MODELS[name]
    target = tmp_path_factory.mktemp("vad") / name.replace(" ", "-")
    if changes is None:
        return network_vad(tiny_vad_model, target)
    else:
        return with_model_conf(tiny_vad_model, target, **changes)


# -- fidelity ------------------------------------------------------------------------------


@pytest.mark.slow
def test_segments_are_funasrs_piece_by_piece_alone_and_batched(vad_model: Path) -> None:
    streams = make_streams()
    expected = funasr_segments(vad_model, streams)
    starts, ends = count_events(expected)
    assert starts >= 3, expected  # several segments: the test can fail
    assert ends >= 3, expected
    onnx = load_engine(EngineSpec(engine="fsmn-vad-onnx", model_dir=str(vad_model)))
    assert one_by_one(onnx, streams) == expected
    assert interleaved(onnx, streams) == expected
    if vad_model.name not in ("energy", "network"):
        return  # the options change funasr's code, not the fsmn-vad engine's
    # And the fsmn-vad engine, fed the same steps, answers the same.
    torch_engine = load_engine(EngineSpec(engine="fsmn-vad", model_dir=str(vad_model)))
    assert interleaved(torch_engine, streams) == expected


DILATED = {  # a small FSMN whose memory skips frames (lstride), to check the taps
    "input_dim": 12,
    "input_affine_dim": 10,
    "fsmn_layers": 3,
    "linear_dim": 16,
    "proj_dim": 8,
    "lorder": 4,
    "rorder": 0,
    "lstride": 3,
    "rstride": 0,
    "output_affine_dim": 10,
    "output_dim": 6,
}


@pytest.mark.slow
@pytest.mark.parametrize("which", ["fsmn-vad", "dilated"])
def test_the_scores_are_funasrs_encoders_batched_or_not(which: str, tiny_vad_model: Path) -> None:
    import onnxruntime as ort
    import torch
    from funasr.models.fsmn_vad_streaming.encoder import FSMN

    torch.manual_seed(0)
    if which == "fsmn-vad":
        conf = yaml.safe_load((tiny_vad_model / "config.yaml").read_text())["encoder_conf"]
        reference = FSMN(**conf).eval()
        state = torch.load(tiny_vad_model / "model.pt", weights_only=True)
        reference.load_state_dict({k.removeprefix("encoder."): v for k, v in state.items()})
        sil_pdf_ids = [0]
    else:
        conf = DILATED
        reference = FSMN(**conf).eval()
        sil_pdf_ids = [0, 2]
    weights = {f"encoder.{k}": v.numpy() for k, v in reference.state_dict().items()}
    shape = EncoderShape.from_conf(conf)
    graph = encoder_graph(weights, shape, sil_pdf_ids)
    session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    memories = [[np.zeros((shape.memory, shape.proj_dim), np.float32)] * shape.layers] * 3
    caches: list[dict[str, torch.Tensor]] = [{}, {}, {}]
    for lengths in ((6, 1, 25), (12, 6, 3), (1, 30, 6)):  # one call each, stream by stream
        feats = [rng.normal(0, 1, (n, shape.input_dim)).astype(np.float32) for n in lengths]
        taps, keep = layout(lengths, shape)
        feeds: dict[str, np.ndarray] = {"feats": np.concatenate(feats), "taps": taps, "keep": keep}
        for layer in range(shape.layers):
            feeds[f"memory_{layer}"] = np.concatenate([m[layer] for m in memories])
        silence, *new = session.run(None, feeds)
        rows = np.cumsum((0, *lengths))
        for s in range(len(lengths)):
            with torch.no_grad():
                scores = reference(torch.from_numpy(feats[s])[None], cache=caches[s])[0]
            np.testing.assert_allclose(
                silence[rows[s] : rows[s + 1]], scores[:, sil_pdf_ids].numpy(), rtol=1e-5, atol=1e-7
            )
            memories[s] = [m[s * shape.memory : (s + 1) * shape.memory] for m in new]
            for layer in range(shape.layers):  # funasr's cache: [1, proj, memory, 1]
                np.testing.assert_allclose(
                    memories[s][layer].T,
                    caches[s][f"cache_layer_{layer}"][0, :, :, 0].numpy(),
                    rtol=1e-5,
                    atol=1e-6,
                )


@pytest.mark.slow
def test_features_and_their_samples_are_funasrs_bit_for_bit(tiny_vad_model: Path) -> None:
    """The VAD's frontend (LFR 5/1) and each frame's samples, which its energy is read
    from, against funasr's ``WavFrontendOnline`` with ``return_waveform``, cut anyhow."""
    import torch
    from funasr.frontends.wav_frontend import WavFrontendOnline
    from funasr.utils.load_utils import extract_fbank

    conf = dict(yaml.safe_load((tiny_vad_model / "config.yaml").read_text())["frontend_conf"])
    reference = WavFrontendOnline(cmvn_file=str(tiny_vad_model / "am.mvn"), **conf)
    ours = OnlineFbankFrontend(tiny_vad_model / "am.mvn", conf)
    frames = 0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        audio = rng.normal(0, 0.1, int(rng.integers(300, 30_000))).astype(np.float32)
        bounds = [0, *sorted(rng.integers(0, len(audio), 6).tolist()), len(audio)]
        cache: dict[str, Any] = {}
        state = OnlineFbankState()
        samples = AlignedWaveform(ours.frame_samples, ours.shift_samples * ours.lfr_n)
        for i in range(len(bounds) - 1):
            piece = audio[bounds[i] : bounds[i + 1]]
            final = i == len(bounds) - 2
            expected, _ = extract_fbank(
                [torch.from_numpy(piece)],
                frontend=reference,
                cache=cache,
                is_final=final,
                return_waveform=True,
            )
            samples.push(piece)
            got = ours(piece, state, final)
            if expected.numel() == 0:
                assert got.shape == (0, ours.output_size)
                continue
            np.testing.assert_array_equal(got, expected.numpy()[0])
            aligned = samples.take(len(got))
            np.testing.assert_array_equal(aligned, cache["aligned_waveforms"].numpy()[0])
            frames += len(got)
    assert frames > 300
