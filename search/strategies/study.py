"""The Optuna study the sampling strategies share (``optuna``: TPE, ...): trials asked in
order, trial 0 the backend's defaults, a median rule pruning on the backend's own per-round vali
NDCG@5, the vali-best completed trial kept (`search.trials.keep_if_best`), all through the one
study loop of `search.study_loop`. A strategy differs only in its sampler."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from functools import partial
from types import ModuleType
from typing import Any

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.extras import require
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.search.study_loop import Verdict, run_study, start_study
from scarce_ltr.search.trial_batches import in_threads
from scarce_ltr.search.trials import (
    Pruned,
    Searchable,
    SearchOutcome,
    TrainTrial,
    TrialResult,
    keep_if_best,
)


def search_backend(
    backend: Searchable,
    sampler: Callable[[ModuleType], Any],
    *,
    train: TrainTrial,
    on_trial: Callable[[TrialResult], None],
    study: StudyStore | None = None,
) -> SearchOutcome:
    """`optuna_search` of ``backend``'s space: its ``n_trials``, ``suggest`` and ``first``,
    no trial pruned before its early-stopping patience, ``options.n_jobs`` trials trained at
    once; ``sampler(optuna)`` the study's sampler, ``study`` where it is kept (None: in
    memory)."""
    optuna = require("optuna", "the optuna backend")
    return optuna_search(
        n_trials=backend.n_trials,
        sampler=sampler(optuna),
        suggest=backend.suggest,
        train=train,
        first=backend.first(),
        warmup_steps=backend.early_stopping_rounds,
        on_trial=on_trial,
        study=study,
        n_jobs=n_jobs_of(backend),
        apart=getattr(backend, "apart", lambda choices: None),
    )


def n_jobs_of(backend: Searchable) -> int:
    """The trials ``backend``'s search trains at once: its section's ``n_jobs`` (1 for a
    backend without one)."""
    return getattr(getattr(backend, "options", None), "n_jobs", 1)


def optuna_search(
    *,
    n_trials: int,
    sampler: Any,
    suggest: Callable[[Any], dict],
    train: TrainTrial,
    first: dict | None = None,
    warmup_steps: int = 0,
    on_trial: Callable[[TrialResult], None] = lambda result: None,
    study: StudyStore | None = None,
    n_jobs: int = 1,
    apart: Callable[[dict], Hashable] = lambda choices: None,
) -> SearchOutcome:
    """``n_trials`` trials of a study drawn by ``sampler`` (an Optuna sampler, seeded), pruned
    by a median rule on the backend's own per-round vali NDCG@5; the vali-best completed trial
    wins.

    Args:
        suggest: the trial's choices (``trial.suggest_*``), a dict of JSON values.
        train: fits one model for the choices; calls ``report(round, value)`` each round.
        first: choices of trial 0 (the backend's defaults), so that the search starts from the
            point a hand-tuned user would try first.
        warmup_steps: rounds before a trial may be pruned (the early-stopping patience: a
            slower learning rate is not cut while it catches up).
        study: the storage and name the study is recorded under (`search.studies`: continued;
            the search trains its trials again, checked against the stored ones); None: in
            memory only.
        n_jobs: trials trained at once, in threads (`search.trial_batches`: asked and told in
            trial order, so the search is reproducible for a given ``n_jobs``; 1: one by one).
        apart: a trial's key; trials of different keys never train at once
            (`search.trials.Searchable`).
    """
    if n_trials < 1:
        raise UserError(f"n_trials must be >= 1, got {n_trials}")
    optuna = require("optuna", "the optuna backend")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    search_study = start_study(
        optuna,
        study,
        sampler=sampler,
        pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=warmup_steps),
        first=[first] if first is not None else [],
        n_trials=n_trials,
    )
    outcome = SearchOutcome()

    def train_batch(drawn: list[tuple[Any, dict]]) -> list[tuple[TrialResult, Any]]:
        tasks = [partial(_train, train, trial, choices) for trial, choices in drawn]
        done = in_threads(tasks, [apart(choices) for _, choices in drawn])
        return [_result(*item, *fitted) for item, fitted in zip(drawn, done, strict=True)]

    def keep(drawn: tuple[Any, dict], trained: tuple[TrialResult, Any]) -> None:
        keep_if_best(outcome, *trained)
        on_trial(trained[0])

    run_study(
        search_study,
        n_trials,
        n_jobs,
        draw=lambda number, trial: (trial, suggest(trial)),
        train=train_batch,
        settle=lambda drawn, trained: Verdict(trained[0].vali_ndcg, trained[0].pruned),
        on_trial=keep,
    )
    if all(result.pruned for result in outcome.results):
        raise UserError("every trial of the search was pruned; raise n_trials")
    return outcome


def _result(trial: Any, choices: dict, fitted: Any, seconds: float) -> tuple[TrialResult, Any]:
    """A trained trial's result and model (None: pruned); ``seconds``, its time in `_train`, is
    a pruned trial's (a trained one gives its own)."""
    if isinstance(fitted, Pruned):
        result = TrialResult(trial.number, choices, fitted.rounds, math.nan, seconds, pruned=True)
        return result, None
    model, rounds, vali, seconds, per_group = fitted
    result = TrialResult(trial.number, choices, rounds, vali, seconds, vali_per_group=per_group)
    return result, model


def _train(train: TrainTrial, trial: Any, choices: dict) -> tuple[Any, float]:
    """``(train's tuple, seconds)`` of one trial, or ``(Pruned, seconds)`` when its pruner
    stopped it; it reports each round to ``trial`` (from its own thread in a batch)."""

    def report(step: int, value: float) -> None:
        trial.report(value, step)
        if trial.should_prune():
            raise Pruned(step + 1)

    start = time.perf_counter()
    try:
        return train(choices, report), time.perf_counter() - start
    except Pruned as stop:
        return stop, time.perf_counter() - start
