"""Per-command help from the config dataclasses, type errors, ``--config`` files and
``--print-config``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scarce_ltr.cli import STAGES, command_help, run
from scarce_ltr.core.config import available
from scarce_ltr.core.config_doc import describe, help_text, type_name
from scarce_ltr.core.errors import UserError


@pytest.mark.parametrize("command", list(STAGES))
def test_help_lists_every_key_of_the_command(command: str, capsys) -> None:
    stage = STAGES[command]
    args = [command, "--help"]
    if stage.config_folder:
        args = [command, available(stage.config_folder)[0], "--help"]
    assert run(args) is None
    out = capsys.readouterr().out
    keys = [d.key for d in describe(stage.config()) if d.type != "section"]
    assert keys
    for key in keys:
        assert f"  {key}: " in out, key


def test_help_without_a_name_shows_the_names_and_class_defaults(capsys) -> None:
    run(["pretrain", "--help"])
    out = capsys.readouterr().out
    assert "|simclr-rank|" in out.splitlines()[0] and "|simsiam|" in out.splitlines()[0]
    assert "  epochs: int or null = null" in out and "caps a training stage's epochs" in out


def test_named_help_shows_the_named_configs_values() -> None:
    # configs/finetune/lp.yaml sets a linear head; the dataclass default is mlp
    assert "  head: str = linear" in command_help("finetune", "lp", _stage_file("finetune", "lp"))
    assert "  head: str = mlp" in command_help("finetune")


def test_help_with_an_unknown_name_lists_the_names() -> None:
    with pytest.raises(UserError, match=r"unknown pretrain 'nope'; valid: .*simclr-rank"):
        run(["pretrain", "nope", "--help"])


def test_a_section_default_from_its_parents_factory() -> None:
    from scarce_ltr.finetune.config import FinetuneConfig

    lr = {d.key: d.default for d in describe(FinetuneConfig)}["optimizer.lr"]
    assert lr == 5e-5  # FinetuneConfig's factory, not OptimizerConfig's 5e-4
    assert type_name(int | None) == "int or null" and type_name(list[float]) == "list[float]"


def test_help_line_is_the_fields_comment() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Example:
        # Spread over
        # two lines.
        a: int = 1
        b: str | None = None  # trailing help

    text = help_text(Example)
    assert "a: int = 1" in text and "Spread over two lines" in text
    assert "b: str or null = null" in text and "trailing help" in text


def test_shared_training_keys_have_one_declaration_and_help_line() -> None:
    """`TrainingKeys` / `DeviceKeys` give finetuning, the deep baselines and pretraining the same
    keys and help lines; the deep baselines' ``patience`` alone differs (its default, 30)."""
    from scarce_ltr.baselines.deep.config import DeepBaselineOptions
    from scarce_ltr.data.stage_config import DeviceKeys, TrainingKeys
    from scarce_ltr.finetune.config import TRAINING_KEYS, FinetuneConfig
    from scarce_ltr.pretrain.config import PretrainConfig

    shared = {d.key: d for d in describe(TrainingKeys)}
    assert set(TRAINING_KEYS) == set(shared) - {d.key for d in describe(DeviceKeys)}
    for schema, prefix, owns in (
        (FinetuneConfig, "", set()),
        (DeepBaselineOptions, "deep.", {"patience"}),
        (PretrainConfig, "", {"item_budget", "max_list_len"}),
    ):
        docs = {d.key: d for d in describe(schema)}
        keys = shared if schema is not PretrainConfig else {d.key: d for d in describe(DeviceKeys)}
        for key, doc in keys.items():
            assert docs[key].doc, f"{prefix}{key} has no help line"
            if key not in owns:
                assert docs[key] == doc, f"{prefix}{key}"
    assert DeepBaselineOptions().patience == 30
    assert FinetuneConfig(pretrained="none").patience is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("epochs=abc", r"^command line: config key 'epochs' expects int or null, got 'abc'$"),
        ("amp=maybe", r"^command line: config key 'amp' expects bool, got 'maybe'$"),
        ("scarcity.fraction=x", r"config key 'scarcity.fraction' expects float, got 'x'$"),
        ("encoder=3", r"config key 'encoder' expects keys \(encoder.<key>=.*got 3$"),
    ],
)
def test_type_errors_name_key_type_and_value(override: str, message: str) -> None:
    with pytest.raises(UserError, match=message) as info:
        run(["pretrain", "simclr-rank", override, "--print-config"])
    assert "full_key" not in str(info.value) and "object_type" not in str(info.value)


def test_config_file_layers_and_print_config(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "my.yaml"
    mine.write_text("data: letor\nseed: 4\nencoder:\n  width: 16\n")
    assert run(["pretrain", "simsiam", "--config", str(mine), "epochs=2", "--print-config"]) is None
    out = capsys.readouterr().out
    printed = yaml.safe_load(out)
    assert printed["seed"] == 4 and printed["encoder"]["width"] == 16 and printed["epochs"] == 2
    assert printed["data"]["name"] == "letor"  # the file's data: <name> picks the data set
    assert "# run folder: " in out
    assert not list(tmp_path.glob("runs*"))  # nothing ran


def test_command_line_beats_the_config_file(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "my.yaml"
    mine.write_text("seed: 4\n")
    run(["data-info", f"--config={mine}", "seed=7", "--print-config"])
    assert yaml.safe_load(capsys.readouterr().out)["seed"] == 7


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("seed: [1\n", r"bad\.yaml:\d+: not valid YAML"),
        ("- 1\n- 2\n", r"bad\.yaml: a --config file holds keys"),
        ("encoder:\n  widht: 3\n", r"bad\.yaml: unknown config key 'encoder.widht'.*encoder.width"),
        ("seed: abc\n", r"bad\.yaml: config key 'seed' expects int, got 'abc'"),
    ],
)
def test_bad_config_files_name_file_and_key(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    with pytest.raises(UserError, match=message):
        run(["pretrain", "simclr-rank", "--config", str(bad), "--print-config"])


def test_config_file_missing_or_without_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        run(["data-info", "--config", str(tmp_path / "none.yaml")])
    with pytest.raises(UserError, match="--config needs a YAML file"):
        run(["data-info", "--config"])


def test_sweep_from_a_file_path(tmp_path: Path, capsys) -> None:
    sweep = tmp_path / "mine.yaml"
    sweep.write_text("models: [gbdt]\nfractions: [0.5]\nseeds: [3]\nlogger: none\n")
    cells = run(["sweep", str(sweep), f"run_dir={tmp_path / 's'}", "--dry-run"])
    assert [c["seed"] for c in cells] == [3] and cells[0]["model"] == "gbdt"
    capsys.readouterr()
    run(["sweep", str(sweep), "--print-config"])
    assert yaml.safe_load(capsys.readouterr().out)["name"] == "mine"
    with pytest.raises(UserError, match="does not exist"):
        run(["sweep", str(tmp_path / "other.yaml")])


@pytest.mark.parametrize(
    ("override", "sweep_key"),
    [
        ("overrides.common=[logger=none]", "logger"),
        ("overrides.finetune=[seed=3]", "seeds"),
        ("overrides.per_model.gbdt=[scarcity.fraction=0.1]", "fractions"),
    ],
)
def test_a_sweep_key_given_in_overrides_is_refused(override: str, sweep_key: str) -> None:
    with pytest.raises(UserError, match=rf"sets '.*', which the sweep sets .* key {sweep_key}"):
        run(["sweep", "quick", override, "--dry-run"])


def _stage_file(folder: str, name: str) -> Path:
    from scarce_ltr.core.config import CONFIG_ROOT

    return CONFIG_ROOT / folder / f"{name}.yaml"
