"""A run resumed with other free keys (`core.run_config.FREE_KEYS`: device, AMP, the scoring batch
size, the logger) goes on where it stopped and ends as the run that was never interrupted; a
changed learning rate is still refused, with the message it always had; a finished run is
skipped whatever its free keys say.

On this CPU-only machine ``device=cpu`` is what ``auto`` picks and ``amp`` (CUDA's bf16) does
nothing, so the resumed runs must match the uninterrupted ones; ``cpu_amp`` changes the numbers
and needs a CPU with native bf16, so it is only checked to be accepted where there is one.
"""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from tiny import small_encoder, tiny_data, tiny_pretraining

from scarce_ltr.cli import run
from scarce_ltr.core.device import cpu_bf16_supported
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import FREE_KEYS
from scarce_ltr.core.run_identity import RunIdentity
from scarce_ltr.core.runs import Run
from scarce_ltr.pretrain.train import CRASH_ENV, SimulatedCrash

# Every free key but the folder, set otherwise than the first run left it.
MOVED = ["device=cpu", "amp=false", "logger=wandb"]  # conftest: WANDB_MODE=disabled
BF16 = ["cpu_amp=true"] if cpu_bf16_supported() else []


class Interrupted(Exception):
    """Stands for a kill after training, before the run's report and DONE were written."""


def _interrupted_at_finish(monkeypatch, command: list[str]) -> None:
    """Run ``command`` to the end of its training and scoring, and stop it before `Run.finish`
    (its checkpoints and grid points are written, its report and DONE are not)."""

    def stop(self, body, **kwargs):
        raise Interrupted

    with monkeypatch.context() as patch:
        patch.setattr(Run, "finish", stop)
        with pytest.raises(Interrupted):
            run(command)


@pytest.mark.cpu  # resumed on the CPU, like the first part
def test_pretraining_resumes_after_a_crash_on_another_device_and_logger(
    tmp_path, monkeypatch, capsys
) -> None:
    args = ["pretrain", "simclr-rank", *tiny_pretraining(), "epochs=3", "item_budget=150"]
    args += ["monitor.enabled=false"]
    straight = run([*args, f"run_dir={tmp_path / 'straight'}"])
    folder = tmp_path / "crashed"
    monkeypatch.setenv(CRASH_ENV, str(straight["history"][0]["steps"] + 2))  # in epoch 2
    with pytest.raises(SimulatedCrash):
        run([*args, f"run_dir={folder}"])
    monkeypatch.delenv(CRASH_ENV)
    with pytest.raises(UserError, match=r"other settings \(optimizer.lr differ\)"):
        run([*args, f"run_dir={folder}", *MOVED, "optimizer.lr=0.01"])

    resumed = run([*args, f"run_dir={folder}", *MOVED])
    assert "resuming" in capsys.readouterr().err
    assert resumed["epochs"] == 3 and resumed["loss_curve"] == straight["loss_curve"]
    first, again = (torch.load(f / "encoder.pt", weights_only=True)["state_dict"]
                    for f in (tmp_path / "straight", folder))  # fmt: skip
    assert all(torch.equal(first[k], again[k]) for k in first)
    saved = OmegaConf.load(folder / "config.yaml")  # what the rest of the run ran with
    assert (saved.device, saved.amp, saved.logger) == ("cpu", False, "wandb")
    assert run([*args, f"run_dir={folder}", *BF16, "device=auto"])["seconds"] == resumed["seconds"]
    assert "skipped" in capsys.readouterr().err


def test_finetuning_resumes_with_another_scoring_batch_size(tmp_path, monkeypatch) -> None:
    args = ["finetune", "full", *tiny_data(), "logger=none", "pretrained=none", *small_encoder()]
    args += ["epochs=2", "head_hidden=16"]
    straight = run([*args, f"run_dir={tmp_path / 'straight'}"])
    folder = tmp_path / "stopped"
    _interrupted_at_finish(monkeypatch, [*args, f"run_dir={folder}"])
    assert not (folder / "DONE").exists() and (folder / "checkpoint.pt").is_file()
    with pytest.raises(UserError, match=r"other settings \(optimizer.lr differ\)"):
        run([*args, f"run_dir={folder}", "optimizer.lr=0.01"])

    resumed = run([*args, f"run_dir={folder}", *MOVED, *BF16, "eval_item_budget=7"])
    assert resumed["epochs_trained"] == straight["epochs_trained"]
    assert resumed["best_vali_ndcg@5"] == straight["best_vali_ndcg@5"]
    for split in ("vali", "test"):  # scored 7 items at a time now: the same scores
        assert resumed["metrics"][split] == pytest.approx(
            straight["metrics"][split], abs=1e-6, nan_ok=True
        )
    assert run([*args, f"run_dir={folder}", "eval_item_budget=9"]) is None  # finished: skipped


def test_a_deep_baseline_resumes_with_other_free_keys_of_its_section(tmp_path, monkeypatch):
    args = ["baseline", "resnet", *tiny_data(), "logger=none", "deep.lrs=[1e-3]"]
    args += ["deep.max_epochs=2", "deep.head_hidden=16"]
    straight = run([*args, f"run_dir={tmp_path / 'straight'}"])
    folder = tmp_path / "stopped"
    _interrupted_at_finish(monkeypatch, [*args, f"run_dir={folder}"])
    with pytest.raises(UserError, match=r"other settings \(deep.lrs differ\)"):
        run([*args, "deep.lrs=[1e-2]", f"run_dir={folder}"])

    section = ["deep.device=cpu", "deep.amp=false", "deep.eval_item_budget=7", "logger=wandb"]
    resumed = run([*args, f"run_dir={folder}", *section, *(f"deep.{k}" for k in BF16)])
    for split in ("vali", "test"):
        assert resumed["metrics"][split] == pytest.approx(
            straight["metrics"][split], abs=1e-6, nan_ok=True
        )
    assert (folder / "DONE").is_file() and resumed["best_epoch"] == straight["best_epoch"]


def test_a_free_key_inside_a_backends_own_options_is_a_setting(tmp_path) -> None:
    """``xgboost.params.device`` passes through to XGBoost, whose trees it may change: only a
    free key at the top of a config or of a family's section is free."""
    identity = RunIdentity(dataset="synthetic", stage="baseline", model="xgboost",
                           setting="frac=1", seed=0, group="gbdt")  # fmt: skip
    (tmp_path / "checkpoint.pt").write_bytes(b"")  # a run that got going
    first = {"seed": 0, "logger": "none", "deep": {"device": "auto"}, "xgboost": {}}
    Run(identity, tmp_path).start(OmegaConf.create(first | {"xgboost": {"params": {}}}))
    moved = {"logger": "wandb", "deep": {"device": "cpu"}}
    Run(identity, tmp_path).start(OmegaConf.create(first | moved | {"xgboost": {"params": {}}}))
    changed = first | {"xgboost": {"params": {"device": "cuda"}}}
    with pytest.raises(UserError, match=r"other settings \(xgboost.params.device differ\)"):
        Run(identity, tmp_path).start(OmegaConf.create(changed))
    assert {"device", "amp", "cpu_amp", "eval_item_budget", "logger", "run_dir",
            "gather_on_device", "keep_checkpoints", "storage",
            "study_name"} == set(FREE_KEYS)  # fmt: skip
