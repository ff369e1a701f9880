"""``ASR_MODELS``: a TOML file of named models, read into a ``ModelTable``.

::

    default = "zh"

    [models.zh]
    model = "paraformer-zh-streaming"
    devices = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    offline = "zh-offline"   # companions name other entries
    vad = "vad"
    punc = "punc"
    speaker = "cam"          # CAM++: speaker labels (needs vad)

    [models.zh-offline]
    model = "paraformer-zh"
    devices = ["cuda:1"]

An entry's keys are the per-model settings' names (``shared.settings_table.PER_MODEL``) in
lower case without ``ASR_``, read by the same parsers as the variables; what an entry does
not set comes from the environment, as for the one model without a file. An entry is a
served model unless another names it as its ``offline``, ``vad``, ``punc`` or ``speaker``:
then it is that companion. A punctuation model runs inside its offline model's workers, so
it is no pool of its own. Every fault is one line naming the entry and the field.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.models.devices import cuda_device_count, missing_device
from gateway.models.table import NAME_PATTERN, ModelChoice, ModelTable, PoolEntry, model_id
from shared import settings_table as table
from shared.engines import Role
from shared.env import Setting
from shared.settings import (
    GPU_RUNTIME,
    PoolSettings,
    companion_runtime,
    runtime_named,
    speaker_pool_settings,
)

COMPANIONS: tuple[Role, ...] = (Role.OFFLINE, Role.VAD, Role.PUNCTUATION, Role.SPEAKER)
KEYS = {setting.name[4:].lower(): setting for setting in table.PER_MODEL}
# Set by the file's entries, never by the environment beside it.
REPLACED = (
    table.MODEL,
    table.OFFLINE_MODEL,
    table.VAD_MODEL,
    table.PUNC_MODEL,
    table.SPEAKER_MODEL,
)


class ModelsFileError(ValueError):
    """A models file that cannot be served: the message is one line, naming where."""


def read_models_file(path: str, environ: Mapping[str, str]) -> ModelTable:
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ModelsFileError(f"ASR_MODELS={path}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ModelsFileError(f"ASR_MODELS={path}: not TOML: {exc}") from None
    try:
        return models_table(document, environ, cuda_device_count(environ))
    except ModelsFileError as exc:
        raise ModelsFileError(f"ASR_MODELS={path}: {exc}") from None


@dataclass(frozen=True, slots=True)
class _Naming:
    """How an error says where it is: a models file's entry and key, or, for the one model
    of the environment (``variables``: each entry's and companion's variable), its
    variable."""

    variables: Mapping[str, str] | None = None

    def where(self, name: str, key: str) -> str:
        """``[models.zh] speaker``, or ``ASR_SPEAKER_MODEL``."""
        if self.variables is None:
            return f"[models.{name}] {key}"
        return self.variables.get(key, self.variables[name])

    def setting(self, key: str) -> str:
        """``vad``, or ``ASR_VAD_MODEL``: what to set."""
        return key if self.variables is None else self.variables[key]


FILE = _Naming()
# The environment's one model as a document: an entry per variable, named by its role.
ENVIRONMENT_ENTRIES: dict[str, Setting[Any]] = {
    "model": table.MODEL,
    "offline": table.OFFLINE_MODEL,
    "vad": table.VAD_MODEL,
    "punc": table.PUNC_MODEL,
    "speaker": table.SPEAKER_MODEL,
}
ENVIRONMENT = _Naming({name: setting.name for name, setting in ENVIRONMENT_ENTRIES.items()})


def environment_table(environ: Mapping[str, str]) -> ModelTable:
    """The one model of ``ASR_MODEL`` and its companions' variables, read as a one-entry
    models document by the code that reads ``ASR_MODELS``: what a companion is and needs is
    said once. Its models are named by their model (``model_id``), as metrics label them."""
    streaming: dict[str, object] = {"model": table.MODEL.read(environ)}
    entries: dict[str, dict[str, object]] = {"model": streaming}
    for name, setting in ENVIRONMENT_ENTRIES.items():
        value = setting.read(environ)
        if name != "model" and value is not None:
            entries[name] = {"model": value}
            streaming[name] = name
    read = _read_table({"default": "model", "models": entries}, environ, None, ENVIRONMENT)
    (choice,) = read.choices

    def named(entry: PoolEntry) -> PoolEntry:
        return PoolEntry(model_id(entry.settings.model), entry.settings)

    companions = {role: named(entry) for role, entry in choice.companions.items()}
    one = ModelChoice(
        model_id(choice.streaming.settings.model), named(choice.streaming), companions
    )
    return ModelTable(one.name, (one,))


def models_table(
    document: Mapping[str, object], environ: Mapping[str, str], cuda_devices: int
) -> ModelTable:
    """The table a parsed models file describes, on a machine with ``cuda_devices``."""
    for setting in REPLACED:
        if setting.name in environ:
            raise ModelsFileError(f"set {setting.name} in the file's entries, not beside it")
    return _read_table(document, environ, cuda_devices, FILE)


def _read_table(
    document: Mapping[str, object],
    environ: Mapping[str, str],
    cuda_devices: int | None,
    naming: _Naming,
) -> ModelTable:
    """A models document's table; its devices checked against ``cuda_devices`` (None:
    left to the workers, which refuse a device that is not there when they start)."""
    unknown = set(document) - {"default", "models"}
    if unknown:
        raise ModelsFileError(f"unknown top-level key {sorted(unknown)[0]!r} (default, models)")
    entries = document.get("models")
    if not isinstance(entries, dict) or not entries:
        raise ModelsFileError("no [models.NAME] tables")
    for name, entry in entries.items():
        if not NAME_PATTERN.fullmatch(name):
            raise ModelsFileError(
                f"[models.{name}]: a name is letters, digits, '.', '_', '-' or ':', at most 64"
            )
        if not isinstance(entry, dict):
            raise ModelsFileError(f"models.{name} is not a table")
    roles = _roles(entries, naming)
    default = document.get("default")
    if not isinstance(default, str) or default not in entries:
        raise ModelsFileError(f"default = {default!r}: not an entry")
    if roles[default] != "streaming":
        raise ModelsFileError(f"default = {default!r}: it is a {roles[default]} companion")

    def read_pools(env: Mapping[str, str]) -> dict[str, PoolEntry]:
        return {
            name: PoolEntry(
                name, _pool(name, entry, roles[name], entries, env, cuda_devices, naming)
            )
            for name, entry in entries.items()
            if roles[name] != "punc"
        }

    pools = read_pools(environ)
    if not runtime_named(environ) and any(
        device.startswith("cuda") for entry in pools.values() for device in entry.settings.devices
    ):
        # A GPU anywhere makes ONNX Runtime every pool's default, the companions' on the CPU
        # too (the VAD's vectorised engine): ASR_RUNTIME unset (shared.settings.default_runtime).
        pools = read_pools({**environ, table.RUNTIME.name: GPU_RUNTIME})
    choices = [
        ModelChoice(
            name, pools[name], _companions(entries[name], pools), _max_sessions(name, entries[name])
        )
        for name in sorted(entries, key=lambda name: name != default)
        if roles[name] == "streaming"
    ]
    _check_shared_punctuation(choices, entries)
    return ModelTable(default, tuple(choices), from_file=naming is FILE)


def _roles(entries: Mapping[str, dict[str, object]], naming: _Naming) -> dict[str, Role]:
    """Each entry's role: a companion where another names it, else a served model."""
    roles: dict[str, Role] = dict.fromkeys(entries, Role.STREAMING)
    named_by: dict[str, str] = {}
    for name, entry in entries.items():
        for role in COMPANIONS:
            if role not in entry:
                continue
            companion = entry[role]
            if not isinstance(companion, str) or companion not in entries:
                raise ModelsFileError(f"[models.{name}] {role} = {companion!r}: not an entry")
            if companion == name:
                raise ModelsFileError(f"[models.{name}] {role}: names the entry itself")
            if companion in named_by and roles[companion] != role:
                raise ModelsFileError(
                    f"[models.{companion}] is {named_by[companion]}'s {roles[companion]}"
                    f" and {name}'s {role}: an entry has one role"
                )
            roles[companion] = role
            named_by[companion] = name
    for name, entry in entries.items():
        if roles[name] == "streaming":
            continue
        for role in COMPANIONS:
            if role in entry:
                raise ModelsFileError(
                    f"[models.{name}] {role}: {name} is {named_by[name]}'s {roles[name]}"
                    " companion, which has no companions of its own"
                )
        if "max_sessions" in entry:
            raise ModelsFileError(
                f"[models.{name}] max_sessions: {name} is a companion; sessions choose"
                f" {named_by[name]}"
            )
        if roles[name] == "punc" and set(entry) != {"model"}:
            extra = sorted(set(entry) - {"model"})[0]
            raise ModelsFileError(
                f"[models.{name}] {extra}: a punctuation model runs in its offline model's"
                " workers and takes only `model`"
            )
    for name, entry in entries.items():
        if "speaker" in entry and "vad" not in entry:
            raise ModelsFileError(
                f"{naming.where(name, 'speaker')}: a speaker model embeds the speech regions"
                f" its model's VAD finds; set {naming.setting('vad')} too"
            )
        if "punc" in entry and "offline" not in entry:
            raise ModelsFileError(
                f"{naming.where(name, 'punc')}: punctuation is of the offline model's results;"
                f" set {naming.setting('offline')} too"
            )
    return roles


def _pool(
    name: str,
    entry: Mapping[str, object],
    role: Role,
    entries: Mapping[str, Mapping[str, object]],
    environ: Mapping[str, str],
    cuda_devices: int | None,
    naming: _Naming,
) -> PoolSettings:
    """The entry's pool: its keys over the environment, as its variables would be."""
    if "model" not in entry:
        raise ModelsFileError(f"[models.{name}] model: missing")
    overlay: dict[str, str] = {}
    for key, value in entry.items():
        if key in COMPANIONS:
            continue
        setting = KEYS.get(key)
        if setting is None:
            raise ModelsFileError(
                f"[models.{name}] {key}: unknown key (known: {', '.join(KEYS)},"
                f" {', '.join(COMPANIONS)})"
            )
        overlay[setting.name] = _as_variable(name, key, value)
    env = {**environ, **overlay}
    try:
        for setting in table.PER_MODEL:
            setting.read(env)  # each value checked by its own parser, named by its key
    except ValueError as exc:
        if naming is not FILE:
            raise ModelsFileError(str(exc)) from None  # it names its variable already
        raise _keyed(name, exc) from None
    pool = PoolSettings.from_env(env)
    given = set(entry)
    if role == "offline":
        punc = next(
            (str(e["punc"]) for e in entries.values() if e.get("offline") == name and "punc" in e),
            None,
        )
        pool = replace(
            pool,
            kind=Role.OFFLINE,
            punc_model=None if punc is None else str(entries[punc]["model"]),
            runtime=pool.runtime
            if given & {"runtime", "engine"}
            else companion_runtime(env, table.OFFLINE_RUNTIME, table.OFFLINE_ENGINE)
            or pool.runtime,
            engine=_own_engine(pool, given),
            devices=pool.devices
            if "devices" in given
            else table.OFFLINE_DEVICES.read(env) or pool.devices,
            batch_hold=pool.batch_hold if "batch_hold" in given else "wait",
            batch_wait_s=(
                pool.batch_wait_s
                if "batch_wait_ms" in given
                else table.OFFLINE_BATCH_WAIT_MS.read(env)
            ),
            worker_nice=table.OFFLINE_NICE.read(env),
            # An utterance is decoded at its end; the wait above bounds the hold.
            chunk_deadline_s=pool.chunk_deadline_s if "chunk_deadline_ms" in given else 60.0,
        )
    elif role == "vad":
        pool = replace(
            pool,
            kind=Role.VAD,
            runtime=pool.runtime
            if given & {"runtime", "engine"}
            else companion_runtime(env, table.VAD_RUNTIME, table.VAD_ENGINE) or pool.runtime,
            engine=_own_engine(pool, given),
            devices=pool.devices if "devices" in given else table.VAD_DEVICES.read(env),
            workers_per_device=pool.workers_per_device if "workers_per_device" in given else 1,
            batch_hold=pool.batch_hold if "batch_hold" in given else "wait",
            batch_wait_s=pool.batch_wait_s if "batch_wait_ms" in given else 0.0,
        )
    elif role == "speaker":
        devices = pool.devices if "devices" in given else table.SPEAKER_DEVICES.read(env)
        pool = speaker_pool_settings(pool, pool.model, devices, _own_engine(pool, given))
    missing = None if cuda_devices is None else missing_device(pool.devices, cuda_devices)
    if missing is not None:
        raise ModelsFileError(
            f"[models.{name}] devices: {missing} does not exist (this machine has"
            f" {cuda_devices} CUDA device{'' if cuda_devices == 1 else 's'})"
        )
    return pool


def _own_engine(pool: PoolSettings, given: set[str]) -> str | None:
    """A companion's engine: its entry's own, never the environment's ASR_ENGINE (which is
    the streaming model's)."""
    return pool.engine if "engine" in given else None


def _as_variable(name: str, key: str, value: object) -> str:
    """A TOML value as its variable would spell it; lists for lists only (devices)."""
    match value:
        case bool():
            return "1" if value else "0"
        case int() | float():
            return repr(value)
        case str():
            return value
        case list() if key == "devices" and all(isinstance(v, str) for v in value):
            return ",".join(value)
    raise ModelsFileError(f"[models.{name}] {key}: {type(value).__name__} is not a value it takes")


def _companions(
    entry: Mapping[str, object], pools: Mapping[str, PoolEntry]
) -> dict[Role, PoolEntry]:
    """The pools an entry names as its companions, by role (the punctuation is none: it
    runs inside the offline pool)."""
    return {
        role: pools[str(entry[role])]
        for role in COMPANIONS
        if role in entry and role is not Role.PUNCTUATION
    }


def _max_sessions(name: str, entry: Mapping[str, object]) -> int | None:
    if "max_sessions" not in entry:
        return None
    raw = _as_variable(name, "max_sessions", entry["max_sessions"])
    try:
        return table.MAX_SESSIONS.read({table.MAX_SESSIONS.name: raw})
    except ValueError as exc:
        raise _keyed(name, exc) from None


def _keyed(name: str, error: ValueError) -> ModelsFileError:
    """A setting's error, which names its variable (``ASR_MAX_BATCH must be ...``), as
    entry ``name``'s, naming its key (``[models.zh] max_batch must be ...``)."""
    message = str(error)
    for key, setting in KEYS.items():
        if message.startswith(setting.name + " "):
            return ModelsFileError(f"[models.{name}] {key}{message[len(setting.name) :]}")
    return ModelsFileError(f"[models.{name}]: {message}")


def _check_shared_punctuation(
    choices: list[ModelChoice], entries: Mapping[str, Mapping[str, object]]
) -> None:
    """Two models that share an offline pool share its punctuation too."""
    punctuation: dict[str, tuple[str, object]] = {}
    for choice in choices:
        offline = choice.companion(Role.OFFLINE)
        if offline is None:
            continue
        punc = entries[choice.name].get("punc")
        seen = punctuation.setdefault(offline.name, (choice.name, punc))
        if seen[1] != punc:
            raise ModelsFileError(
                f"[models.{choice.name}] punc: {offline.name} is shared with {seen[0]},"
                f" whose punc is {seen[1]!r}: models sharing an offline pool share its punc"
            )
