"""``ASR_MODELS``: the models file read into a table, and every fault one line naming the
entry and the field."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gateway.models.devices import cuda_device_count, missing_device
from gateway.models.models_file import (
    ModelsFileError,
    environment_table,
    models_table,
    read_models_file,
)
from gateway.models.table import single_model
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings

# The seed's layout, as docs/several-models.md shows it: two models, two GPUs, two instances of
# each streaming model per GPU, one offline pool for both.
DOCS = Path(__file__).resolve().parents[3] / "docs" / "several-models.md"
SEED_LAYOUT = DOCS.read_text().split("```toml\n", 1)[1].split("```", 1)[0]


def table_of(text: str, cuda: int = 2, env: dict[str, str] | None = None) -> object:
    return models_table(tomllib.loads(text), env or {}, cuda)


def test_the_seed_layout_is_two_models_sharing_one_offline_pool() -> None:
    env = {"ASR_THREADS_PER_WORKER": "2", "ASR_BATCH_HOLD": "due"}
    table = models_table(tomllib.loads(SEED_LAYOUT), env, 2)
    assert table.default == "zh"
    assert [choice.name for choice in table.choices] == ["zh", "en"]
    zh, en = table.choices
    assert zh.streaming.settings.devices == ("cuda:0", "cuda:0", "cuda:1", "cuda:1")
    assert zh.streaming.settings.kind == "streaming"
    assert zh.max_sessions == 48
    assert en.max_sessions is None
    assert en.streaming.settings.worker_devices == ("cuda:0", "cuda:0", "cuda:1", "cuda:1")
    assert en.streaming.settings.max_batch == 16
    # What an entry does not set comes from the environment.
    assert zh.streaming.settings.threads_per_worker == 2
    assert zh.companions[Role.OFFLINE] == en.companions[Role.OFFLINE]
    assert zh.companions[Role.OFFLINE].name == "zh-offline"
    offline = zh.companions[Role.OFFLINE].settings
    assert (offline.kind, offline.model, offline.punc_model) == (
        "offline",
        "paraformer-zh",
        "ct-punc",
    )
    assert offline.batch_wait_s == pytest.approx(0.02)
    assert offline.batch_hold == "wait"  # utterances end when they end: none is due
    assert zh.streaming.settings.batch_hold == "due"  # the environment's
    vad = zh.companions[Role.VAD].settings
    assert vad.kind == "vad"
    assert vad.batch_hold == "wait"
    assert vad.devices == ("cpu",)  # ASR_VAD_DEVICES' default
    assert en.companion(Role.VAD) is None
    # One pool per entry: the shared offline pool once; the punctuation is inside it.
    assert [p.name for p in table.pool_entries] == ["zh", "zh-offline", "vad", "en"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\ncolour = "red"',
            "[models.zh] colour: unknown key",
        ),
        ('default = "zh"\n[models.zh]\ndevices = ["cpu"]', "[models.zh] model: missing"),
        ('default = "zz"\n[models.zh]\nmodel = "checksum"', "default = 'zz': not an entry"),
        ('[models.zh]\nmodel = "checksum"', "default = None: not an entry"),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\noffline = "nope"',
            "[models.zh] offline = 'nope': not an entry",
        ),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\nspeaker = "s"\n'
            '[models.s]\nmodel = "cam++"',
            "[models.zh] speaker: a speaker model embeds the speech regions its model's VAD"
            " finds; set vad too",
        ),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\nmax_batch = 0',
            "[models.zh] max_batch must be an integer ≥ 1, not '0'",
        ),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\ndevices = ["cuda:2"]',
            "[models.zh] devices: cuda:2 does not exist (this machine has 2 CUDA devices)",
        ),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\ndevices = "gpu"',
            "[models.zh] devices must be comma-separated devices",
        ),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\nmax_batch = [1]',
            "[models.zh] max_batch: list is not a value it takes",
        ),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\nmax_sessions = 0',
            "[models.zh] max_sessions must be an integer ≥ 1",
        ),
        (
            (
                'default = "zh"\n'
                "[models.zh]\n"
                'model = "checksum"\n'
                'punc = "p"\n'
                "[models.p]\n"
                'model = "ct-punc"'
            ),
            "[models.zh] punc: punctuation is of the offline model's results",
        ),
        (
            'default = "zh"\nother = 1\n[models.zh]\nmodel = "checksum"',
            "unknown top-level key 'other'",
        ),
        ('default = "zh"', "no [models.NAME] tables"),
        ('default = "zh"\n[models."z h"]\nmodel = "checksum"', "[models.z h]: a name is letters"),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\noffline = "zh"',
            "[models.zh] offline: names the entry itself",
        ),
        # A companion of the wrong kind: named as two roles, or a companion as the default.
        (
            (
                'default = "a"\n'
                "[models.a]\n"
                'model = "checksum"\n'
                'offline = "c"\n'
                "[models.b]\n"
                'model = "checksum"\n'
                'vad = "c"\n'
                "[models.c]\n"
                'model = "x"'
            ),
            "[models.c] is a's offline and b's vad: an entry has one role",
        ),
        (
            'default = "c"\n[models.a]\nmodel = "checksum"\noffline = "c"\n[models.c]\nmodel = "x"',
            "default = 'c': it is a offline companion",
        ),
        (
            (
                'default = "a"\n'
                "[models.a]\n"
                'model = "checksum"\n'
                'offline = "c"\n'
                "[models.c]\n"
                'model = "x"\n'
                'vad = "v"\n'
                "[models.v]\n"
                'model = "v"'
            ),
            "[models.c] vad: c is a's offline companion, which has no companions of its own",
        ),
        (
            (
                'default = "a"\n'
                "[models.a]\n"
                'model = "checksum"\n'
                'offline = "c"\n'
                "[models.c]\n"
                'model = "x"\n'
                "max_sessions = 3"
            ),
            "[models.c] max_sessions: c is a companion; sessions choose a",
        ),
        (
            (
                'default = "a"\n'
                "[models.a]\n"
                'model = "checksum"\n'
                'offline = "o"\n'
                'punc = "p"\n'
                "[models.o]\n"
                'model = "x"\n'
                "[models.p]\n"
                'model = "ct-punc"\n'
                'devices = ["cpu"]'
            ),
            "[models.p] devices: a punctuation model runs in its offline model's workers",
        ),
        (
            (
                'default = "a"\n'
                "[models.a]\n"
                'model = "checksum"\n'
                'offline = "o"\n'
                'punc = "p"\n'
                "[models.b]\n"
                'model = "checksum"\n'
                'offline = "o"\n'
                "[models.o]\n"
                'model = "x"\n'
                "[models.p]\n"
                'model = "ct-punc"'
            ),
            "[models.b] punc: o is shared with a, whose punc is 'p'",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_the_entry_and_the_field(text: str, message: str) -> None:
    with pytest.raises(ModelsFileError) as refused:
        table_of(text)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_models_variables_cannot_be_set_beside_the_file() -> None:
    with pytest.raises(ModelsFileError, match="set ASR_MODEL in the file's entries"):
        table_of('default = "a"\n[models.a]\nmodel = "checksum"', env={"ASR_MODEL": "checksum"})


def test_a_duplicate_name_or_a_file_that_is_not_toml_fails_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('default = "a"\n[models.a]\nmodel = "checksum"\n[models.a]\nmodel = "x"\n')
    with pytest.raises(ModelsFileError, match=rf"ASR_MODELS={path}: not TOML: .*"):
        read_models_file(str(path), {})
    with pytest.raises(ModelsFileError, match="cannot read it"):
        read_models_file(str(tmp_path / "missing.toml"), {})


def test_a_bad_file_fails_the_settings_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('default = "a"\n[models.a]\nmodel = "checksum"\nmax_batch = -1\n')
    with pytest.raises(ValueError, match=r"\[models.a\] max_batch must be"):
        GatewaySettings.from_env({"ASR_MODELS": str(path)})


def test_the_default_model_is_the_first_choice_and_the_settings_pool() -> None:
    text = 'default = "b"\n[models.a]\nmodel = "checksum"\n[models.b]\nmodel = "synthetic:tiny"'
    table = table_of(text)
    assert [choice.name for choice in table.choices] == ["b", "a"]  # type: ignore[attr-defined]


def test_without_a_file_the_one_model_is_named_by_its_model() -> None:
    pool = PoolSettings(model="/srv/models/paraformer-en/")
    offline = PoolSettings(model="paraformer-zh", kind=Role.OFFLINE)
    table = single_model(pool, {Role.OFFLINE: offline})
    assert table.default == "paraformer-en"  # a directory by its last part: no server path
    (choice,) = table.choices
    assert choice.companions[Role.OFFLINE].name == "paraformer-zh"
    assert not table.from_file
    assert GatewaySettings().model_table.default == "paraformer-zh-streaming"


def test_cuda_devices_are_counted_from_the_driver_and_cuda_visible_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = tmp_path / "gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (gpus / bus).mkdir(parents=True)
    monkeypatch.setattr("gateway.models.devices.NVIDIA_GPUS", gpus)
    assert cuda_device_count({}) == 2
    assert cuda_device_count({"CUDA_VISIBLE_DEVICES": "1"}) == 1
    assert cuda_device_count({"CUDA_VISIBLE_DEVICES": "-1"}) == 0
    monkeypatch.setattr("gateway.models.devices.NVIDIA_GPUS", tmp_path / "none")
    assert cuda_device_count({}) == 0
    assert missing_device(("cpu", "cuda:0", "cuda"), 1) is None
    assert missing_device(("cpu", "cuda:1"), 1) == "cuda:1"
    assert missing_device(("cuda",), 0) == "cuda"


def test_the_readmes_example_is_a_valid_file() -> None:
    readme = DOCS.parents[1] / "README.md"
    example = readme.read_text().split("```toml\n", 1)[1].split("```", 1)[0]
    table = models_table(tomllib.loads(example), {}, 2)
    assert [choice.name for choice in table.choices] == ["zh", "en"]
    assert [p.name for p in table.pool_entries] == ["zh", "zh-offline", "vad", "en"]


def test_a_speaker_entry_is_a_companion_pool_of_one_worker_per_device() -> None:
    table = table_of(
        'default = "zh"\n'
        "[models.zh]\n"
        'model = "checksum"\n'
        'vad = "v"\n'
        'speaker = "s"\n'
        "[models.v]\n"
        'model = "fsmn-vad"\n'
        "[models.s]\n"
        'model = "cam++"\n'
        'devices = ["cuda:1"]\n'
        "workers_per_device = 4\n"
    )
    choice = table.default_choice  # type: ignore[attr-defined]
    assert choice.companion(Role.SPEAKER).name == "s"
    speaker = choice.companion(Role.SPEAKER).settings
    assert (speaker.kind, speaker.model, speaker.devices) == ("speaker", "cam++", ("cuda:1",))
    assert speaker.worker_devices == ("cuda:1",)
    assert [p.name for p in table.pool_entries] == ["zh", "v", "s"]  # type: ignore[attr-defined]


def test_the_environments_one_model_is_read_as_a_one_entry_models_file() -> None:
    env = {
        "ASR_MODEL": "checksum",
        "ASR_OFFLINE_MODEL": "/srv/models/paraformer-zh/",
        "ASR_PUNC_MODEL": "ct-punc",
        "ASR_VAD_MODEL": "fsmn-vad",
        "ASR_SPEAKER_MODEL": "cam++",
        "ASR_DEVICES": "cuda:3",  # not checked here: the workers refuse it when they start
    }
    table = environment_table(env)
    (choice,) = table.choices
    assert (table.default, table.from_file) == ("checksum", False)
    names = {role: entry.name for role, entry in choice.companions.items()}
    assert names == {Role.OFFLINE: "paraformer-zh", Role.VAD: "fsmn-vad", Role.SPEAKER: "cam++"}
    offline = choice.companions[Role.OFFLINE].settings
    assert (offline.kind, offline.punc_model, offline.batch_hold) == ("offline", "ct-punc", "wait")
    assert choice.companions[Role.SPEAKER].settings.runtime == "torch"
    # The models file's rules, said in the environment's variables.
    with pytest.raises(ModelsFileError, match=r"^ASR_PUNC_MODEL: punctuation is of the offline"):
        environment_table({"ASR_PUNC_MODEL": "ct-punc"})
    with pytest.raises(ModelsFileError, match=r"set ASR_VAD_MODEL too$"):
        environment_table({"ASR_SPEAKER_MODEL": "cam++"})
    with pytest.raises(ValueError, match=r"^ASR_MAX_BATCH must be"):
        environment_table({"ASR_MAX_BATCH": "0"})


def test_a_table_with_a_gpu_runs_every_pool_on_onnx_runtime_unless_one_is_named() -> None:
    """The seed's layout names no runtime: its GPU pools and its VAD on the CPU all take
    ONNX Runtime (the VAD's vectorised engine, not funasr's one stream per call)."""
    table = models_table(tomllib.loads(SEED_LAYOUT), {}, 2)
    runtimes = {entry.name: entry.settings.runtime for entry in table.pool_entries}
    assert runtimes == dict.fromkeys(["zh", "zh-offline", "vad", "en"], "onnx")
    named = models_table(tomllib.loads(SEED_LAYOUT), {"ASR_RUNTIME": "torch"}, 2)
    assert {entry.settings.runtime for entry in named.pool_entries} == {"torch"}
    own = SEED_LAYOUT.replace(
        '[models.vad]\nmodel = "fsmn-vad"', '[models.vad]\nmodel = "fsmn-vad"\nruntime = "torch"'
    )
    assert own != SEED_LAYOUT
    by_entry = models_table(tomllib.loads(own), {}, 2)
    vad = next(entry for entry in by_entry.pool_entries if entry.name == "vad")
    assert vad.settings.runtime == "torch"


def test_a_table_on_cpus_keeps_pytorch() -> None:
    on_cpus = SEED_LAYOUT.replace('"cuda:0"', '"cpu"').replace('"cuda:1"', '"cpu"')
    table = models_table(tomllib.loads(on_cpus), {}, 0)
    assert {entry.settings.runtime for entry in table.pool_entries} == {"torch"}
