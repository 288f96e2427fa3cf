"""Pruning in the deep rankers' search (``search.pruner``, ``deep.search.pruner``;
`finetune.search`): off it is the search it was, bit for bit; a pruned trial is finished, kept and
reported as pruned (a row of NaN in ``trials.npz``, never chosen); the fixed recipe's trials are
never pruned; a pruned search killed mid-way resumes to the same trials and choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest
from test_search import _killed_run, _metrics, _trials
from tiny import small_encoder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.finetune.search import Reporter
from scarce_ltr.search.trial_scores import read_trial_scores

pytestmark = pytest.mark.cpu

DATA = [*tiny_data(), "logger=none"]
RESNET = ["baseline", "resnet", *DATA, *(f"deep.{o}" for o in small_encoder())]
# 6 trials (the first three resnet's lr grid, never pruned) of up to 6 epochs
SEARCH = ["deep.search.n_trials=6", "deep.search.full_epochs=[2,6]", "epochs=6"]
HALVING = ["deep.search.pruner=halving", "deep.search.prune_warmup=1"]
# The search's trials before pruning existed (the code of 435699a): vali NDCG@5, epochs
BEFORE = [
    (0.45617712285494094, 6),
    (0.4976745378015603, 6),
    (0.32077929121620974, 6),
    (0.2194035913178651, 4),
    (0.3858174420156508, 2),
    (0.2874507458936219, 2),
]


def _rows(report: dict) -> str:
    """Every trial's params and scores as text (a pruned trial's NaN equals itself there)."""
    return json.dumps(_trials(report), sort_keys=True)


def _vali_epochs(report: dict) -> list[tuple[float, int]]:
    return [(t["best_vali_ndcg@5"], t["epochs_trained"]) for t in report["search"]["trials"]]


@pytest.mark.parametrize("pruner", [[], ["deep.search.pruner=none"]])
def test_pruning_off_is_the_search_as_it_was(tmp_path: Path, pruner: list[str]) -> None:
    got = run([*RESNET, *SEARCH, *pruner, f"run_dir={tmp_path}"])
    assert _vali_epochs(got) == BEFORE
    assert got["search"]["chosen_trial"] == 1
    assert got["metrics"]["vali"]["ndcg@5"] == pytest.approx(0.4976745378015603, abs=1e-12)
    assert got["metrics"]["test"]["ndcg@5"] == pytest.approx(0.563429325308796, abs=1e-12)
    assert "pruner" not in got["search"]
    assert not any("pruned" in t for t in got["search"]["trials"])


def test_a_pruned_trial_is_kept_and_reported_as_pruned(tmp_path: Path) -> None:
    got = run([*RESNET, *SEARCH, *HALVING, f"run_dir={tmp_path}"])
    trials = got["search"]["trials"]
    # the fixed recipe's three trials as in the unpruned search; the three drawn ones, below
    # them after their first epoch (the first rung), are cut there
    assert _vali_epochs(got)[:3] == BEFORE[:3]
    assert trials[3]["lr"] == pytest.approx(0.000443, rel=1e-3)  # drawn before any prune
    for trial in trials[3:]:
        assert trial["pruned"] is True and trial["epochs_trained"] == 1
        assert np.isnan(trial["best_vali_ndcg@5"])
    assert got["search"]["pruner"] == "halving" and got["search"]["n_pruned"] == 3
    assert got["search"]["chosen_trial"] == 1  # a pruned trial is never chosen
    assert _metrics(got) == _metrics(run([*RESNET, *SEARCH, f"run_dir={tmp_path / 'off'}"]))
    point = tmp_path / "grid" / "trial=5"
    assert json.loads((point / "result.json").read_text())["pruned"] is True
    assert (point / "DONE").is_file() and not (point / "model.pt").exists()
    _, per_trial = read_trial_scores(tmp_path)
    assert per_trial.shape[0] == 6
    assert np.isnan(per_trial[3:]).all() and not np.isnan(per_trial[:3]).all(axis=1).any()
    # unfinished after its trials: run again, every trial (the pruned one too) is read back
    (tmp_path / "DONE").unlink()
    again = run([*RESNET, *SEARCH, *HALVING, f"run_dir={tmp_path}"])
    assert _rows(again) == _rows(got)


def test_a_pruned_search_killed_resumes_to_the_same_trials(tmp_path: Path) -> None:
    """Killed inside a trial and between trials, run again: the trials (pruned ones too), the
    choice and the model of a search never killed."""
    args = [*RESNET, *SEARCH, *HALVING]
    reference = tmp_path / "reference"
    writes = _killed_run([*args, f"run_dir={reference}"], tmp_path, 0)
    expected = json.loads((reference / "report.json").read_text())
    assert expected["search"]["n_pruned"] >= 1
    for share in (2, 4):
        crashed = tmp_path / f"crashed-{share}"
        code = _killed_run([*args, f"run_dir={crashed}"], tmp_path, writes * (share - 1) // share)
        assert code == -9 and not (crashed / "DONE").exists()
        got = run([*args, f"run_dir={crashed}"])
        assert _rows(got) == _rows(expected)
        assert _metrics(got) == _metrics(expected)
        assert got["search"]["chosen_trial"] == expected["search"]["chosen_trial"]
        assert (crashed / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()


def test_the_fixed_recipes_trials_are_never_pruned() -> None:
    """A pruner that would stop every trial (a threshold above any NDCG) stops a trial, but
    not a protected one (trial 0 and the fixed recipe's other points)."""
    study = optuna.create_study(
        direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=2.0)
    )
    history = [{"epoch": 0, "vali_ndcg@5": 0.5}, {"epoch": 1, "vali_ndcg@5": float("nan")}]
    assert not Reporter(study.ask(), protected=True)(history)
    trial = study.ask()
    reporter = Reporter(trial, protected=False)
    assert reporter(history)
    # the best so far is reported (a NaN epoch does not lower it), each epoch once
    assert study.trials[-1].intermediate_values == {0: 0.5, 1: 0.5}
    assert not reporter(history) and reporter.reported == 2  # nothing new: nothing asked


def test_a_pruned_finetuning_search_and_its_identity(tmp_path: Path) -> None:
    """The finetuning path (a fresh encoder) prunes too; the pruner is part of the run's
    identity only when on (a search without one resumes the runs made before the key)."""
    args = ["finetune", "full", *DATA, "pretrained=none", *small_encoder(), "head_hidden=16"]
    args += ["search.n_trials=6", "search.head_epochs=[1,3]", "search.full_epochs=[1,3]"]
    off = run([*args, f"run_dir={tmp_path / 'off'}"])
    assert '"pruner"' not in off["identity"] and "pruner" not in off["search"]
    assert '"prune_startup"' not in off["identity"]
    pruned = ["search.pruner=median", "search.prune_warmup=1"]
    got = run([*args, *pruned, f"run_dir={tmp_path / 'on'}"])
    assert '"pruner": "median"' in got["identity"] and got["search"]["pruner"] == "median"
    assert '"prune_startup": 5' in got["identity"]  # the median's own key, with it only
    assert not got["search"]["trials"][0].get("pruned")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("search.pruner=nope", "search.pruner must be one of none, median, halving, hyperband"),
        ("search.prune_warmup=0", "search.prune_warmup must be >= 1"),
        ("search.prune_startup=0", "search.prune_startup must be >= 1"),
    ],
)
def test_a_bad_pruner_is_named(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        run(["finetune", "full", *DATA, "pretrained=none", "search.n_trials=2", override,
             f"run_dir={tmp_path}"])  # fmt: skip
    with pytest.raises(UserError, match=message.replace("search.", "deep.search.")):
        run([*RESNET, "deep.search.n_trials=2", f"deep.{override}", f"run_dir={tmp_path}"])
    assert not any(tmp_path.iterdir())
