"""The model kinds, one row each, and the engines they run on: the one table that tells kinds
and engines apart (as uvicorn's ``LOOP_SETUPS`` and ``HTTP_PROTOCOLS`` are its).

A kind is what a model directory's ``config.yaml`` says it is (its ``model:`` class), the
role it can fill in a served model, the names it goes by on the hub, how a random-weight one
is built, and which engine serves it under each runtime (``ASR_RUNTIME``). An engine is a
class by import path, with what it loads before its workers start (an ONNX export).
Everything that tells kinds apart reads these rows: model resolution, the engine a pool
runs, the exports made at start-up, the synthetic builds and their ``--kind``. What an
engine's results mean is not here: each engine says so itself (its ``capabilities``, which
every worker reports when it is ready).

Adding a kind is a row here and a folder of ``workers/engines/`` (and of
``workers/models/synthetic/``, for a random-weight build): docs/adding-a-model.md. A
user's own engine needs no row: a models-file entry names its class by import path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.engines import RUNTIME_FALLBACKS, RUNTIMES, EngineName, Role, Runtime


@dataclass(frozen=True, slots=True)
class EngineRow:
    """One engine: its class (``module:Class``, whose ``load(spec)`` builds it in the
    worker), and what must exist before a worker loads it."""

    entry: str
    # It loads the ONNX export of its model directory, made once at start-up in a child
    # process (``python -m workers.models.export``), in the QDQ int8 form with ``qdq``.
    exported: bool = False
    qdq: bool = False
    # Its punctuator loads the CT-Transformer's ONNX export (``ASR_PUNC_MODEL``).
    punctuation_exported: bool = False
    # It runs its model on ONNX Runtime (a GPU then needs onnxruntime-gpu).
    onnxruntime: bool = False


ENGINES: Mapping[EngineName, EngineRow] = {
    "checksum": EngineRow("workers.engines.checksum.engine:ChecksumEngine"),
    "paraformer": EngineRow("workers.engines.paraformer.streaming:ParaformerStreamingEngine"),
    "paraformer-onnx": EngineRow(
        "workers.engines.paraformer.streaming_onnx:ParaformerOnnxEngine",
        exported=True,
        onnxruntime=True,
    ),
    "paraformer-openvino": EngineRow(
        "workers.engines.paraformer.streaming_openvino:ParaformerOpenVinoEngine",
        exported=True,
        qdq=True,
    ),
    "paraformer-offline": EngineRow("workers.engines.paraformer.offline:ParaformerOfflineEngine"),
    "paraformer-offline-onnx": EngineRow(
        "workers.engines.paraformer.offline_onnx:ParaformerOfflineOnnxEngine",
        exported=True,
        punctuation_exported=True,
        onnxruntime=True,
    ),
    "fsmn-vad": EngineRow("workers.engines.fsmn_vad.engine:FsmnVadEngine"),
    "fsmn-vad-onnx": EngineRow(
        "workers.engines.fsmn_vad.onnx_engine:FsmnVadOnnxEngine", onnxruntime=True
    ),
    "sensevoice": EngineRow("workers.engines.sensevoice.engine:SenseVoiceEngine"),
    "sensevoice-onnx": EngineRow(
        "workers.engines.sensevoice.onnx_engine:SenseVoiceOnnxEngine",
        exported=True,
        onnxruntime=True,
    ),
    "sensevoice-streaming": EngineRow(
        "workers.engines.sensevoice.streaming:SenseVoiceStreamingEngine"
    ),
    "sensevoice-streaming-onnx": EngineRow(
        "workers.engines.sensevoice.streaming:SenseVoiceStreamingOnnxEngine",
        exported=True,
        onnxruntime=True,
    ),
    "campplus": EngineRow("workers.engines.campplus.engine:CamppEngine"),
}


@dataclass(frozen=True, slots=True)
class KindRow:
    """One model kind.

    ``classes``: the ``config.yaml`` ``model:`` values it recognises (none: model-free,
    named by ``name`` itself). ``engines``: its engine under each runtime; a runtime it
    has no engine for runs it on its ``torch`` one, and a kind with no engine at all runs
    inside another's (punctuation, in the offline engines). ``hub_aliases``: funasr's
    short names for it, to the hub's model ids. ``synthetic``: its random-weight builds by
    name (``synthetic-NAME:SIZE``), each ``module:function`` taking ``(out_dir, size,
    seed)``; the first is what ``synthetic:SIZE`` builds for its role, where it is the first
    kind of that role. ``streaming``: an offline kind that also serves as a streaming model,
    decoded again as it grows (``workers.engines.sensevoice.streaming``): its engine for that
    role under each runtime.
    """

    name: str
    role: Role
    classes: tuple[str, ...]
    engines: Mapping[Runtime, EngineName] = field(default_factory=dict)
    hub_aliases: Mapping[str, str] = field(default_factory=dict)
    synthetic: Mapping[str, str] = field(default_factory=dict)
    description: str = ""  # for messages: "is not {description}"
    # What its funasr model does beyond text, which its engine asks of it: it takes
    # ``generate(hotword=...)`` (the others ignore it in funasr, and are never passed it);
    # it predicts each token's time.
    hotwords: bool = False
    token_times: bool = False
    streaming: Mapping[Runtime, EngineName] = field(default_factory=dict)

    def serves(self, role: Role) -> bool:
        return role == self.role or (role == Role.STREAMING and bool(self.streaming))

    def engine(self, runtime: Runtime, role: Role | None = None) -> EngineName | None:
        """Its engine under ``runtime`` (in ``role``, where it has more than one), or the
        next runtime's in that one's line."""
        engines = self.streaming if role == Role.STREAMING and role != self.role else self.engines
        for fallback in RUNTIME_FALLBACKS[runtime]:
            if fallback in engines:
                return engines[fallback]
        return None


_SYNTHETIC = "workers.models.synthetic"
_PARAFORMER_LARGE = "iic/speech_paraformer-large_asr_nat-zh-cn-16k-common-vocab8404"
_SEACO_LARGE = "iic/speech_seaco_paraformer_large_asr_nat-zh-cn-16k-common-vocab8404-pytorch"

KINDS: tuple[KindRow, ...] = (
    KindRow(
        "checksum",
        Role.STREAMING,
        (),
        {"torch": "checksum"},
        description="model-free",
    ),
    KindRow(
        "paraformer-streaming",
        Role.STREAMING,
        ("ParaformerStreaming",),
        {"torch": "paraformer", "onnx": "paraformer-onnx", "openvino": "paraformer-openvino"},
        {"paraformer-zh-streaming": f"{_PARAFORMER_LARGE}-online"},
        {"streaming": f"{_SYNTHETIC}.paraformer:build_streaming"},
        "a streaming Paraformer",
    ),
    KindRow(
        "paraformer-offline",
        Role.OFFLINE,
        ("Paraformer",),
        {"torch": "paraformer-offline", "onnx": "paraformer-offline-onnx"},
        {"paraformer": f"{_PARAFORMER_LARGE}-pytorch"},
        {"offline": f"{_SYNTHETIC}.paraformer:build_offline"},
        "an offline Paraformer",
    ),
    # SeACo and the Contextual Paraformer take hotwords, BiCif predicts token times: the
    # offline ONNX export carries neither, so they run under PyTorch whatever the runtime.
    KindRow(
        "seaco-paraformer",
        Role.OFFLINE,
        ("SeacoParaformer",),
        {"torch": "paraformer-offline"},
        # funasr's "paraformer-zh" is the SeACo model (FunASR's Python server's offline
        # model); "seaco-paraformer" is ours, for the same.
        {"paraformer-zh": _SEACO_LARGE, "seaco-paraformer": _SEACO_LARGE},
        {"seaco": f"{_SYNTHETIC}.paraformer:build_seaco"},
        "a SeACo-Paraformer",
        hotwords=True,
        token_times=True,
    ),
    KindRow(
        "bicif-paraformer",
        Role.OFFLINE,
        ("BiCifParaformer",),
        {"torch": "paraformer-offline"},
        synthetic={"bicif": f"{_SYNTHETIC}.paraformer:build_bicif"},
        description="a BiCifParaformer",
        token_times=True,
    ),
    KindRow(
        "contextual-paraformer",
        Role.OFFLINE,
        ("ContextualParaformer",),
        {"torch": "paraformer-offline"},
        synthetic={"contextual": f"{_SYNTHETIC}.contextual:build_contextual"},
        description="a Contextual Paraformer",
        hotwords=True,
    ),
    KindRow(
        "sensevoice",
        Role.OFFLINE,
        ("SenseVoiceSmall",),
        {"torch": "sensevoice", "onnx": "sensevoice-onnx"},
        {"sensevoice": "iic/SenseVoiceSmall", "SenseVoiceSmall": "iic/SenseVoiceSmall"},
        {"sensevoice": f"{_SYNTHETIC}.sensevoice:build_sensevoice_dir"},
        "SenseVoiceSmall",
        streaming={"torch": "sensevoice-streaming", "onnx": "sensevoice-streaming-onnx"},
    ),
    KindRow(
        "fsmn-vad",
        Role.VAD,
        ("FsmnVADStreaming",),
        {"torch": "fsmn-vad", "onnx": "fsmn-vad-onnx"},
        {"fsmn-vad": "iic/speech_fsmn_vad_zh-cn-16k-common-pytorch"},
        {"vad": f"{_SYNTHETIC}.companions:build_vad"},
        "an FSMN-VAD",
    ),
    KindRow(
        "ct-transformer",
        Role.PUNCTUATION,
        ("CTTransformer",),
        hub_aliases={
            "ct-punc": "iic/punc_ct-transformer_cn-en-common-vocab471067-large",
            "ct-punc-c": "iic/punc_ct-transformer_zh-cn-common-vocab272727-pytorch",
        },
        synthetic={"punc": f"{_SYNTHETIC}.companions:build_punc_dir"},
        description="a CT-Transformer punctuation model",
    ),
    KindRow(
        "campplus",
        Role.SPEAKER,
        ("CAMPPlus",),
        {"torch": "campplus"},
        {"cam++": "iic/speech_campplus_sv_zh-cn_16k-common"},
        {"campplus": f"{_SYNTHETIC}.campplus:build_campplus"},
        "a CAM++ speaker model",
    ),
)


def _check(kinds: tuple[KindRow, ...]) -> None:
    """The table's own consistency, checked at import: a typo here fails every start."""
    names: set[str] = set()
    builds: set[str] = set()
    classes: set[str] = set()
    for kind in kinds:
        assert kind.name not in names, f"kind {kind.name} twice"
        names.add(kind.name)
        for engine in (*kind.engines.values(), *kind.streaming.values()):
            assert engine in ENGINES, f"kind {kind.name}: no engine {engine}"
        for engines in (kind.engines, kind.streaming):
            assert set(engines) <= set(RUNTIMES), f"kind {kind.name}: a runtime unknown"
        assert not builds & set(kind.synthetic), f"kind {kind.name}: a build named twice"
        builds |= set(kind.synthetic)
        assert not classes & set(kind.classes), f"kind {kind.name}: a class twice"
        classes |= set(kind.classes)


_check(KINDS)


def kind_of_class(model_class: str) -> KindRow | None:
    """The kind a ``config.yaml`` ``model:`` names, if it is one of ours."""
    return next((kind for kind in KINDS if model_class in kind.classes), None)


def kind_named(name: str) -> KindRow | None:
    return next((kind for kind in KINDS if kind.name == name), None)


def kinds_for(role: Role) -> tuple[KindRow, ...]:
    """The kinds that serve ``role``: their own, or the streaming one they also serve."""
    return tuple(kind for kind in KINDS if kind.serves(role))


def synthetic_builds() -> dict[str, str]:
    """Every random-weight build by name, to its ``module:function``."""
    return {name: entry for kind in KINDS for name, entry in kind.synthetic.items()}


def default_build(role: Role) -> str | None:
    """What ``synthetic:SIZE`` builds for ``role``: its first kind's first build."""
    for kind in kinds_for(role):
        if kind.synthetic:
            return next(iter(kind.synthetic))
    return None


def hub_aliases() -> dict[str, str]:
    return {alias: model_id for kind in KINDS for alias, model_id in kind.hub_aliases.items()}
