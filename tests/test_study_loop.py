"""The one study loop of every Optuna search (`search.study_loop`): each batch asked and drawn in
trial order, trained at once, then each trial settled, told (pruned, completed, failed when its
score is not finite) and seen, in trial order; no study, nothing asked or told; the first points
are the first trials. Both searches run through it: the trees' (`optuna_search`) and the deep
rankers' (`finetune.search.run_search`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest
from test_search import DEEP_SEARCH, RESNET

import scarce_ltr.finetune.search as deep_search
import scarce_ltr.search.strategies.study as tree_search
from scarce_ltr.cli import run
from scarce_ltr.search import study_loop
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.search.study_loop import Verdict, run_study, start_study

State = optuna.trial.TrialState


def _recorded(study, n_trials: int, n_jobs: int, verdicts: dict[int, Verdict]) -> list[tuple]:
    """Every call the loop makes, in order, with the study's state of the trial at that call."""
    events: list[tuple] = []
    if study is not None:
        ask = study.ask
        study.ask = lambda: events.append(("ask",)) or ask()

    def state(number: int):
        return None if study is None else study.trials[number].state

    def draw(number: int, trial) -> int:
        assert (trial is None) == (study is None)
        assert trial is None or trial.number == number
        if trial is not None:
            trial.suggest_float("x", 0.0, 1.0)
        events.append(("draw", number, state(number)))
        return number

    def train(drawn: list[int]) -> list[str]:
        events.append(("train", tuple(drawn)))
        return [f"model {n}" for n in drawn]

    def settle(number: int, trained: str) -> Verdict:
        assert trained == f"model {number}"
        events.append(("settle", number, state(number)))
        return verdicts.get(number, Verdict(number / 10))

    def on_trial(number: int, trained: str) -> None:
        events.append(("seen", number, state(number)))

    run_study(study, n_trials, n_jobs, draw=draw, train=train, settle=settle, on_trial=on_trial)
    return events


def test_without_a_study_the_trials_are_drawn_trained_and_seen_in_batches() -> None:
    events = _recorded(None, 5, 2, {})
    assert events == [
        ("draw", 0, None), ("draw", 1, None), ("train", (0, 1)),
        ("settle", 0, None), ("seen", 0, None), ("settle", 1, None), ("seen", 1, None),
        ("draw", 2, None), ("draw", 3, None), ("train", (2, 3)),
        ("settle", 2, None), ("seen", 2, None), ("settle", 3, None), ("seen", 3, None),
        ("draw", 4, None), ("train", (4,)), ("settle", 4, None), ("seen", 4, None),
    ]  # fmt: skip


def test_a_study_is_told_each_trial_between_its_settling_and_the_callers_seeing_it() -> None:
    study = start_study(
        optuna, None, sampler=optuna.samplers.RandomSampler(seed=0), first=[{"x": 0.5}]
    )
    verdicts = {1: Verdict(math.nan, pruned=True), 2: Verdict(math.nan), 4: Verdict(math.inf)}
    events = _recorded(study, 6, 4, verdicts)
    run_, done = State.RUNNING, {1: State.PRUNED, 2: State.FAIL, 4: State.FAIL}
    told = [done.get(n, State.COMPLETE) for n in range(6)]
    ask = ("ask",)  # each trial asked, then drawn, in trial order
    assert events == [
        ask, ("draw", 0, run_), ask, ("draw", 1, run_), ask, ("draw", 2, run_),
        ask, ("draw", 3, run_), ("train", (0, 1, 2, 3)),
        ("settle", 0, run_), ("seen", 0, told[0]), ("settle", 1, run_), ("seen", 1, told[1]),
        ("settle", 2, run_), ("seen", 2, told[2]), ("settle", 3, run_), ("seen", 3, told[3]),
        ask, ("draw", 4, run_), ask, ("draw", 5, run_), ("train", (4, 5)),
        ("settle", 4, run_), ("seen", 4, told[4]), ("settle", 5, run_), ("seen", 5, told[5]),
    ]  # fmt: skip
    assert [t.state for t in study.trials] == told
    assert [t.value for t in study.trials] == [0.0, None, None, 0.3, None, 0.5]
    assert study.trials[0].params == {"x": 0.5}  # the first point is trial 0
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE


def test_a_stored_study_draws_in_memory_and_records_each_trial(tmp_path: Path) -> None:
    """With a store the search draws from its in-memory study (its name, pruner and first
    points, as without one); the stored study records each trial: running once drawn, then
    ended with its state, score, per-step values and search trial number."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    store = StudyStore.of(url, "loop", tmp_path / "run", key="gbdt.storage")
    pruner = optuna.pruners.MedianPruner(n_startup_trials=3)
    study = start_study(
        optuna, store, sampler=optuna.samplers.RandomSampler(seed=0), pruner=pruner,
        first=[{"x": 1.0}, {"x": 2.0}], study_name="in memory", n_trials=3,
    )  # fmt: skip
    assert study.study_name == "in memory" and study.pruner is pruner
    assert [t.system_attrs["fixed_params"] for t in study.trials] == [{"x": 1.0}, {"x": 2.0}]
    assert not _stored_trials(url)
    seen: list = []

    def draw(number: int, trial) -> int:
        trial.suggest_float("x", 0.0, 2.0)
        trial.report(number / 10, 0)
        return number

    def train(drawn: list[int]) -> list[int]:
        seen.append([t.state for t in _stored_trials(url)])
        return drawn

    run_study(study, 3, 2, draw=draw, train=train,
              settle=lambda n, t: Verdict(math.nan if n == 1 else n / 10),
              on_trial=lambda n, t: None)  # fmt: skip
    assert seen == [[State.RUNNING] * 2, [State.COMPLETE, State.FAIL, State.RUNNING]]
    stored = _stored_trials(url)
    assert [t.params for t in stored] == [t.params for t in study.trials]
    assert [t.value for t in stored] == [0.0, None, 0.2]
    assert [t.intermediate_values for t in stored] == [{0: 0.0}, {0: 0.1}, {0: 0.2}]
    assert [t.user_attrs for t in stored] == [{"scarce_ltr_trial": n} for n in range(3)]
    in_memory = start_study(optuna, None, sampler=None, study_name="search-seed0")
    assert in_memory.study_name == "search-seed0" and not in_memory.trials


def _stored_trials(url: str) -> list:
    return optuna.load_study(storage=url, study_name="loop").trials


class _Spy:
    """`run_study` as the drivers call it, recording each call's study and trial count."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, study, n_trials, n_jobs, **callbacks) -> None:
        self.calls.append((study, n_trials, n_jobs))
        study_loop.run_study(study, n_trials, n_jobs, **callbacks)


def test_the_tree_search_runs_its_trials_through_the_study_loop(monkeypatch) -> None:
    spy = _Spy()
    monkeypatch.setattr(tree_search, "run_study", spy)
    values = iter([0.5, math.nan, 0.7, 0.6])

    def train(choices: dict, report) -> tuple:
        vali = next(values)
        return {"vali": vali}, 1, vali, 0.0, np.array([vali])

    outcome = tree_search.optuna_search(
        n_trials=4, sampler=optuna.samplers.RandomSampler(seed=0), suggest=lambda t: {},
        train=train, n_jobs=3,
    )  # fmt: skip
    ((study, n_trials, n_jobs),) = spy.calls
    assert (n_trials, n_jobs) == (4, 3)
    assert [t.state for t in study.trials] == [State.COMPLETE, State.FAIL] + [State.COMPLETE] * 2
    assert outcome.best_model == {"vali": 0.7}


def test_the_deep_search_runs_its_trials_through_the_study_loop(tmp_path: Path, monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(deep_search, "run_study", spy)
    report = run([*RESNET, *DEEP_SEARCH, "deep.search.n_trials=2", "epochs=1",
                  f"run_dir={tmp_path / 'searched'}"])  # fmt: skip
    ((study, n_trials, n_jobs),) = spy.calls
    assert (n_trials, n_jobs) == (2, 1)
    assert [t.state for t in study.trials] == [State.COMPLETE] * 2
    assert [t.value for t in study.trials] == pytest.approx(
        [t["best_vali_ndcg@5"] for t in report["search"]["trials"]], abs=1e-12
    )
    # a run training another run's chosen recipe: one trial, no study
    run([*RESNET, *DEEP_SEARCH, "epochs=1", f"deep.search.recipe_from={tmp_path / 'searched'}",
         f"run_dir={tmp_path / 'recipe'}"])  # fmt: skip
    assert spy.calls[1] == (None, 1, 1)
