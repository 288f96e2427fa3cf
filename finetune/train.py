"""``./run.sh finetune lp|mp|full|combine pretrained=<run dir>|none [key=value ...]``.

Builds the model (a pretrained or fresh encoder with a scoring head, or a combination of
finetuned runs), trains it on the labeled train QGs of the scarcity setting with
`finetune.loop.fit` (model selection on vali NDCG@5, early stopping, per-epoch checkpoint), then
scores vali and test once with the validation-best model through `data.evaluation`, all by
`finetune.grid.run_grid`, the runner the deep baselines share (this module builds the model and
writes the report's finetuning keys). The run directory gets ``report.json``, ``scores.npz``,
``model.pt`` (the whole model, for ``combine``), ``checkpoint.pt`` and ``DONE``. The command line
skips a finished run and refuses a folder that holds a run of other settings
(`core.runs.Run.execute`); an unfinished one resumes from its checkpoints.

``lrs=[...]`` trains one model per learning rate, each in ``grid/lr=<rate>/`` with its own
checkpoint (a finished rate is not redone after an interruption), from the same seed; the rate
whose model has the best vali NDCG@5 is kept, and test is scored once, by that model.

``search.n_trials=N`` searches the recipe instead (`finetune.search`): N seeded Optuna trials in
``grid/trial=<k>/``, each finetuning the one pretrained encoder of ``pretrained=`` (loaded
afresh per trial, never pretrained again) with the trial's lr, weight decay, dropout, epochs,
loss, input noise and head size; the vali-best trial is kept and scores test once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import numpy as np
from torch import nn

from scarce_ltr.core.device import Runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.core.seeding import seed_everything
from scarce_ltr.core.tracking import Tracker
from scarce_ltr.data.pipeline import (
    PreparedData,
    prepare_data,
    prepare_splits,
    require_labeled_vali,
    require_relevant_labels,
)
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.finetune import search
from scarce_ltr.finetune.building import build_ranker
from scarce_ltr.finetune.combine import build_combined
from scarce_ltr.finetune.config import COMBINE, FinetuneConfig
from scarce_ltr.finetune.fit_state import CHECKPOINT
from scarce_ltr.finetune.fitted import FinetunedRanker
from scarce_ltr.finetune.grid import (
    BEST_VALI,
    Candidate,
    GridTraining,
    TrainedPoint,
    run_grid,
    train_grid,
)
from scarce_ltr.finetune.model import count_parameters
from scarce_ltr.finetune.run_settings import check_identity, checkpoint_meta, run_identity
from scarce_ltr.finetune.search_config import ENCODER_KEY
from scarce_ltr.finetune.search_space import Space
from scarce_ltr.pretrain.checkpoint import Encoder
from scarce_ltr.search.trial_folders import GridPoint


def main(cfg: FinetuneConfig, run: Run) -> Outcome:
    """Finetune as ``cfg`` says in the run the command line started (or resume it); the report."""
    out_dir = run.folder
    identity = run_identity(cfg)
    folders = {point: _point_folder(cfg, out_dir, *point) for point in grid_points(cfg)}
    metas = [checkpoint_meta(folder / CHECKPOINT) for folder in folders.values()]
    if cfg.search.on:  # the trials' checkpoints, and the results of those finished
        trials = [search.trial_folder(out_dir, k) for k in range(cfg.search.trial_count())]
        metas = [checkpoint_meta(t.folder / CHECKPOINT) for t in trials]
        metas += [t.result() or {} for t in trials]
    for meta in filter(None, metas):
        check_identity(out_dir, meta.get("identity"), identity)
    wandb_id = next((m["wandb_id"] for m in metas if m.get("wandb_id")), None)
    seed_everything(cfg.seed)
    runtime = cfg.runtime()
    try:
        prepared = prepare_data(cfg)
        require_relevant_labels(prepared)
        require_labeled_vali(prepared)
        tracker = run.open_tracker(asdict(cfg), run_id=wandb_id)
        if cfg.search.on:
            return _search(run, cfg, prepared, runtime, tracker, identity)
        training = _training(cfg, prepared, runtime, tracker, identity)
        candidates = [
            _candidate(
                cfg, prepared, lr, folder, l2sp=alpha, log=_grid_log(cfg, lr, alpha, tracker, i)
            )
            for i, ((lr, alpha), folder) in enumerate(folders.items())
        ]
        report = partial(_report, cfg=cfg, prepared=prepared, runtime=runtime, identity=identity)
        return run_grid(run, training, candidates, report=report)
    finally:
        runtime.close()


def fit(
    cfg: FinetuneConfig,
    data: Mapping[str, RankingSplit],
    encoder: Encoder | None = None,
    labeled: np.ndarray | None = None,
    *,
    run: Run | None = None,
) -> FinetunedRanker:
    """Finetune on in-memory splits: ``data`` holds raw ``train`` and ``vali`` `RankingSplit`s
    (``test`` optional), transformed as ``cfg.data.transform`` says (fit on train); ``encoder``:
    a pretrained `Encoder` (``scarce_ltr.pretrain.train.fit``'s), in place of ``cfg.pretrained``
    (None: what ``cfg.pretrained`` names, a run folder or a fresh encoder); ``labeled``: the
    labeled train QGs, ``[n_groups]`` bool (None: ``cfg.scarcity``'s seeded draw). Each point of
    ``lrs`` trains, the vali-best is returned, nothing scored on test. No file is written unless
    ``run`` is given (a started `core.runs.Run`: each point's checkpoint and ``model.pt`` there,
    an interrupted fit resumed; its report and bundle are the caller's). The same config,
    splits, encoder and labels give the command's model, bit for bit."""
    if encoder is not None:
        if cfg.strategy == COMBINE:
            raise ValueError("encoder: combine finetunes the models of runs=[...], not an encoder")
        named = f"<in memory: {encoder.method}>" if encoder.folder is None else encoder.folder
        cfg = replace(cfg, pretrained=str(named))  # its name in records; `encoder` trains
    if cfg.search.on:  # fit trains the lrs grid; the search is the command's (`main`)
        raise UserError(
            "search.n_trials: a recipe search keeps its trials and study in a run folder and "
            "runs as the command: ./run.sh finetune ... search.n_trials=N (fit trains the lrs grid)"
        )
    seed_everything(cfg.seed)
    runtime = cfg.runtime()
    try:
        prepared = prepare_splits(cfg, data, labeled=labeled)
        require_relevant_labels(prepared)
        require_labeled_vali(prepared)
        tracker, identity = Tracker(), run_identity(cfg)
        training = _training(cfg, prepared, runtime, tracker, identity)
        out_dir = None if run is None else run.folder
        folders = {
            point: None if out_dir is None else _point_folder(cfg, out_dir, *point)
            for point in grid_points(cfg)
        }
        candidates = [
            _candidate(cfg, prepared, lr, folder, l2sp=alpha, log=lambda row: None, encoder=encoder)
            for (lr, alpha), folder in folders.items()
        ]
        chosen = train_grid(out_dir, training, candidates)[0]
        return FinetunedRanker(chosen.model, chosen.spec, prepared, cfg.eval_item_budget,
                               chosen.result, chosen.source)  # fmt: skip
    finally:
        runtime.close()


def _training(
    cfg: FinetuneConfig, prepared: PreparedData, runtime: Runtime, tracker, identity: str
) -> GridTraining:
    return GridTraining(
        cfg=cfg,
        prepared=prepared,
        runtime=runtime,
        phases=cfg.phases(),
        loss_fn=cfg.loss.build(),
        options=cfg.train_options,
        eval_item_budget=cfg.eval_item_budget,
        meta={"identity": identity, "wandb_id": tracker.run_id},
        point_extra={"identity": identity},
    )


SEARCH_KEYS = {  # what each strategy can vary (a linear head has no width nor dropout)
    "lp": ("lr", "weight_decay", "head_epochs", "loss", "noise_std"),
    "mp": ("lr", "weight_decay", "dropout", "head_epochs", "loss", "noise_std", "head_hidden"),
    "full": (
        "lr",
        "weight_decay",
        "dropout",
        "head_epochs",
        "full_epochs",
        "loss",
        "noise_std",
        "head_hidden",
        "l2sp",
    ),
}


def search_space(cfg: FinetuneConfig) -> Space:
    """The strategy's keys of ``cfg.search``; its first trials are the fixed recipe (each rate
    of ``lrs``, or ``optimizer.lr``)."""
    recipe = {
        "weight_decay": cfg.optimizer.weight_decay,
        "dropout": cfg.head_dropout,
        "head_epochs": cfg.head_epochs,
        "full_epochs": cfg.full_epochs,
        "loss": cfg.loss.name,
        "noise_std": cfg.noise_std,
        "head_hidden": cfg.head_hidden,
        "l2sp": cfg.l2sp,
    }
    fixed = [recipe | {"lr": lr} for lr in cfg.learning_rates()]
    # a portfolio's recipe may name a fresh encoder's options; a pretrained encoder keeps its own
    recipe_keys = (ENCODER_KEY,) if cfg.from_scratch and cfg.strategy != COMBINE else ()
    return Space.of(cfg.search, SEARCH_KEYS[cfg.strategy], fixed=fixed, recipe_keys=recipe_keys)


def with_params(cfg: FinetuneConfig, params: dict) -> FinetuneConfig:
    """``cfg`` with a trial's params (validated again: a trial cannot train a bad config)."""
    optimizer = {k: params[k] for k in ("lr", "weight_decay") if k in params}
    names = {"dropout": "head_dropout", "head_epochs": "head_epochs"}
    names |= {"full_epochs": "full_epochs", "noise_std": "noise_std", "head_hidden": "head_hidden"}
    names |= {"l2sp": "l2sp"}
    changes = {names[k]: v for k, v in params.items() if k in names}
    if "loss" in params:
        changes["loss"] = replace(cfg.loss, name=params["loss"])
    if ENCODER_KEY in params:  # a portfolio recipe's encoder, over the run's own options
        changes["encoder"] = replace(cfg.encoder, **params[ENCODER_KEY])
    return replace(cfg, optimizer=replace(cfg.optimizer, **optimizer), lrs=[], **changes)


def _search(
    run: Run,
    cfg: FinetuneConfig,
    prepared: PreparedData,
    runtime: Runtime,
    tracker,
    identity: str,
) -> Outcome:
    """``cfg.search.n_trials`` trials of `finetune.search` (or a portfolio's recipes); the
    vali-best scores test once."""
    span = _epoch_span(cfg)

    def make_trial(number: int, trial_cfg: FinetuneConfig) -> tuple[GridTraining, Candidate]:
        def log(row: dict) -> None:  # each trial's epochs after the previous trial's
            tracker.log(row | {"trial": number}, step=number * (span + 1) + row["epoch"])

        lr = trial_cfg.optimizer.lr
        candidate = _candidate(trial_cfg, prepared, lr, run.folder, log=log)
        return _training(trial_cfg, prepared, runtime, tracker, identity), candidate

    def report(chosen: TrainedPoint, results: list[dict], metrics: dict, *, cfg: FinetuneConfig):
        # the trials are the report's ``search``, not an lr grid
        args = {"cfg": cfg, "prepared": prepared, "runtime": runtime, "identity": identity}
        return _report(chosen, [chosen.result], metrics, **args)

    return search.run_search(
        run,
        cfg,
        search_space(cfg),
        with_params=with_params,
        make_trial=make_trial,
        report=report,
        desc=f"finetune {cfg.strategy}",
        on_trial=lambda number, row: tracker.log(  # at the end of the trial's steps
            {"search": row}, step=number * (span + 1) + span
        ),
    )


def _epoch_span(cfg: FinetuneConfig) -> int:
    """The most epochs a trial trains: each trial's tracker steps start after the last's."""
    phases = ("head_epochs", "full_epochs")
    high = {k: max([getattr(cfg, k), *getattr(cfg.search, k)]) for k in phases}
    if cfg.search.strategy == "portfolio":  # a recipe may go past the ranges
        recipes = cfg.search.read_portfolio().recipes
        high = {k: max([high[k], *(r.get(k, 0) for r in recipes)]) for k in phases}
    return high["head_epochs"] + high["full_epochs"]


def _report(
    chosen: TrainedPoint,
    results: list[dict],
    metrics: dict,
    *,
    cfg: FinetuneConfig,
    prepared: PreparedData,
    runtime: Runtime,
    identity: str,
) -> tuple[dict, dict]:
    """The run's report body (the keys `core.runs` adds come first) and tracker summary."""
    result, source = chosen.result, chosen.source
    body = {
        "strategy": cfg.strategy,
        "pretrained": source["pretrained"],
        "pretraining_method": pretraining_name(cfg, source),
        **({"runs": source["runs"]} if "runs" in source else {}),
        "metrics": metrics,
        "learning_rate": chosen.lr,
        **({"lr_grid": [_grid_row(r) for r in results]} if len(results) > 1 else {}),
        # L2-SP's alpha, the grid point's when alphas were a grid (absent when off)
        **({"l2sp": chosen.result.get("l2sp", cfg.l2sp)} if cfg.l2sp_on else {}),
        "best_epoch": result["best_epoch"],
        BEST_VALI: result[BEST_VALI],
        "epochs_trained": result["epochs_trained"],
        "phases": [asdict(p) for p in cfg.phases()],
        "seconds_per_epoch": result["seconds_per_epoch"],
        "train_seconds_per_epoch": result["train_seconds_per_epoch"],
        "parameters": count_parameters(chosen.model),
        "labels": prepared.labels.summary(),
        "loss": asdict(cfg.loss),
        "device": runtime.describe(),
        "identity": identity,
        "history": result["history"],
    }
    return body, {"metrics": {"test": metrics["test"], "vali": metrics["vali"]}}


def grid_points(cfg: FinetuneConfig) -> list[tuple[float, float]]:
    """``(lr, l2sp alpha)`` of every model to train: each rate of ``lrs`` with each alpha of
    ``l2sp_grid`` (``optimizer.lr`` and ``l2sp`` where there is no grid)."""
    return [(lr, alpha) for lr in cfg.learning_rates() for alpha in cfg.l2sp_values()]


def _point_keys(cfg: FinetuneConfig, lr: float, l2sp: float) -> dict[str, float]:
    """The keys a grid point differs in from the others: ``lr`` in a grid of rates, ``l2sp`` in
    a grid of alphas (none for a single point)."""
    keys = {"lr": lr} if len(cfg.learning_rates()) > 1 else {}
    return keys | ({"l2sp": l2sp} if len(cfg.l2sp_values()) > 1 else {})


def _point_label(cfg: FinetuneConfig, lr: float, l2sp: float, *, sep: str = ",") -> str:
    """``lr=<rate>``, ``l2sp=<alpha>`` of `_point_keys`, joined by ``sep`` ('' alone)."""
    return sep.join(f"{key}={value:g}" for key, value in _point_keys(cfg, lr, l2sp).items())


def _point_folder(cfg: FinetuneConfig, out_dir: Path, lr: float, l2sp: float) -> Path:
    """The run directory itself for one point; ``grid/lr=<rate>/`` per rate for a grid
    (``grid/l2sp=<alpha>/``, ``grid/lr=<rate>,l2sp=<alpha>/`` with an L2-SP grid)."""
    label = _point_label(cfg, lr, l2sp)
    return GridPoint.within(out_dir, label).folder if label else out_dir


def _candidate(
    cfg: FinetuneConfig,
    prepared: PreparedData,
    lr: float,
    folder: Path | None,
    *,
    log: Callable[[dict], None],
    l2sp: float | None = None,
    encoder: Encoder | None = None,
) -> Candidate:
    """The rate ``lr`` (and L2-SP alpha ``l2sp``, default ``cfg.l2sp``) as a grid point: its
    model built fresh (pretrained encoder, new head), its epochs given to ``log``."""
    alpha = cfg.l2sp if l2sp is None else l2sp
    label = _point_label(cfg, lr, alpha, sep=" ")
    return Candidate(
        folder=folder,
        lr=lr,
        keys={"lr": lr} | _point_keys(cfg, lr, alpha),
        build=partial(_build, cfg, prepared, encoder),
        desc=f"finetune {cfg.strategy}{' ' + label if label else ''}",
        log=log,
        options=cfg.train_options(lr, alpha),
    )


def _grid_log(
    cfg: FinetuneConfig, lr: float, l2sp: float, tracker, index: int
) -> Callable[[dict], None]:
    """A point's epochs logged under its rate (and alpha), each point's steps after the
    previous point's."""
    label = _point_keys(cfg, lr, l2sp)
    epochs = sum(p.epochs for p in cfg.phases()) + 1
    return lambda row: tracker.log(row | label, step=index * epochs + row["epoch"])


def _build(
    cfg: FinetuneConfig, prepared: PreparedData, encoder: Encoder | None = None
) -> tuple[nn.Module, dict, dict]:
    """A fresh model (the pretrained encoder loaded again, a new head) and its source."""
    if cfg.strategy == "combine":
        model, spec, source = build_combined(cfg, prepared)
    else:
        model, spec, source = build_ranker(cfg, prepared, encoder)
    label_seed = cfg.scarcity.label_seed(cfg.seed)
    source |= {"label_setting": cfg.scarcity.tag, "seed": cfg.seed, "label_seed": label_seed}
    return model, spec, source


def pretraining_name(cfg: FinetuneConfig, source: dict) -> str | None:
    """The encoder's pretraining as its pretraining run's ``model`` and sweeps name it:
    ``simclr-rank``, ``simclr-rank@zero0.7`` (a sweep's variant), ``+``-joined over the members
    of ``combine``; None for a fresh encoder. A taught run's ``model`` adds ``~<teacher>``
    after the strategy, so the name comes from the encoder, not from the model."""
    if source["method"] is None:
        return None
    return cfg.encoder_name()


def _grid_row(result: dict) -> dict:
    keys = ("lr", "l2sp", BEST_VALI, "best_epoch", "epochs_trained")
    return {k: result[k] for k in keys if k in result}
