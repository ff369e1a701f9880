"""A random-weight SenseVoiceSmall directory, with the real architecture and token ids.

The template is ``shared/reference/sensevoice-small.yaml``: the inference part of
``iic/SenseVoiceSmall``'s config.yaml as FunASR's docs print it (funasr 1.4 ships no
template of its own). The directory has the real one's layout, so funasr loads it through
the same path (``configuration.json``'s ``file_path_metas``): ``config.yaml``, ``model.pt``,
``am.mvn`` and ``chn_jpn_yue_eng_ko_spectok.bpe.model``.

The tokenizer is a SentencePiece model written piece by piece (training one needs a corpus
we do not have): 25,055 pieces like the real one, ``<unk>`` ``<s>`` ``</s>`` first (id 0,
``<unk>``, is also CTC's blank, as in the real model), then CJK characters and English word
pieces, then the rich-transcription tags from id 24,884. The tag ids the model reads or
writes are the real model's (``funasr.models.sense_voice.model``: the language, emotion and
text-norm ids); the ids of the event tags and of the slots the real vocabulary gives to
other languages are ours.

Random weights would decode tags only by chance: SenseVoice writes its four tags from the
four prompt frames in front of the features (language, emotion, event, text norm). The CTC
rows of those tags are therefore aimed at the encoder's output on those frames
(:func:`aim_tags`): the language given comes back as the language tag (``auto`` finds
``AUTO_DETECTS``), ``use_itn`` as ``<|withitn|>`` or ``<|woitn|>``, and the emotion and event
as ``<|NEUTRAL|>`` and ``<|Speech|>``, what a trained model says of most speech. The text
after them is random pieces, as any synthetic model's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from workers.engines.sensevoice.engine import LANGUAGE_QUERY, TEXT_NORM_QUERY
from workers.models.synthetic.base import ModelSize, format_cmvn, frontend_conf, save_weights

VOCAB_SIZE = 25055
FIRST_TAG_ID = 24884
BPE_MODEL = "chn_jpn_yue_eng_ko_spectok.bpe.model"
FEATURE_DIM = 80 * 7
# The real model's ids (funasr.models.sense_voice.model: lid_int_dict, emo_dict,
# textnorm_int_dict), then ours for the events and the unknown ones.
LANGUAGE_TAGS = {"zh": 24884, "en": 24885, "yue": 24888, "ja": 24892, "ko": 24896}
NOSPEECH_TAG = 24992
EVENT_TAGS = {
    "Speech": 24993,
    "BGM": 24994,
    "Laughter": 24995,
    "Applause": 24996,
    "Cry": 24997,
    "Sneeze": 24998,
    "Breath": 24999,
    "Cough": 25000,
    "Event_UNK": 25008,
}
EMOTION_TAGS = {
    "HAPPY": 25001,
    "SAD": 25002,
    "ANGRY": 25003,
    "NEUTRAL": 25004,
    "FEARFUL": 25005,
    "DISGUSTED": 25006,
    "SURPRISED": 25007,
    "EMO_UNKNOWN": 25009,
}
TEXT_NORM_TAGS = {"withitn": 25016, "woitn": 25017}
# An aimed tag's logit on its own frame is half of this, far above the text pieces' (about
# 2.5 at most with random weights), and about minus half of it on the audio frames.
TAG_GAIN = 40.0
RIDGE = 1e-2
AIM_CLIPS = 12
AUDIO_FRAMES_HELD = 8
# What "auto" finds: a random-weight model has no language to detect.
AUTO_DETECTS = "zh"

_ENCODER_LARGE: dict[str, Any] = {
    "output_size": 512,
    "attention_heads": 4,
    "linear_units": 2048,
    "num_blocks": 50,
    "tp_blocks": 20,
    "dropout_rate": 0.1,
    "positional_dropout_rate": 0.1,
    "attention_dropout_rate": 0.1,
    "input_layer": "pe",
    "pos_enc_class": "SinusoidalPositionEncoder",
    "normalize_before": True,
    "kernel_size": 11,
    "sanm_shfit": 0,
    "selfattention_layer_type": "sanm",
}
_ENCODER_TINY: dict[str, Any] = {
    **_ENCODER_LARGE,
    "output_size": 64,
    "linear_units": 128,
    "num_blocks": 2,
    "tp_blocks": 1,
}


def sensevoice_config(size: ModelSize) -> dict[str, Any]:
    """The reference config.yaml (large), or the same with a narrow, shallow encoder."""
    return {
        "encoder": "SenseVoiceEncoderSmall",
        "encoder_conf": copy.deepcopy(_ENCODER_TINY if size == "tiny" else _ENCODER_LARGE),
        "model": "SenseVoiceSmall",
        "model_conf": {"length_normalized_loss": True, "sos": 1, "eos": 2, "ignore_id": -1},
        "tokenizer": "SentencepiecesTokenizer",
        "tokenizer_conf": {"bpemodel": None, "unk_symbol": "<unk>", "split_with_space": True},
        "frontend": "WavFrontend",
        "frontend_conf": {**frontend_conf(lfr_m=7, lfr_n=6), "cmvn_file": None},
    }


def tag_pieces() -> list[str]:
    """The pieces from ``FIRST_TAG_ID`` to the end of the vocabulary."""
    names = {
        **{v: k for k, v in LANGUAGE_TAGS.items()},
        NOSPEECH_TAG: "nospeech",
        **{v: k for k, v in EVENT_TAGS.items()},
        **{v: k for k, v in EMOTION_TAGS.items()},
        **{v: k for k, v in TEXT_NORM_TAGS.items()},
    }
    return [
        f"<|{names.get(i, f'SPECIAL_TOKEN_{i - FIRST_TAG_ID}')}|>"
        for i in range(FIRST_TAG_ID, VOCAB_SIZE)
    ]


def text_pieces(count: int) -> list[str]:
    """CJK characters, then English word pieces (word starts marked "▁", and their
    continuations): ``count`` distinct pieces."""
    pieces = [chr(0x4E00 + i) for i in range(min(count, 20000))]
    letters = "abcdefghijklmnopqrstuvwxyz"
    vowels = "aeiouy"
    syllables = [
        *letters,
        *(a + b for a in letters for b in letters),
        *(a + v + b for a in letters for v in vowels for b in letters),
    ]
    words = [w for s in syllables for w in ("\u2581" + s, s)]
    pieces += words[: count - len(pieces)]
    if len(pieces) != count:
        raise ValueError(f"cannot make {count} distinct text pieces")
    return pieces


def write_bpe_model(path: Path) -> None:
    """A SentencePiece model of exactly ``VOCAB_SIZE`` pieces (see the module docstring)."""
    from sentencepiece import sentencepiece_model_pb2

    sp_model: Any = sentencepiece_model_pb2  # generated protobuf code: no stubs

    proto = sp_model.ModelProto()
    kind = sp_model.ModelProto.SentencePiece.Type
    specials = [("<unk>", kind.UNKNOWN), ("<s>", kind.CONTROL), ("</s>", kind.CONTROL)]
    body = ["\u2581", *text_pieces(FIRST_TAG_ID - len(specials) - 1)]
    for piece, piece_type in specials:
        proto.pieces.add(piece=piece, score=0.0, type=piece_type)
    for rank, piece in enumerate(body):
        proto.pieces.add(piece=piece, score=-1.0 - rank * 1e-4, type=kind.NORMAL)
    for piece in tag_pieces():
        proto.pieces.add(piece=piece, score=0.0, type=kind.USER_DEFINED)
    if len(proto.pieces) != VOCAB_SIZE:
        raise AssertionError(f"{len(proto.pieces)} pieces, not {VOCAB_SIZE}")
    proto.trainer_spec.model_type = sp_model.TrainerSpec.UNIGRAM
    proto.trainer_spec.vocab_size = VOCAB_SIZE
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id = 0, 1, 2
    proto.trainer_spec.pad_id = -1
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = True
    path.write_bytes(proto.SerializeToString())


def configuration_json() -> dict[str, Any]:
    """What the hub's ``configuration.json`` says, which funasr reads the files' names from."""
    return {
        "framework": "pytorch",
        "task": "auto-speech-recognition",
        "model": {"type": "funasr"},
        "pipeline": {"type": "funasr-pipeline"},
        "file_path_metas": {
            "init_param": "model.pt",
            "config": "config.yaml",
            "tokenizer_conf": {"bpemodel": BPE_MODEL},
            "frontend_conf": {"cmvn_file": "am.mvn"},
        },
    }


def build_sensevoice_dir(out_dir: Path, size: ModelSize, seed: int) -> Path:
    """Write the directory (deterministic for a seed)."""
    import torch

    from workers.engines.runtime.funasr_quiet import quiet_funasr

    with quiet_funasr():
        import funasr.models.sense_voice.model  # noqa: F401 (fills the registry)
        from funasr.register import tables

    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    config = sensevoice_config(size)
    torch.manual_seed(seed)
    model_class = tables.model_classes[config["model"]]
    model = model_class(
        **config, **config["model_conf"], input_size=FEATURE_DIM, vocab_size=VOCAB_SIZE
    )
    model.eval()
    generator = torch.Generator().manual_seed(seed + 1)
    means = (torch.rand(FEATURE_DIM, generator=generator) * 4 + 8).tolist()
    inv_stds = (torch.rand(FEATURE_DIM, generator=generator) * 0.2 + 0.2).tolist()
    aim_tags(model, means, inv_stds, seed)

    (out_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (out_dir / "configuration.json").write_text(json.dumps(configuration_json(), indent=2))
    (out_dir / "am.mvn").write_text(format_cmvn(means, inv_stds))
    write_bpe_model(out_dir / BPE_MODEL)
    save_weights(model.state_dict(), out_dir / "model.pt")
    return out_dir


def aim_tags(model: Any, means: list[float], inv_stds: list[float], seed: int) -> None:
    """Aim the tags' CTC rows (module docstring) at the encoder's mean output on the prompt
    frame that should write each, measured on random speech-like features: the row's
    product with that output is ``TAG_GAIN``, less half of it as bias. The row of
    ``AUTO_DETECTS`` gives the same on both its own language's frame and ``auto``'s."""
    import torch

    generator = torch.Generator().manual_seed(seed + 2)
    mean, inv_std = torch.tensor(means), torch.tensor(inv_stds)
    # Log-mel-like features (about 8-12, as the CMVN means say), normalised as the frontend is.
    clips = [
        (torch.rand(frames, FEATURE_DIM, generator=generator) * 4 + 8 - mean) * inv_std
        for frames in torch.randint(8, 80, (AIM_CLIPS,), generator=generator).tolist()
    ]

    def prompt_frames(language: str, text_norm: str) -> Any:
        """The output on the four prompt frames for each clip (clips x 4 x dim), as
        SenseVoiceSmall.inference builds its input: language query, the event and emotion
        queries (embed rows 1 and 2), text-norm query, then the features."""
        ids = torch.tensor([[LANGUAGE_QUERY[language], 1, 2, TEXT_NORM_QUERY[text_norm]]])
        outputs = []
        for clip in clips:
            speech = torch.cat((model.embed(ids), clip[None]), dim=1)
            out, _ = model.encoder(speech, torch.tensor([speech.shape[1]]))
            outputs.append(out[0, :4])
            audio_frames.append(out[0, 4:])
        return torch.stack(outputs)

    audio_frames: list[Any] = []
    with torch.no_grad():
        plain = prompt_frames("auto", "woitn")
        # Every prompt frame's output, and the tag it should write, in the order the real
        # model writes them: language, emotion, event, text norm.
        written: list[tuple[Any, int | None]] = [
            (plain[:, 1], EMOTION_TAGS["NEUTRAL"]),
            (plain[:, 2], EVENT_TAGS["Speech"]),
            (plain[:, 3], TEXT_NORM_TAGS["woitn"]),
            (plain[:, 0], LANGUAGE_TAGS[AUTO_DETECTS]),
            (prompt_frames("auto", "withitn")[:, 3], TEXT_NORM_TAGS["withitn"]),
        ]
        for language, tag in LANGUAGE_TAGS.items():
            written.append((prompt_frames(language, "woitn")[:, 0], tag))
        frames = [(output, tag) for outputs, tag in written for output in outputs]
        # Audio frames write no tag.
        heard = torch.cat(audio_frames)
        picks = torch.randperm(len(heard), generator=generator)[:AUDIO_FRAMES_HELD]
        frames += [(heard[i], None) for i in picks.tolist()]
        outputs = torch.stack([output for output, _ in frames])
        # Each tag's row: the product with its frames' outputs 1, with the other frames' 0,
        # least norm (a little ridge: the outputs are near one another).
        gram = outputs @ outputs.T
        ridge = RIDGE * gram.diagonal().mean() * torch.eye(len(frames))
        solve = outputs.T @ torch.linalg.inv(gram + ridge)
        lo = model.ctc.ctc_lo
        lo.bias.zero_()
        # The encoder's output on audio frames shares one large component, and the piece
        # whose row best matches it would win nearly every frame: the rows are made
        # orthogonal to it, so that the frames' differences pick the pieces.
        common = torch.cat(audio_frames).mean(0)
        lo.weight.sub_(torch.outer(lo.weight @ common, common) / common.dot(common))
        for tag in {tag for _, tag in frames if tag is not None}:
            target = torch.tensor([1.0 if written == tag else 0.0 for _, written in frames])
            lo.weight[tag] = TAG_GAIN * (solve @ target)
            lo.bias[tag] = -TAG_GAIN / 2
