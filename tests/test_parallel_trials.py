"""A search's trials trained N at once (``gbdt.n_jobs``, ``catboost.n_jobs``, ``xgboost.n_jobs``,
``search.n_jobs``, ``deep.search.n_jobs``; `search.trial_batches`): 1 is the search as it was, bit
for bit; N > 1 asks and tells in trial order, so two runs (and a run killed mid-batch, then
resumed) ask the same trials and choose the same one, and the stored study holds every trial."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import torch
from test_search import DEEP_SEARCH, RESNET, _killed_run, _metrics, _trials
from test_study_storage import identity_name
from test_trees import DATA, FAST

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import FAULT_KILL_ENV
from scarce_ltr.search.trial_batches import batches, in_threads, thread_share

pytestmark = pytest.mark.cpu

# Each tree search's trials (trial, vali NDCG@5, rounds, pruned) with FAST, measured with the
# code before n_jobs existed (8866480).
BEFORE = {
    "gbdt-optuna": [
        [0, 0.6690397027764106, 7, False],
        [1, 0.5853044489862245, 14, False],
        [2, 0.6141637535213736, 9, False],
        [3, 0.6596937828951775, 15, False],
    ],
    "catboost": [
        [0, 0.5824000691728561, 9, False],
        [1, 0.6172845603264866, 10, False],
        [2, 0.6022072730240253, 10, False],
    ],
    "xgboost": [
        [0, 0.6628840351757778, 5, False],
        [1, 0.575785822521657, 11, False],
        [2, 0.6022247216652699, 5, False],
    ],
}
TREES = ("gbdt-optuna", "catboost", "xgboost")


def _section(method: str) -> str:
    return "gbdt" if method == "gbdt-optuna" else method


def _rows(report: dict) -> list[list]:
    rows = report["trials"] if "trials" in report else report["grid"]
    return [[t.get("trial"), t["vali_ndcg@5"], t["rounds"], t.get("pruned", False)] for t in rows]


def _same_model(a: Path, b: Path) -> bool:
    """The two runs' ``model.pt`` hold the same weights, spec, data and source (the files'
    bytes differ where torch numbers each save and pickle shares equal strings)."""
    first, second = (torch.load(f / "model.pt", weights_only=False) for f in (a, b))
    weights = first.pop("state_dict"), second.pop("state_dict")
    same = weights[0].keys() == weights[1].keys()
    return (
        same
        and first == second
        and all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    )


def _without_seconds(report: dict) -> list[dict]:
    rows = report["trials"] if "trials" in report else report["grid"]
    return [{k: v for k, v in t.items() if k != "seconds"} for t in rows]


@pytest.mark.parametrize("method", TREES)
def test_a_tree_search_one_trial_at_a_time_is_the_search_as_it_was(tmp_path, method) -> None:
    args = ["baseline", method, *DATA, *FAST[method]]
    plain = run([*args, f"run_dir={tmp_path / 'default'}"])
    assert _rows(plain) == BEFORE[method]
    one = run([*args, f"{_section(method)}.n_jobs=1", f"run_dir={tmp_path / 'one'}"])
    assert _without_seconds(one) == _without_seconds(plain)
    assert _metrics(one) == _metrics(plain)


@pytest.mark.parametrize("method", TREES)
def test_tree_trials_at_once_train_as_one_by_one_while_the_sampler_draws_at_random(
    tmp_path, method
) -> None:
    """TPE draws its first 10 trials at random, whatever it saw: a batch of them trains
    exactly the sequential search's trials, each in a thread with its share of the threads
    (num_threads=2 among 2 trials: 1 each, FAST's count)."""
    section = _section(method)
    keys = [*FAST[method], f"{section}.n_jobs=2", f"{section}.num_threads=2"]
    got = run(["baseline", method, *DATA, *keys, f"run_dir={tmp_path}"])
    assert _rows(got) == BEFORE[method]


def test_the_paper_grid_trains_its_points_at_once_as_one_by_one(tmp_path: Path) -> None:
    """``gbdt`` (the paper grid, 7 points) with gbdt.n_jobs=2: the rows and choice of the grid
    walked one point at a time, each fit on one thread either way."""
    fast = ["gbdt.max_rounds=20", "gbdt.early_stopping_rounds=5"]
    args = ["baseline", "gbdt", *DATA, *fast]
    one = run([*args, "gbdt.num_threads=1", f"run_dir={tmp_path / 'one'}"])
    two = run([*args, "gbdt.num_threads=2", "gbdt.n_jobs=2", f"run_dir={tmp_path / 'two'}"])
    assert len(one["grid"]) == 7
    assert _without_seconds(two) == _without_seconds(one)
    assert _metrics(two) == _metrics(one)


def test_a_parallel_tree_search_is_reproducible_and_stored(tmp_path: Path) -> None:
    """12 trials, 3 at once: TPE draws trials 10 and 11 from the 9 trials of the batches before
    theirs (the sequential search, from 10 and 11), so N changes the search; for a given N two
    runs ask and choose the same, and the SQLite study holds each trial once, told in order."""
    keys = [*FAST["gbdt-optuna"][:-1], "gbdt.n_trials=12", "gbdt.num_threads=3"]
    args = ["baseline", "gbdt-optuna", *DATA, *keys]
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    first = run([*args, "gbdt.n_jobs=3", f"gbdt.storage={url}", f"run_dir={tmp_path / 'a'}"])
    second = run([*args, "gbdt.n_jobs=3", f"run_dir={tmp_path / 'b'}"])
    assert _without_seconds(first) == _without_seconds(second)
    assert _metrics(first) == _metrics(second)
    sequential = run([*args, f"run_dir={tmp_path / 'c'}"])
    assert _without_seconds(sequential)[:10] == _without_seconds(first)[:10]
    assert _without_seconds(sequential)[10:] != _without_seconds(first)[10:]
    study = optuna.load_study(storage=url, study_name=identity_name(first))
    assert [t.number for t in study.trials] == list(range(12))
    for trial, row in zip(study.trials, first["grid"], strict=True):
        if row.get("pruned"):
            assert trial.state == optuna.trial.TrialState.PRUNED
        else:
            assert trial.value == row["vali_ndcg@5"]
    assert study.best_trial.number == first["selected"]["trial"]


def test_deep_trials_at_once_train_as_one_by_one_and_are_stored(tmp_path: Path) -> None:
    """resnet's 3 trials (its lr grid, enqueued first), 2 at once in child processes: each
    trains exactly as in the parent (seed, model, random state, checkpoint), the choice and the
    chosen model are the sequential search's, and the stored study holds the 3 trials."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    sequential = run([*RESNET, *DEEP_SEARCH, f"run_dir={tmp_path / 'one'}"])
    args = [*RESNET, *DEEP_SEARCH, "deep.search.n_jobs=2", f"deep.search.storage={url}"]
    got = run([*args, "deep.search.study_name=two", f"run_dir={tmp_path / 'two'}"])
    assert _trials(got) == _trials(sequential)
    assert _metrics(got) == _metrics(sequential)
    assert _same_model(tmp_path / "two", tmp_path / "one")
    study = optuna.load_study(storage=url, study_name="two")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    assert [t.value for t in study.trials] == [r["best_vali_ndcg@5"] for r in _trials(got)]


def test_a_parallel_deep_search_killed_mid_batch_resumes_to_the_same_trials(
    tmp_path: Path, monkeypatch
) -> None:
    """Killed (the search and its children: one process group) halfway through its writes, run
    again: every trial of the batch resumes from its own folder, and the run ends with the
    trials, scores and model of a search never killed."""
    monkeypatch.setenv(FAULT_KILL_ENV, "group")
    args = [*RESNET, *DEEP_SEARCH, "deep.search.n_jobs=2"]
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    writes = _killed_run([*args, f"run_dir={reference}"], tmp_path, 0)
    expected = json.loads((reference / "report.json").read_text())
    assert _killed_run([*args, f"run_dir={crashed}"], tmp_path, writes // 2) == -9
    done = list((crashed / "grid").glob("*/DONE"))
    assert len(done) < 3 and not (crashed / "DONE").exists()
    monkeypatch.delenv(FAULT_KILL_ENV)
    got = run([*args, f"run_dir={crashed}"])
    assert _trials(got) == _trials(expected)
    assert _metrics(got) == _metrics(expected)
    assert _same_model(crashed, reference)


def test_a_pruned_parallel_deep_search_is_reproducible(tmp_path: Path) -> None:
    """The median rule in the children (trial 3 trains beside trial 2 and is compared with
    trials 0 and 1): two runs prune and choose alike, and a stored study holds every trial."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    args = [*RESNET, "deep.search.n_trials=4", "deep.search.full_epochs=[2,4]", "epochs=4",
            "deep.search.n_jobs=2", "deep.search.pruner=median", "deep.search.prune_warmup=1",
            "deep.search.prune_startup=1"]  # fmt: skip
    first = run([*args, f"deep.search.storage={url}", f"run_dir={tmp_path / 'a'}"])
    second = run([*args, f"run_dir={tmp_path / 'b'}"])
    assert json.dumps(_trials(first)) == json.dumps(_trials(second))
    assert _metrics(first) == _metrics(second)
    assert first["search"]["pruner"] == "median"
    study = optuna.load_study(storage=url, study_name=identity_name(first))
    pruned = [bool(t.get("pruned")) for t in first["search"]["trials"]]
    states = [t.state == optuna.trial.TrialState.PRUNED for t in study.trials]
    assert states == pruned and len(states) == 4


def test_a_child_prunes_as_the_parent_study_would() -> None:
    """The median rule in a child (`ReplicaPruner`: a study holding the trials finished before
    the batch) stops a trial at the epoch the parent's study stops it."""
    from scarce_ltr.finetune.search import ReplicaPruner, Reporter
    from scarce_ltr.finetune.search_config import SearchConfig

    config = SearchConfig(n_trials=4, pruner="median", prune_warmup=1, prune_startup=1)
    space = SimpleNamespace(config=config)
    study = optuna.create_study(
        direction="maximize", pruner=optuna.pruners.MedianPruner(1, n_warmup_steps=1)
    )
    for values in ([0.5, 0.6, 0.7], [0.4, 0.5, 0.9]):
        trial = study.ask()
        for step, value in enumerate(values):
            trial.report(value, step)
        study.tell(trial, values[-1])
    finished = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    history = [{"epoch": e, "vali_ndcg@5": v} for e, v in enumerate([0.45, 0.46, 0.47])]
    parent = Reporter(study.ask(), protected=False)
    child = ReplicaPruner(space, finished, protected=False)  # type: ignore[arg-type]
    decisions = [(parent(history[: k + 1]), child(history[: k + 1])) for k in range(3)]
    assert decisions == [(False, False), (True, True), (True, True)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["baseline", "gbdt-optuna", "gbdt.n_jobs=0"], r"gbdt.n_jobs must be >= 1 and <= 1024"),
        (["baseline", "xgboost", "xgboost.n_jobs=-1"], r"xgboost.n_jobs must be >= 1"),
        (["baseline", "catboost", "catboost.n_jobs=2.5"], r"catboost.n_jobs"),
        (
            [*RESNET[:2], "deep.search.n_trials=4", "deep.search.n_jobs=2",
             "deep.search.pruner=hyperband"],
            r"deep.search.n_jobs=2 with deep.search.pruner=hyperband: successive halving",
        ),
        (
            [*RESNET[:2], "deep.search.n_trials=4", "deep.search.n_jobs=2",
             "deep.search.pruner=halving"],
            r"use deep.search.pruner=median or none with n_jobs > 1",
        ),
    ],
)  # fmt: skip
def test_a_bad_n_jobs_is_one_line_naming_the_key(tmp_path: Path, args, message) -> None:
    with pytest.raises(UserError, match=message) as error:
        run([*args, *DATA, f"run_dir={tmp_path / 'r'}"])
    assert "\n" not in str(error.value)


def test_an_estimator_passes_n_jobs_through(tmp_path: Path) -> None:
    """``xgboost__n_jobs=2`` is a keyword like ``xgboost__storage``; ``n_jobs`` (LGBMRanker's
    threads) stays the threads the trials share."""
    from test_estimators import arrays

    from scarce_ltr.api import TreeRanker
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.stage_config import CommonConfig

    splits = load_dataset(load_config(CommonConfig, DATA)[0].data)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    keys = {k.replace(".", "__"): v for k, v in (o.split("=") for o in FAST["xgboost"])}
    keys.pop("xgboost__num_threads")
    ranker = TreeRanker(
        "xgboost", **keys, n_jobs=2, xgboost__n_jobs=2, xgboost__storage=url,
        xgboost__study_name="est",
    )  # fmt: skip
    ranker.fit(*arrays(splits["train"]), eval_set=arrays(splits["vali"]))
    study = optuna.load_study(storage=url, study_name="est")
    assert len(study.trials) == 3


def test_batches_and_thread_shares() -> None:
    assert [list(b) for b in batches(5, 2)] == [[0, 1], [2, 3], [4]]
    assert [list(b) for b in batches(2, 1)] == [[0], [1]]
    assert [thread_share(t, n) for t, n in [(2, 1), (2, 2), (8, 3), (1, 4)]] == [2, 1, 2, 1]


def test_a_failing_trial_is_raised_once_every_trial_of_its_batch_ended() -> None:
    ended = []

    def slow() -> int:
        time.sleep(0.2)
        ended.append(threading.current_thread().name)
        return 1

    def bad() -> int:
        raise ValueError("trial 1 failed")

    with pytest.raises(ValueError, match="trial 1 failed"):
        in_threads([slow, bad])
    assert len(ended) == 1
    assert in_threads([lambda: 3]) == [3] and in_threads([lambda: 1, lambda: 2]) == [1, 2]


def test_tasks_kept_apart_never_run_at_once() -> None:
    """LightGBM's label gain is process-wide: fits of different gains run one group after the
    other (`LightGBMBackend.apart`), the results still in order."""
    running: list[str] = []
    seen: list[set[str]] = []
    lock = threading.Lock()

    def task(key: str, value: int):
        def work() -> int:
            with lock:
                running.append(key)
                seen.append(set(running))
            time.sleep(0.05)
            with lock:
                running.remove(key)
            return value

        return work

    keys = ["exp", "linear", "exp", "linear"]
    tasks = [task(key, i) for i, key in enumerate(keys)]
    assert in_threads(tasks, keys) == [0, 1, 2, 3]
    assert all(len(keys_at_once) == 1 for keys_at_once in seen)
    assert {"exp"} in seen and {"linear"} in seen
