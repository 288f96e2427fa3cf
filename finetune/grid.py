"""One model per grid point, the vali-best kept, scored once, bundled, the run finished.

Finetuning's ``lrs=[...]`` (`finetune.train`) and the deep baselines' grids
(`baselines.deep.train`: a rate, and for DCNv2 a number of cross layers) both run through
`run_grid`. Each point trains with `finetune.loop.fit` from the same seed, in a folder of its
own (``grid/<name>/``; the run folder itself for a grid of one rate) that holds its checkpoint,
so an interrupted grid resumes inside the point it was training; a point in ``grid/`` is finished
on its own (``result.json`` + ``DONE``) and is read back, not trained again. The point kept is
`search.selection.select_best` over the points' best vali NDCG@5 (each epoch itself chosen on
`data.evaluation.vali_selection`): the highest, the first of ties, NaN last. Its model then
scores vali and test once (`data.evaluation`), and the run gets ``scores.npz``, ``model.pt``, its
bundle; its `core.runs.Outcome` goes back to ``Run.execute``, which writes ``report.json`` and
``DONE``.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from torch import nn

from scarce_ltr.core.device import Runtime
from scarce_ltr.core.metrics import SELECTION_METRIC
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.core.seeding import seed_everything
from scarce_ltr.data.bundling import write_run_bundle
from scarce_ltr.data.evaluation import (
    evaluation_report,
    save_scores,
    vali_selection_per_group,
    write_trials,
)
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.finetune.config import Phase, TrainOptions
from scarce_ltr.finetune.fit_state import CHECKPOINT, FitResult, Prune, TrialPruned
from scarce_ltr.finetune.joint import Joint, joint_for
from scarce_ltr.finetune.loop import fit, predict
from scarce_ltr.finetune.model import MODEL_FILE, ModelKinds, load_model, save_model, torch_bundle
from scarce_ltr.finetune.steps import LossFn
from scarce_ltr.finetune.teacher import Teaching, teaching_for
from scarce_ltr.search.selection import select_best
from scarce_ltr.search.trial_folders import GridPoint

BEST_VALI = f"best_vali_{SELECTION_METRIC}"  # a point's score, the one it is chosen on
PRUNED = "pruned"  # True in a pruned search trial's result (its BEST_VALI NaN: never chosen)
# A point's result: its own keys, then these. The deep baselines' reports predate
# ``train_seconds_per_epoch`` and leave it out (`GridTraining.result_keys`).
RESULT_KEYS = (
    BEST_VALI,
    "best_epoch",
    "epochs_trained",
    "seconds_per_epoch",
    "train_seconds_per_epoch",
    "history",
)


@dataclass(frozen=True)
class Candidate:
    """One point of a grid: where it trains, at which rate, and how its model is built."""

    folder: Path | None  # ``grid/<name>/``, the run folder for a grid of one rate; None: memory
    lr: float
    keys: dict  # the point's own keys, first in its result: ``{"lr": 1e-3}``
    # ``(model, spec, source)`` of a fresh model, called just after seeding
    build: Callable[[], tuple[nn.Module, dict, dict]]
    desc: str  # the progress line's name
    log: Callable[[dict], None] | None = None  # each epoch's row (`finetune.loop.fit`)
    # the point's own training options; None: the grid's at its rate (``GridTraining.options``)
    options: TrainOptions | None = None
    prune: Prune | None = None  # a search trial's pruner (`finetune.loop.fit`)


@dataclass(frozen=True)
class GridTraining:
    """What every point of a grid trains and is scored with."""

    cfg: CommonConfig  # seed, data (named in model.pt), metrics
    prepared: PreparedData
    runtime: Runtime
    phases: list[Phase]
    loss_fn: LossFn
    options: Callable[[float], TrainOptions]  # the training options at a rate
    eval_item_budget: int
    kinds: ModelKinds | None = None  # model kinds beyond finetuning's (`load_model`)
    meta: dict | None = None  # the checkpoints' ``meta`` (read back on resume)
    # written into a finished point's result.json beside its result (the run's identity)
    point_extra: dict = field(default_factory=dict)
    result_keys: tuple[str, ...] = RESULT_KEYS

    @cached_property
    def teaching(self) -> Teaching | None:
        """``cfg.teacher``'s targets on the unlabeled train QGs (`finetune.teacher`), checked
        against the run's data and labels on first use; None without a teacher."""
        return teaching_for(self.cfg, self.prepared)

    @cached_property
    def joint(self) -> Joint | None:
        """``cfg.joint``'s term on the train QGs (`finetune.joint`); None when off."""
        return joint_for(self.cfg, self.prepared, self.teaching)


@dataclass
class TrainedPoint:
    """A point trained (its vali-best model in memory) or read back (model None until kept)."""

    candidate: Candidate
    result: dict
    model: nn.Module | None = None
    spec: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.candidate.folder

    @property
    def lr(self) -> float:
        return self.candidate.lr


ReportFn = Callable[[TrainedPoint, list[dict], dict], tuple[dict, dict]]


def run_grid(
    run: Run,
    training: GridTraining,
    candidates: Sequence[Candidate],
    *,
    report: ReportFn,
    on_point: Callable[[int, dict], None] | None = None,
) -> Outcome:
    """Train every candidate, keep the vali-best, score it, bundle it and finish ``run``.

    ``report(chosen, results, metrics) -> (report body, tracker summary)`` writes the stage's own
    keys (``results``: every point's result, in grid order); ``on_point(index, result)`` is
    called after each point. Returns the finished report.
    """
    chosen, results, per_point = train_grid(run.folder, training, candidates, on_point=on_point)
    return finish_grid(run, training, chosen, results, report=report, per_point=per_point)


def train_grid(
    run_folder: Path | None,
    training: GridTraining,
    candidates: Sequence[Candidate],
    *,
    on_point: Callable[[int, dict], None] | None = None,
) -> tuple[TrainedPoint, list[dict], list[np.ndarray]]:
    """``(the vali-best point, every point's result, every point's per-QG vali NDCG@5)``; of
    the models only the best so far is kept in memory (`select_best` on the results so far names
    the same point as on all)."""
    chosen, results, per_point = None, [], []
    for index, candidate in enumerate(candidates):
        in_grid = candidate.folder != run_folder
        point = train_point(training, candidate, in_grid=in_grid)
        results.append(point.result)
        per_point.append(point_vali_per_group(training, point))
        if on_point is not None:
            on_point(index, point.result)
        if select_best([r[BEST_VALI] for r in results]) == index:
            chosen = point
    assert chosen is not None, "a grid has at least one point"
    return chosen, results, per_point


def train_point(training: GridTraining, candidate: Candidate, *, in_grid: bool) -> TrainedPoint:
    """Train ``candidate`` in its folder; a grid point finished before is read back instead.
    A candidate without a folder trains in memory: no checkpoint, no ``model.pt``."""
    grid_point = None if candidate.folder is None else GridPoint(candidate.folder)
    finished = grid_point.result() if in_grid and grid_point is not None else None
    if finished is not None:
        return TrainedPoint(candidate, finished)
    cfg = training.cfg
    seed_everything(cfg.seed)  # every point starts from the same model and data order
    model, spec, source = candidate.build()
    if candidate.folder is not None:
        candidate.folder.mkdir(parents=True, exist_ok=True)
    try:
        fitted = _fit_point(training, candidate, model)
    except TrialPruned as stop:  # finished as pruned: no model to keep, never chosen
        values = _fit_values(stop.fitted) | {BEST_VALI: math.nan}
        result = candidate.keys | {key: values[key] for key in training.result_keys}
        result[PRUNED] = True
        if in_grid and grid_point is not None:
            grid_point.finish(result | training.point_extra)
        return TrainedPoint(candidate, result)
    data = {"name": cfg.data.name, "transform": cfg.data.transform}
    data["n_features"] = training.prepared.n_features
    if candidate.folder is not None:
        save_model(candidate.folder, model, spec=spec, data=data, source=source)
    values = _fit_values(fitted)
    result = candidate.keys | {key: values[key] for key in training.result_keys}
    if in_grid and grid_point is not None:  # done on its own: an interrupted grid resumes after it
        grid_point.finish(result | training.point_extra)
    return TrainedPoint(candidate, result, model, spec, source)


def _fit_point(training: GridTraining, candidate: Candidate, model: nn.Module) -> FitResult:
    cfg = training.cfg
    return fit(
        model,
        training.prepared,
        phases=training.phases,
        loss_fn=training.loss_fn,
        options=candidate.options or training.options(candidate.lr),
        metrics_cfg=cfg.metrics,
        runtime=training.runtime,
        seed=cfg.seed,
        checkpoint=None if candidate.folder is None else candidate.folder / CHECKPOINT,
        log=candidate.log,
        meta=training.meta,
        desc=candidate.desc,
        teaching=training.teaching,
        prune=candidate.prune,
        joint=training.joint,
    )


def point_vali_per_group(training: GridTraining, point: TrainedPoint) -> np.ndarray | None:
    """The point's vali NDCG@5 per labeled vali QG (`search.trial_scores`), from its model in
    memory or, for a point read back, its ``model.pt``; all NaN where the model's vali scores
    are NaN (it diverged: its vali score is NaN too); None for a pruned search trial."""
    if point.result.get(PRUNED):
        return None
    model = point.model
    if model is None:
        model, _ = load_model(point.folder, kinds=training.kinds)
    model.to(training.runtime.device)
    prepared = training.prepared
    labeled = np.flatnonzero(prepared.labels.vali_labeled)
    scores = predict(
        model,
        prepared.vali,
        runtime=training.runtime,
        item_budget=training.eval_item_budget,
        groups=labeled,
    )
    if np.isnan(scores).any():
        return np.full(len(labeled), np.nan)
    return vali_selection_per_group(prepared, scores, training.cfg.metrics)


def _fit_values(fitted: FitResult) -> dict:
    return {
        BEST_VALI: fitted.best_vali,
        "best_epoch": fitted.best_epoch,
        "epochs_trained": fitted.epochs,
        "seconds_per_epoch": fitted.seconds_per_epoch,
        "train_seconds_per_epoch": fitted.train_seconds_per_epoch,
        "history": fitted.history,  # vali NDCG@5 and loss per epoch: the dashboard's curves
    }


def finish_grid(
    run: Run,
    training: GridTraining,
    chosen: TrainedPoint,
    results: list[dict],
    *,
    report: ReportFn,
    per_point: list[np.ndarray],
) -> Outcome:
    """Score vali and test once with the chosen model; write scores, model and bundle, and with
    two points or more each point's per-QG vali NDCG@5 (``trials.npz``); the run's outcome (its
    report body and summary)."""
    write_trials(run.folder, training.prepared, per_point)
    if chosen.model is None:  # read back: its model is on disk
        chosen.model, payload = load_model(chosen.folder, kinds=training.kinds)
        chosen.spec, chosen.source = payload["spec"], payload["source"]
    model, prepared, budget = chosen.model, training.prepared, training.eval_item_budget
    model.to(training.runtime.device)
    vali = predict(model, prepared.vali, runtime=training.runtime, item_budget=budget)
    test = predict(model, prepared.test, runtime=training.runtime, item_budget=budget)
    metrics = evaluation_report(prepared, vali, test, training.cfg.metrics)
    # Every train item, labeled QG or not: a later run may take this one as its teacher.
    train = predict(model, prepared.train, runtime=training.runtime, item_budget=budget)
    save_scores(run.folder, prepared, vali, test, train=train)
    if chosen.folder != run.folder:
        shutil.copyfile(chosen.folder / MODEL_FILE, run.folder / MODEL_FILE)
    body, summary = report(chosen, results, metrics)
    if training.teaching is not None:
        body["teacher"] = training.teaching.summary
    if training.joint is not None:
        body["joint"] = training.joint.summary
    write_run_bundle(run, prepared, metrics, *torch_bundle(model, chosen.spec, budget))
    return Outcome(body, summary)
