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
from dataclasses import replace

from gateway.models.devices import cuda_device_count, missing_device
from gateway.models.table import NAME_PATTERN, ModelChoice, ModelTable, PoolEntry
from shared import settings_table as table
from shared.engines import Role
from shared.settings import PoolSettings, companion_runtime, speaker_pool_settings

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


def models_table(
    document: Mapping[str, object], environ: Mapping[str, str], cuda_devices: int
) -> ModelTable:
    """The table a parsed models file describes, on a machine with ``cuda_devices``."""
    for setting in REPLACED:
        if setting.name in environ:
            raise ModelsFileError(f"set {setting.name} in the file's entries, not beside it")
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
    roles = _roles(entries)
    default = document.get("default")
    if not isinstance(default, str) or default not in entries:
        raise ModelsFileError(f"default = {default!r}: not an entry")
    if roles[default] != "streaming":
        raise ModelsFileError(f"default = {default!r}: it is a {roles[default]} companion")
    pools = {
        name: PoolEntry(name, _pool(name, entry, roles[name], entries, environ, cuda_devices))
        for name, entry in entries.items()
        if roles[name] != "punc"
    }
    choices = [
        ModelChoice(
            name,
            pools[name],
            _companion(entries[name], Role.OFFLINE, pools),
            _companion(entries[name], Role.VAD, pools),
            _max_sessions(name, entries[name]),
            _companion(entries[name], Role.SPEAKER, pools),
        )
        for name in sorted(entries, key=lambda name: name != default)
        if roles[name] == "streaming"
    ]
    _check_shared_punctuation(choices, entries)
    return ModelTable(default, tuple(choices), from_file=True)


def _roles(entries: Mapping[str, dict[str, object]]) -> dict[str, Role]:
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
                f"[models.{name}] speaker: a speaker model embeds the speech regions its"
                " model's VAD finds; set vad too"
            )
        if "punc" in entry and "offline" not in entry:
            raise ModelsFileError(
                f"[models.{name}] punc: punctuation is of the offline model's results; set"
                " offline too"
            )
    return roles


def _pool(
    name: str,
    entry: Mapping[str, object],
    role: Role,
    entries: Mapping[str, Mapping[str, object]],
    environ: Mapping[str, str],
    cuda_devices: int,
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
        message = str(exc)
        for key, setting in KEYS.items():
            if message.startswith(setting.name + " "):
                raise ModelsFileError(
                    f"[models.{name}] {key}{message[len(setting.name) :]}"
                ) from None
        raise ModelsFileError(f"[models.{name}]: {message}") from None
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
    missing = missing_device(pool.devices, cuda_devices)
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


def _companion(
    entry: Mapping[str, object], role: Role, pools: Mapping[str, PoolEntry]
) -> PoolEntry | None:
    companion = entry.get(role)
    return None if companion is None else pools[str(companion)]


def _max_sessions(name: str, entry: Mapping[str, object]) -> int | None:
    if "max_sessions" not in entry:
        return None
    raw = _as_variable(name, "max_sessions", entry["max_sessions"])
    try:
        return table.MAX_SESSIONS.read({table.MAX_SESSIONS.name: raw})
    except ValueError:
        raise ModelsFileError(
            f"[models.{name}] max_sessions must be {table.MAX_SESSIONS.kind.values}, not {raw!r}"
        ) from None


def _check_shared_punctuation(
    choices: list[ModelChoice], entries: Mapping[str, Mapping[str, object]]
) -> None:
    """Two models that share an offline pool share its punctuation too."""
    punctuation: dict[str, tuple[str, object]] = {}
    for choice in choices:
        if choice.offline is None:
            continue
        punc = entries[choice.name].get("punc")
        seen = punctuation.setdefault(choice.offline.name, (choice.name, punc))
        if seen[1] != punc:
            raise ModelsFileError(
                f"[models.{choice.name}] punc: {choice.offline.name} is shared with {seen[0]},"
                f" whose punc is {seen[1]!r}: models sharing an offline pool share its punc"
            )
