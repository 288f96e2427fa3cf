"""Configs, overrides, data sets by name, and the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.data.stage_config import CommonConfig

ROOT = Path(__file__).resolve().parents[1]
OHSUMED = ROOT.parent / "shared" / "data" / "ohsumed-letor3"
TINY = tiny_data(n_features=8)


def test_defaults_and_overrides() -> None:
    cfg, resolved = load_config(
        CommonConfig, ["scarcity.fraction=0.01", "seed=3", "epochs=2", "scarcity.binary_tau=4.5"]
    )
    assert cfg.data.name == "synthetic"
    assert cfg.scarcity.fraction == 0.01 and cfg.scarcity.binary_tau == 4.5
    assert (cfg.seed, cfg.epochs) == (3, 2)
    assert resolved.scarcity.fraction == 0.01


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    cfg, resolved = load_config(CommonConfig, ["data=letor", "data.path=/x", "scarcity.val=same"])
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    saved = OmegaConf.load(tmp_path / "config.yaml")
    again = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(CommonConfig), saved))
    assert again == cfg


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("scarcity.fractoin=0.1", r"unknown config key 'scarcity.fractoin'.*scarcity.fraction"),
        ("bogus=1", r"unknown config key 'bogus'.*seed"),
        ("seed=abc", r"config key 'seed'.*abc"),
        ("scarcity.fraction=2", r"scarcity.fraction must be in \(0, 1\]"),
        ("scarcity.val=half", r"scarcity.val must be one of full, same"),
        ("data.transform=cube", r"data.transform must be one of"),
        ("data=nope", r"unknown data set 'nope'; known: .*synthetic"),
        ("seed", r"'seed' is not a key=value override"),
        ("seed=[1", r"bad override 'seed=\[1'"),
    ],
)
def test_bad_overrides_name_the_key(override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_config(CommonConfig, [override])


def test_preset_without_files_says_where_to_put_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LTR_DATA_DIR", str(tmp_path))
    cfg, _ = load_config(CommonConfig, ["data=mslr-web30k"])
    with pytest.raises(UserError) as info:
        load_dataset(cfg.data)
    text = str(info.value)
    assert str(tmp_path / "mslr-web30k" / "Fold1" / "train") in text
    assert "microsoft.com" in text


def test_letor_without_path() -> None:
    cfg, _ = load_config(CommonConfig, ["data=letor"])
    with pytest.raises(UserError, match="data.path"):
        load_dataset(cfg.data)


def test_synthetic_pipeline_end_to_end() -> None:
    cfg, _ = load_config(CommonConfig, [*TINY, "scarcity.fraction=0.1"])
    prepared = prepare_data(cfg)
    assert prepared.labels.train_labeled.sum() == 3
    assert prepared.test_outliers.shape == (prepared.test.n_groups,)
    # Fit on train only: train features are centred, test ones need not be.
    np.testing.assert_allclose(prepared.train.features.mean(axis=0), 0, atol=1e-4)


@pytest.mark.skipif(not OHSUMED.is_dir(), reason="../shared/data/ohsumed-letor3 is not there")
def test_ohsumed_preset_through_the_pipeline(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LTR_CACHE_DIR", str(tmp_path))
    cfg, _ = load_config(CommonConfig, ["data=ohsumed", f"data.path={OHSUMED}"])
    prepared = prepare_data(cfg)
    assert (prepared.train.n_groups, prepared.vali.n_groups, prepared.test.n_groups) == (63, 21, 22)
    assert prepared.outlier_info["method"] == "knn" and prepared.test_outliers.sum() == 1


def test_data_info_prints_the_tables(capsys) -> None:
    info = run(["data-info", *TINY, "scarcity.fraction=0.2"])
    out = capsys.readouterr().out
    assert "train (as labeled)" in out and "outlier test QGs" in out
    assert "6/30 train QGs labeled" in out
    assert info["scarcity"]["train_labeled_groups"] == 6


def test_unknown_command() -> None:
    with pytest.raises(UserError, match="unknown command 'pretrian'"):
        run(["pretrian"])


def run_sh(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LTR_CACHE_DIR": str(cwd / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "scarce_ltr", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_user_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "data"
    bad.mkdir()
    (bad / "train.txt").write_text("1 qid:1 1:1\n1 qid:1 1:x\n")
    (bad / "vali.txt").write_text("1 qid:1 1:1\n")
    (bad / "test.txt").write_text("1 qid:1 1:1\n")
    result = run_sh("data-info", "data=letor", f"data.path={bad}", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"{bad / 'train.txt'}:2: bad value of feature 1 'x'" in result.stderr
    result = run_sh("data-info", "scarcity.fraction=abc", cwd=tmp_path)
    assert result.returncode == 2 and "scarcity.fraction" in result.stderr


def test_help_lists_commands(tmp_path: Path) -> None:
    result = run_sh("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "data-info" in result.stdout and "test" in result.stdout


def test_a_run_folder_keeps_its_settings(tmp_path: Path) -> None:
    from scarce_ltr.core.run_identity import RunIdentity
    from scarce_ltr.core.runs import Run

    identity = RunIdentity(
        dataset="synthetic",
        stage="pretrain",
        model="m",
        setting="s",
        seed=0,
        group="no-pretrain-dl",
    )

    def _save_config(folder: Path, resolved) -> None:
        Run(identity, folder).start(resolved)

    _, first = load_config(CommonConfig, ["seed=1", "logger=none"])
    _save_config(tmp_path, first)
    _, same_but_logger = load_config(CommonConfig, ["seed=1", "logger=wandb"])
    _save_config(tmp_path, same_but_logger)
    _, other = load_config(CommonConfig, ["seed=2", "scarcity.fraction=0.5"])
    (tmp_path / "checkpoint.pt").write_bytes(b"")  # the run got going
    with pytest.raises(UserError, match=r"other settings \(scarcity.fraction, seed differ\)"):
        _save_config(tmp_path, other)
    assert "seed: 1" in (tmp_path / "config.yaml").read_text()


def test_a_top_level_key_that_lives_in_a_section_is_pointed_to() -> None:
    from scarce_ltr.baselines.config import BaselineConfig

    with pytest.raises(UserError, match=r"unknown config key 'loss' \(did you mean .*'deep.loss'"):
        load_config(BaselineConfig, ["method=resnet", "loss.name=listmle"])
