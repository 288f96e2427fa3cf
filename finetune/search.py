"""A seeded Optuna search on vali over a deep ranker's training recipe (``search.n_trials``).

The trees get ``n_trials`` Optuna trials on vali (`trees.tuning`); this gives finetuning
(`finetune.train`) and the from-scratch deep baselines (`baselines.deep.train`) the same budget
over what matters for small labeled sets: learning rate, weight decay, dropout, head and full
epochs, the loss, input noise and head size (`finetune.search_config.SearchConfig`, ranges from
YAML).

Each trial is a grid point (`finetune.grid.train_point`) in ``grid/trial=<k>/``: trained from
the run's seed with its own checkpoint, finished on its own (``result.json`` + ``DONE``). The
study is a TPE sampler seeded with the run's seed, asked for every trial in order; a trial
finished before is read back and told to the study with its stored score instead of trained,
so a resumed search asks exactly what an uninterrupted one asked and ends in the same trials.
The first trials are the fixed recipe's points (``optimizer.lr``, or each rate of the grid),
so the search never chooses worse on vali than the fixed recipe would have. With
``recipe_from`` the run trains another run's chosen recipe as its one trial, no study. With
``strategy=portfolio`` it trains the portfolio file's K recipes as its K trials, in file order,
no study either (`Space.fixed_trials`: a recipe's keys the model does not search are dropped,
the keys it does not name keep the fixed recipe's values); the same trial folders, read-back on
resume, ``n_jobs`` and choice as a search, no pruning. The trial kept is
`search.selection.select_best` over the trials' best vali NDCG@5; test is scored once, with it
(`finetune.grid.finish_grid`).

Pruning (``search.pruner``, default ``none``): each trial reports its best vali NDCG@5 so far
after every epoch (step = the epoch over all phases) to one of Optuna's pruners (median,
successive halving, Hyperband; deterministic: Hyperband's brackets follow the study's fixed
name), which may stop it after ``search.prune_warmup`` epochs. The best so far, not the epoch's
own score, so a noisy epoch on a few dozen vali QGs does not stop a trial; the warm-up, because
``full``'s head-only phase at a low rate looks bad before its whole-network phase. The fixed
recipe's trials (trial 0 first) are never pruned. A pruned trial is finished as such
(``result.json`` with ``pruned`` and a NaN score, never chosen, a row of NaN in ``trials.npz``);
on resume every finished trial's epochs are reported to the study again before it is told, and a
trial resumed from its checkpoint reports its epochs so far first, so the pruner decides as in
an uninterrupted search. ``none`` reports nothing: the search it always was, bit for bit.

The study is run by the one study loop of every search (`search.study_loop`, the trees' too);
this module gives it the deep specifics: the space, the trials' folders, pools and read-back,
the pruner's replay, the choice and the progress lines. Trials at once (``search.n_jobs`` > 1):
the study is asked a batch of N trials in order, they train in child processes
(`finetune.trial_pool`), and are told in order once all N are done (`search.trial_batches`), so
the search is reproducible for a given N and resumes mid-batch like a sequential one. A child
prunes with the median rule over the trials finished before its batch (`ReplicaPruner`); halving
and Hyperband, which read the trials still training, are refused. With ``trial_executor=ray``
the children are Ray tasks (`finetune.trial_pool.RayTrialPool`): the same jobs, the same
results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.finetune.grid import (
    BEST_VALI,
    PRUNED,
    Candidate,
    GridTraining,
    TrainedPoint,
    finish_grid,
    point_vali_per_group,
    train_point,
)
from scarce_ltr.finetune.search_config import Portfolio, SearchConfig
from scarce_ltr.finetune.search_report import progress_line, summary
from scarce_ltr.finetune.search_space import Space, chosen_recipe
from scarce_ltr.finetune.trial_pool import RayTrialPool, TrialPool
from scarce_ltr.search.pruning import ReplicaPruner, Reporter, _optuna, make_pruner
from scarce_ltr.search.selection import select_best
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.search.study_loop import Verdict, run_study, start_study
from scarce_ltr.search.trial_batches import thread_share
from scarce_ltr.search.trial_folders import GridPoint

# (trial number, the trial's config) -> how the trial trains, and its model as a grid point of
# that config would build it (the search gives it the trial's folder, keys and name)
MakeTrial = Callable[[int, Any], tuple[GridTraining, Candidate]]
# (chosen, results, metrics, cfg=the chosen trial's config) -> (report body, tracker summary)
TrialReportFn = Callable[..., tuple[dict, dict]]


def trial_folder(run_folder, number: int) -> GridPoint:
    return GridPoint.within(run_folder, f"trial={number}")


def run_search(
    run: Run,
    cfg: CommonConfig,
    space: Space,
    *,
    with_params: Callable[[Any, dict], Any],
    make_trial: MakeTrial,
    report: TrialReportFn,
    desc: str,
    on_trial: Callable[[int, dict], None],
) -> Outcome:
    """Run the trials of ``cfg`` (``space.config.n_trials`` drawn by Optuna, a portfolio's
    recipes, or ``recipe_from``'s one; each ``with_params(cfg, params)``, trained as
    ``make_trial`` says), keep the vali-best, score it once on vali and test, and finish
    ``run`` through ``report`` (given the chosen trial's config) plus ``search``.

    A trial's result holds ``trial``, ``params`` and ``seconds`` beside the grid point's keys;
    ``on_trial(number, row)`` gets its params and vali score once it is done.
    """
    portfolio = _portfolio(space)
    fixed = _fixed_trials(space, portfolio, cfg, with_params)  # None: Optuna draws the trials
    study, n_trials = None, len(fixed or ())
    pruning = fixed is None and space.config.pruner != "none"
    if fixed is None:
        optuna = _optuna()
        n_trials = space.config.n_trials
        study = start_study(
            optuna,
            _store(run, cfg, space),
            sampler=optuna.samplers.TPESampler(seed=cfg.seed),
            pruner=make_pruner(space) if pruning else None,
            first=space.first[:n_trials],
            study_name=f"search-seed{cfg.seed}" if pruning else None,  # Hyperband hashes it
            n_trials=n_trials,
        )
    results: list[dict] = []
    trainings: list[GridTraining] = []
    per_trial: list[np.ndarray] = []
    chosen: TrainedPoint | None = None
    n_jobs = min(space.config.n_jobs, n_trials)
    pool = None
    start = 0.0
    trial_args = {"with_params": with_params, "make_trial": make_trial, "desc": desc}

    def draw(number: int, trial) -> Asked:
        return _draw(number, trial, space, fixed, run, cfg, pruning, **trial_args)

    def train(asked: list[Asked]) -> list[TrainedPoint]:
        nonlocal pool, start
        start = time.perf_counter()
        if len(asked) > 1 and pool is None:
            pool = _pool(asked[0], n_jobs, _prefix(cfg, space), space.config, run.folder)
        return _train_batch(asked, pool, study, space)

    def keep(item: Asked, point: TrainedPoint) -> None:
        nonlocal chosen
        number, training = item[0], item[3]
        results.append(point.result)
        trainings.append(training)
        per_trial.append(point_vali_per_group(training, point))
        best = select_best([r[BEST_VALI] for r in results])
        if best == number:
            chosen = point  # the earlier best's model is dropped
        seconds = time.perf_counter() - start
        progress_line(desc, number, n_trials, point.result, results[best], seconds)
        row = {"trial": number, **point.result["params"], BEST_VALI: point.result[BEST_VALI]}
        on_trial(number, row)

    try:
        run_study(study, n_trials, n_jobs, draw=draw, train=train, settle=_settle, on_trial=keep)
    finally:
        if pool is not None:
            pool.close()
    assert chosen is not None, "a search has at least one trial"
    search_report = partial(
        _search_report,
        cfg=cfg,
        space=space,
        with_params=with_params,
        report=report,
        portfolio=portfolio,
    )
    training = trainings[chosen.result["trial"]]
    return finish_grid(run, training, chosen, results, report=search_report, per_point=per_trial)


def _portfolio(space: Space) -> Portfolio | None:
    """The portfolio a ``strategy=portfolio`` run trains (None otherwise, and where
    ``recipe_from`` gives the one recipe instead)."""
    config = space.config
    if config.strategy != "portfolio" or config.recipe_from:
        return None
    return config.read_portfolio()


def _fixed_trials(
    space: Space, portfolio: Portfolio | None, cfg, with_params: Callable[[Any, dict], Any]
) -> list[dict] | None:
    """The params of every trial when nothing is sampled: ``recipe_from``'s one recipe, or the
    portfolio's recipes as this model trains them (each checked to make a valid config before
    any trains); None for an Optuna search."""
    if space.config.recipe_from:
        return [chosen_recipe(space)]
    if portfolio is None:
        return None
    trials = space.fixed_trials(portfolio.recipes)
    for number, params in enumerate(trials):
        try:
            with_params(cfg, params)
        except ValueError as exc:
            raise UserError(f"{portfolio.path}: recipes[{number}] ({params}): {exc}") from None
    return trials


# One asked trial: (number, Optuna trial or None, params, training, candidate, reporter or None)
Asked = tuple[int, Any, dict, GridTraining, Candidate, "Reporter | None"]


def _draw(
    number: int,
    trial,
    space: Space,
    fixed: list[dict] | None,
    run: Run,
    cfg: CommonConfig,
    pruning: bool,
    *,
    with_params: Callable[[Any, dict], Any],
    make_trial: MakeTrial,
    desc: str,
) -> Asked:
    """Trial ``number``, just asked of the study (None: trial ``number`` of ``fixed``), drawn
    as the trial it trains."""
    params = space.suggest(trial) if fixed is None else fixed[number]
    training, candidate = make_trial(number, with_params(cfg, params))
    candidate = _as_trial(candidate, run.folder, number, params, desc)
    reporter = None
    if pruning:
        reporter = Reporter(trial, protected=number < max(len(space.first), 1))
        candidate = replace(candidate, prune=reporter)
    return number, trial, params, training, candidate, reporter


def _settle(item: Asked, point: TrainedPoint) -> Verdict:
    """What the study is told of a trained or read-back trial, once its params are checked and
    its epochs (trained elsewhere or read back) reported to its pruner as it saw them."""
    _, _, params, _, candidate, reporter = item
    _check_params(candidate, point.result, params)
    if reporter is not None:
        reporter(point.result["history"])
    return Verdict(point.result[BEST_VALI], pruned=bool(point.result.get(PRUNED)))


def _pool(
    first: Asked, n_jobs: int, prefix: str, config: SearchConfig, folder: Path
) -> TrialPool | RayTrialPool:
    """The children (or Ray tasks: ``trial_executor=ray``) of a search training ``n_jobs``
    trials at once, each with its share of torch's threads; ``prefix`` names the keys."""
    key = f"{prefix}n_jobs"
    training = first[3]
    if training.runtime.distributed:
        raise UserError(
            f"{key}={n_jobs} with a distributed run (torchrun): each trial already trains on "
            f"every process; give {key}=1"
        )
    threads = thread_share(torch.get_num_threads(), n_jobs)
    if config.trial_executor == "ray":
        address = config.ray_address
        return RayTrialPool(
            training.prepared, threads=threads, address=address, prefix=prefix, folder=folder
        )
    return TrialPool(n_jobs, training.prepared, threads=threads)


def _train_batch(
    asked: list[Asked], pool: TrialPool | RayTrialPool | None, study, space: Space
) -> list[TrainedPoint]:
    """Each asked trial trained (in ``pool``'s children when given) or read back, in order."""
    if pool is None:
        return [train_point(item[3], item[4], in_grid=True) for item in asked]
    finished = []  # what a child's median rule compares with: only a pruned search asks
    if study is not None:
        finished = study.get_trials(deepcopy=True, states=(_optuna().trial.TrialState.COMPLETE,))
    pending: list[tuple[Candidate, Any]] = []
    for _, _, _, training, candidate, reporter in asked:
        done = GridPoint(candidate.folder).result()
        if done is not None:  # finished before: read back, as train_point would
            pending.append((candidate, TrainedPoint(candidate, done)))
            continue
        prune = None
        if reporter is not None:
            prune = ReplicaPruner(space, finished, protected=reporter.protected)
        pending.append((candidate, pool.submit(training, replace(candidate, prune=None), prune)))
    points = []
    for candidate, job in pending:
        if isinstance(job, TrainedPoint):
            points.append(job)
            continue
        result, rows = job.result()
        for row in rows if candidate.log is not None else ():
            candidate.log(row)  # the tracker's epochs, in trial order
        points.append(TrainedPoint(candidate, result))
    return points


def _store(run: Run, cfg: CommonConfig, space: Space) -> StudyStore | None:
    """Where the study is recorded (``search.storage`` or ``deep.search.storage``:
    `search.studies`, continued by a later search of the same name); None: in memory only."""
    prefix = _prefix(cfg, space).rstrip(".")
    config = space.config
    return StudyStore.of(config.storage, config.study_name, run, key=f"{prefix}.storage")


def _prefix(cfg: CommonConfig, space: Space) -> str:
    """Where the search's keys sit: ``search.`` (finetuning) or ``deep.search.``."""
    return "search." if getattr(cfg, "search", None) is space.config else "deep.search."


def _search_report(
    chosen: TrainedPoint,
    results: list[dict],
    metrics: dict,
    *,
    cfg: CommonConfig,
    space: Space,
    with_params: Callable[[Any, dict], Any],
    report: TrialReportFn,
    portfolio: Portfolio | None,
) -> tuple[dict, dict]:
    """The stage's report of the chosen trial's config, and the search's own key."""
    trial_cfg = with_params(cfg, chosen.result["params"])
    body, tracker_summary = report(chosen, results, metrics, cfg=trial_cfg)
    body["search"] = summary(results, chosen, seed=cfg.seed, space=space, portfolio=portfolio)
    return body, tracker_summary


def _as_trial(
    candidate: Candidate, run_folder: Path, number: int, params: dict, desc: str
) -> Candidate:
    """``candidate`` in ``grid/trial=<k>/``, under the trial's keys and name."""
    return replace(
        candidate,
        folder=trial_folder(run_folder, number).folder,
        keys=_trial_keys(number, params, candidate.lr),
        desc=f"{desc} trial {number}",
    )


def _trial_keys(number: int, params: dict, lr: float) -> dict:
    """The first keys of a trial's result (`finetune.grid.Candidate.keys`)."""
    return {"trial": number, "params": params, "lr": lr}


def _check_params(candidate: Candidate, result: dict, params: dict) -> None:
    """A trial read back must be the trial the study asked for now (same seed and space)."""
    if result.get("params") != params:
        raise UserError(
            f"{candidate.folder} holds a trial with other params ({result.get('params')}) than "
            f"this search asks for ({params}); delete {candidate.folder.parent} to search again"
        )
