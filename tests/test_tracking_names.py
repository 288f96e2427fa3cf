"""W&B runs a user can find: unique names across a sweep, no label setting on pretraining runs,
the selection metric declared, artifacts only online, a quiet banner (all offline: wandb.init
is replaced by a recorder)."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from scarce_ltr.cli import STAGES
from scarce_ltr.core import tracking
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.run_identity import RunIdentity
from scarce_ltr.sweeps.cells import plan_cells
from scarce_ltr.sweeps.sweep import SweepConfig


def _sweep(models: list[str]) -> SweepConfig:
    cfg, _ = load_config(
        SweepConfig,
        ["name=quick", f"models={json.dumps(models)}", "seeds=[0,1]", "fractions=[0.02,0.5]"],
        stage_file=CONFIG_ROOT / "sweep" / "quick.yaml",
    )
    return cfg


def test_tracker_names_are_unique_across_a_sweep(tmp_path: Path) -> None:
    models = [
        "simclr-rank+full",
        "simsiam+full",
        "resnet",
        "gbdt",
        "ensemble:simclr-rank+full,gbdt",
    ]
    jobs, _ = plan_cells(_sweep(models), tmp_path)
    names = []
    for job in jobs:
        stage = STAGES[job.stage]
        stage_file = None
        overrides = list(job.overrides)
        if stage.config_folder:
            stage_file = CONFIG_ROOT / stage.config_folder / f"{job.name}.yaml"
            overrides = [f"{stage.name_key}={job.name}", *overrides]
        if job.stage == "finetune":  # the encoder's method is read from its (absent) run
            overrides = [o for o in overrides if not o.startswith("pretrained=")]
            overrides.append("pretrained=none")
        cfg, _ = load_config(stage.config(), overrides, stage_file=stage_file)
        identity = cfg.identity()
        if job.stage == "finetune":  # what the real encoder run would name it
            method = job.key.split("/")[1].split("+")[0]
            identity = RunIdentity(**{**identity.__dict__, "model": f"{method}+full"})
        names.append(identity.tracker_name)
    assert len(names) == len(jobs) == len(set(names))
    assert "synthetic/finetune/simsiam+full/frac=0.02/seed=0" in names
    assert "synthetic/finetune/simclr-rank+full/frac=0.02/seed=0" in names


def test_pretraining_tracker_names_carry_no_label_setting() -> None:
    identity = RunIdentity("synthetic", "pretrain", "simclr-rank", "frac=0.02", 0, "no-pretrain-dl")
    assert identity.tracker_name == "synthetic/pretrain/simclr-rank/seed=0"
    assert identity.tags == ["synthetic", "pretrain", "simclr-rank"]
    finetune = RunIdentity(
        "synthetic", "finetune", "simclr-rank+full", "frac=0.02", 0, "pretrained-dl"
    )
    assert finetune.tags == ["synthetic", "finetune", "simclr-rank+full", "frac=0.02"]


class _Recorder:
    """Stands in for the wandb module: records init's arguments and the run's calls."""

    def __init__(self) -> None:
        self.init_kwargs: dict = {}
        self.metrics: dict[str, str] = {}
        self.artifacts: list = []

    def module(self) -> types.ModuleType:
        recorder = self
        run = types.SimpleNamespace(
            define_metric=lambda name, summary=None: recorder.metrics.__setitem__(name, summary),
            log_artifact=recorder.artifacts.append,
            finish=lambda: None,
        )

        def init(**kwargs):
            recorder.init_kwargs = kwargs
            return run

        class Artifact:
            def __init__(self, name: str, type: str) -> None:  # noqa: A002 (wandb's keyword)
                self.name, self.type, self.dirs = name, type, []

            def add_dir(self, path: str) -> None:
                self.dirs.append(path)

        return types.SimpleNamespace(init=init, Artifact=Artifact)


@pytest.mark.parametrize("mode", ["offline", "online"])
def test_tracker_declares_metrics_is_quiet_and_uploads_bundles_online(
    tmp_path: Path, monkeypatch, mode: str
) -> None:
    recorder = _Recorder()
    monkeypatch.setitem(sys.modules, "wandb", recorder.module())
    monkeypatch.setenv("WANDB_MODE", mode)
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    monkeypatch.delenv("WANDB_TAGS", raising=False)
    tracker = tracking.start_tracker(
        "wandb",
        run_dir=tmp_path,
        name="synthetic/baseline/gbdt/frac=0.02/seed=0",
        config={},
        group="synthetic/baseline/gbdt/frac=0.02",
        tags=["synthetic", "baseline", "gbdt", "frac=0.02"],
    )
    assert recorder.init_kwargs["tags"] == ["synthetic", "baseline", "gbdt", "frac=0.02"]
    assert recorder.init_kwargs["group"] == "synthetic/baseline/gbdt/frac=0.02"
    assert recorder.metrics["vali_ndcg@5"] == "max" and recorder.metrics["loss"] == "min"
    assert os.environ["WANDB_SILENT"] == "true"
    (tmp_path / "bundle").mkdir()
    tracker.log_folder(tmp_path / "bundle", name="synthetic/baseline/gbdt/frac=0.02/seed=0")
    if mode == "online":
        (artifact,) = recorder.artifacts
        assert artifact.name == "synthetic-baseline-gbdt-frac-0.02-seed-0"
        assert artifact.type == "model" and artifact.dirs == [str(tmp_path / "bundle")]
    else:
        assert recorder.artifacts == []
