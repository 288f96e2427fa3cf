"""Shipped pretraining presets (``<method>@<name>``, `pretrain.presets`): the paper's released
SimCLR recipe loads with its keys, runs a tiny pretraining into its own folder, plans in any
sweep without a declared variant, yields to a sweep's own variant and the command line's keys,
and an unknown preset is one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import tiny_pretraining

from scarce_ltr.api.estimators import PretrainedRanker
from scarce_ltr.cli import STAGES, run
from scarce_ltr.cli_compose import compose_named
from scarce_ltr.core.errors import UserError
from scarce_ltr.pretrain.presets import available_presets, preset_overrides

RELEASED = {
    "augment.replace_p=0.8",
    "augment.replace_source=qg",
    "augment.zero_p=0.0",
    "augment.noise_scale=0.0",
    "temperature=0.07",
    "heads.projector_dim=16",
    "epochs=20",
    "item_budget=256",
}


def test_the_released_recipe_is_shipped_with_its_keys() -> None:
    assert "simclr@released" in available_presets()
    overrides = preset_overrides("simclr@released")
    assert set(overrides) == RELEASED | {"variant=released"}
    assert overrides[-1] == "variant=released"


def test_the_preset_composes_under_the_command_lines_keys() -> None:
    cfg = compose_named(STAGES["pretrain"], "simclr@released", ["temperature=0.2"]).cfg
    assert (cfg.method, cfg.variant, cfg.model_name) == ("simclr", "released", "simclr@released")
    assert cfg.augment.replace_p == 0.8 and cfg.augment.replace_source == "qg"
    assert cfg.heads.projector_dim == 16 and cfg.item_budget == 256 and cfg.epochs == 20
    assert cfg.temperature == 0.2  # the command line wins over the preset


def test_the_preset_runs_a_tiny_pretraining(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run(["pretrain", "simclr@released", *tiny_pretraining(), "epochs=1", f"run_dir={run_dir}"])
    report = json.loads((run_dir / "report.json").read_text())
    assert report["method"] == "simclr" and report["epochs"] == 1
    assert (run_dir / "encoder.pt").is_file() and (run_dir / "DONE").is_file()
    saved = (run_dir / "config.yaml").read_text()
    assert "variant: released" in saved and "replace_source: qg" in saved


def test_an_unknown_preset_is_one_clear_error() -> None:
    with pytest.raises(UserError, match="no pretraining preset 'simclr@nope'; shipped: .*simclr@"):
        run(["pretrain", "simclr@nope", "--print-config"])
    with pytest.raises(UserError, match="no pretraining preset 'simsiam@released'"):
        compose_named(STAGES["pretrain"], "simsiam@released")


def _planned(tmp_path: Path, capsys, *extra: str) -> list[str]:
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    run([*args, "--dry-run", f"run_dir={tmp_path / 's'}", *extra])
    return [x for x in capsys.readouterr().out.splitlines() if x.startswith("[to run] pretrain")]


def test_a_sweep_plans_the_shipped_preset_unless_it_declares_its_own(tmp_path, capsys) -> None:
    (line,) = _planned(tmp_path, capsys, "models=[simclr@released+full]")
    assert set(line.split()) >= RELEASED | {"variant=released"}
    assert "/pretrain/simclr@released/" in line
    (own,) = _planned(
        tmp_path, capsys, "models=[simclr@released+full]", "variants.released=[temperature=0.5]"
    )
    assert "temperature=0.5" in own.split() and "augment.replace_p=0.8" not in own
    with pytest.raises(UserError, match="no variant 'nope' .* no shipped preset"):
        _planned(tmp_path, capsys, "models=[simclr@nope+full]")


def test_the_estimator_takes_a_preset_as_its_method() -> None:
    PretrainedRanker(method="simclr@released")._validate_params()
    with pytest.raises(ValueError, match="method"):
        PretrainedRanker(method="simclr@nope")._validate_params()
