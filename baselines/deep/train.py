"""``./run.sh baseline resnet|deepfm|dcnv2``: deep rankers without pretraining (paper 4.1.1).

- ``resnet``: the tabular ResNet of the pretrained rankers with the 3-layer MLP head, from random
  init, the whole network trained for 300 epochs; lr in {1e-2, 1e-3, 1e-4}: finetuning's
  ``scratch+full`` (`finetuning`), its ranker built by `finetune.building.build_ranker`.
- ``deepfm``: DeepFM (`baselines.deep.deepfm`); lr in {5e-2, 5e-3, 5e-4}.
- ``dcnv2``: DCNv2 (`baselines.deep.dcnv2`); lr in {5e-2, 5e-3, 5e-4} x cross layers in {2, 3, 4}.
- ``dasalc``: DASALC (`baselines.deep.dasalc`, qin2021): log1p inputs, Gaussian input noise,
  self-attention with latent cross, softmax loss (``configs/baseline/dasalc.yaml``).

Every grid point trains on the labeled train QGs with `finetune.loop.fit` as finetuning trains
(`finetuning`: one whole-network phase, Adam at a constant rate, ``deep.loss``, early
stopping on vali NDCG@5, the validation-best epoch kept) in a folder of its own,
``grid/<point>/``, which is skipped once done, so an interrupted grid resumes. The point with the
best vali NDCG@5 is then scored once on vali and test through `data.evaluation`; the run dir gets
its ``model.pt``, ``scores.npz``, bundle, ``report.json`` and ``DONE``. All of that is
`finetune.grid.run_grid`, the runner finetuning's ``lrs=[...]`` shares; this module says what
the grid holds, how each point's model is built and what the report adds.

``deep.search.n_trials=N`` replaces the grid by a seeded Optuna search on vali
(`finetune.search`, the trees' budget): N trials in ``grid/trial=<k>/`` over lr, weight decay,
dropout, epochs, loss, input noise and width (and DCNv2's cross layers), the grid's points first.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import asdict, fields, replace
from functools import partial
from operator import attrgetter
from pathlib import Path

import numpy as np
from torch import nn

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.deep.config import DeepBaselineOptions
from scarce_ltr.baselines.deep.fields import FieldLayout, detect_fields
from scarce_ltr.baselines.deep.models import MODEL_KINDS, build_model
from scarce_ltr.core.device import Runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.data.evaluation import selection_rule
from scarce_ltr.data.pipeline import (
    PreparedData,
    prepare_data,
    prepare_splits,
    require_labeled_vali,
    require_relevant_labels,
)
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.finetune import search
from scarce_ltr.finetune.building import build_ranker
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.fitted import FinetunedRanker
from scarce_ltr.finetune.grid import (
    RESULT_KEYS,
    Candidate,
    GridTraining,
    TrainedPoint,
    run_grid,
    train_grid,
)
from scarce_ltr.finetune.model import count_parameters
from scarce_ltr.finetune.recipe import RankerRecipe
from scarce_ltr.finetune.search_space import Space
from scarce_ltr.search.trial_folders import GridPoint

# The deep baselines' point results (and reports) predate train_seconds_per_epoch.
_RESULT_KEYS = tuple(k for k in RESULT_KEYS if k != "train_seconds_per_epoch")


def grid(method: str, options: DeepBaselineOptions) -> list[dict]:
    """The grid points of a method: ``[{"lr": ...}, ...]`` (and ``cross_layers`` for dcnv2)."""
    if method == "dcnv2":
        combos = itertools.product(options.lrs, options.cross_layers)
        return [{"lr": lr, "cross_layers": c} for lr, c in combos]
    return [{"lr": lr} for lr in options.lrs]


def finetuning(cfg: BaselineConfig) -> FinetuneConfig:
    """The finetuning run a deep baseline's training is: ``./run.sh finetune full
    pretrained=none`` with the ``deep:`` section's recipe (`finetune.recipe.RankerRecipe`), one
    whole-network phase of ``deep.full_epochs`` (``head_epochs=0``, ``epochs=`` capping it) and
    ``deep.optimizer`` (Adam at a constant rate); its lr ``deep.lrs``. resnet's ranker is
    this run's too (`_candidate`); the others build their own model and train as it does."""
    deep = cfg.deep
    common = {f.name: getattr(cfg, f.name) for f in fields(CommonConfig)}
    recipe = {f.name: getattr(deep, f.name) for f in fields(RankerRecipe)}
    return FinetuneConfig(
        **common,
        **recipe,
        strategy="full",
        pretrained="none",
        head_epochs=0,
        full_epochs=deep.full_epochs,
        optimizer=replace(deep.optimizer, lr=deep.lrs[0]),
        teacher=cfg.teacher,
        teaching=cfg.teaching,
    )


def model_spec(
    method: str,
    point: dict,
    options: DeepBaselineOptions,
    *,
    n_features: int,
    layout: FieldLayout | None,
) -> dict:
    """The spec of a DeepFM, DCNv2 or DASALC model (`baselines.deep.models.MODEL_KINDS`)."""
    if method == "dasalc":
        return {
            "kind": method,
            "n_features": n_features,
            "hidden": options.hidden,
            "n_layers": options.n_layers,
            "attention_layers": options.attention_layers,
            "n_heads": options.n_heads,
            "dropout": options.dropout,
        }
    spec = {
        "kind": method,
        "layout": layout.to_dict(),
        "embedding_dim": options.embedding_dim,
        "hidden": options.hidden,
        "n_layers": options.n_layers,
        "dropout": options.dropout,
    }
    if method == "dcnv2":
        spec["cross_layers"] = point["cross_layers"]
    return spec


def main(cfg: BaselineConfig, run: Run) -> Outcome:
    options = cfg.deep
    runtime = options.runtime()
    tracker = run.open_tracker(asdict(cfg))
    try:
        start = time.perf_counter()
        prepared = prepare_data(cfg)
        require_relevant_labels(prepared)
        require_labeled_vali(prepared)
        layout = _layout(cfg, prepared)
        report = partial(
            _report, cfg=cfg, prepared=prepared, runtime=runtime, layout=layout, start=start
        )
        if options.search.on:
            return _search(run, cfg, prepared, runtime, tracker, layout=layout, report=report)
        return run_grid(
            run,
            _training(cfg, prepared, runtime),
            _candidates(cfg, prepared, run.folder, layout),
            report=report,
            on_point=lambda i, result: tracker.log({"grid": result}, step=i),
        )
    finally:
        runtime.close()


def fit(
    cfg: BaselineConfig,
    splits: Mapping[str, RankingSplit],
    *,
    labeled: np.ndarray | None = None,
    run: Run | None = None,
) -> FinetunedRanker:
    """`main`'s grid on in-memory splits (`baselines.run.fit`): every point trained, the
    vali-best returned, nothing scored on test; no file written unless ``run`` is given (each
    point's checkpoint and ``model.pt`` in its ``grid/<point>/``, an interrupted fit resumed).
    ``teacher=`` still names a finished run (its train scores are read from its folder)."""
    options = cfg.deep
    if options.search.on:
        raise UserError(
            "deep.search.n_trials: a search keeps its trials and study as a run's files; run "
            f"./run.sh baseline {cfg.method} (fit trains the grid of deep.lrs)"
        )
    runtime = options.runtime()
    try:
        prepared = prepare_splits(cfg, splits, labeled=labeled)
        require_relevant_labels(prepared)
        require_labeled_vali(prepared)
        folder = None if run is None else run.folder
        candidates = _candidates(cfg, prepared, folder, _layout(cfg, prepared))
        chosen = train_grid(folder, _training(cfg, prepared, runtime), candidates)[0]
        return FinetunedRanker(chosen.model, chosen.spec, prepared, options.eval_item_budget,
                               chosen.result, chosen.source)  # fmt: skip
    finally:
        runtime.close()


def _layout(cfg: BaselineConfig, prepared: PreparedData) -> FieldLayout | None:
    """The categorical fields of the models with field embeddings (DeepFM, DCNv2)."""
    if cfg.method in ("resnet", "dasalc"):
        return None
    return detect_fields(prepared.train.features, max_values=cfg.deep.max_categories)


def _candidates(
    cfg: BaselineConfig, prepared: PreparedData, folder: Path | None, layout: FieldLayout | None
) -> list[Candidate]:
    return [
        _candidate(cfg, point, folder, prepared=prepared, layout=layout)
        for point in grid(cfg.method, cfg.deep)
    ]


def _training(cfg: BaselineConfig, prepared: PreparedData, runtime: Runtime) -> GridTraining:
    """The grid's training: `finetuning`'s phase, loss and options at each point's rate."""
    recipe = finetuning(cfg)
    return GridTraining(
        cfg=cfg,
        prepared=prepared,
        runtime=runtime,
        phases=recipe.phases(),
        loss_fn=recipe.loss.build(),
        options=recipe.train_options,
        eval_item_budget=recipe.eval_item_budget,
        kinds=MODEL_KINDS,
        result_keys=_RESULT_KEYS,
    )


SEARCH_KEYS = ("lr", "weight_decay", "dropout", "full_epochs", "loss", "noise_std", "head_hidden")
# The search's names for a deep baseline's keys: resnet's head is finetuning's, the others
# have one dropout and one width; the weight decay is the optimizer's.
WEIGHT_DECAY = "optimizer.weight_decay"
_NAMES = {"weight_decay": WEIGHT_DECAY, "full_epochs": "full_epochs", "noise_std": "noise_std"}
_RESNET_NAMES = _NAMES | {"dropout": "head_dropout", "head_hidden": "head_hidden"}
_OTHER_NAMES = _NAMES | {"dropout": "dropout", "head_hidden": "hidden"}


def search_space(method: str, options: DeepBaselineOptions) -> Space:
    """The searched keys of ``deep.search``; the grid's points are the first trials."""
    names = _RESNET_NAMES if method == "resnet" else _OTHER_NAMES
    recipe = {key: attrgetter(name)(options) for key, name in names.items()}
    recipe["loss"] = options.loss.name
    fixed = [recipe | point for point in grid(method, options)]
    choices = {"cross_layers": options.cross_layers} if method == "dcnv2" else {}
    return Space.of(options.search, SEARCH_KEYS, fixed=fixed, choices=choices)


def with_params(cfg: BaselineConfig, params: dict) -> BaselineConfig:
    """``cfg`` with a trial's params as its one grid point (validated again)."""
    options = cfg.deep
    names = _RESNET_NAMES if cfg.method == "resnet" else _OTHER_NAMES
    changes = {names[k]: v for k, v in params.items() if k in names}
    if cfg.method == "dasalc" and "hidden" in changes:  # attention heads split the width
        changes["hidden"] = max(
            options.n_heads, changes["hidden"] // options.n_heads * options.n_heads
        )
    if WEIGHT_DECAY in changes:
        decay = changes.pop(WEIGHT_DECAY)
        changes["optimizer"] = replace(options.optimizer, weight_decay=decay)
    if "loss" in params:
        changes["loss"] = replace(options.loss, name=params["loss"])
    changes["lrs"] = [params.get("lr", options.lrs[0])]
    if "cross_layers" in params:
        changes["cross_layers"] = [params["cross_layers"]]
    return replace(cfg, deep=replace(options, **changes))


def _search(
    run: Run,
    cfg: BaselineConfig,
    prepared: PreparedData,
    runtime: Runtime,
    tracker,
    *,
    layout: FieldLayout | None,
    report,
) -> Outcome:
    """``deep.search.n_trials`` trials of `finetune.search`; the vali-best scores test once."""

    def make_trial(number: int, trial_cfg: BaselineConfig) -> tuple[GridTraining, Candidate]:
        point = {"lr": trial_cfg.deep.lrs[0]}
        if cfg.method == "dcnv2":
            point["cross_layers"] = trial_cfg.deep.cross_layers[0]
        candidate = _candidate(trial_cfg, point, run.folder, prepared=prepared, layout=layout)
        return _training(trial_cfg, prepared, runtime), candidate

    return search.run_search(
        run,
        cfg,
        search_space(cfg.method, cfg.deep),
        with_params=with_params,
        make_trial=make_trial,
        report=report,
        desc=cfg.method,
        on_trial=lambda number, row: tracker.log({"grid": row}, step=number),
    )


def _candidate(
    cfg: BaselineConfig,
    point: dict,
    run_folder: Path | None,
    *,
    prepared: PreparedData,
    layout: FieldLayout | None,
) -> Candidate:
    """A grid point in ``grid/<point>/``, e.g. ``grid/lr=0.05,cross_layers=2/`` (no folder
    without ``run_folder``: in memory). resnet's model is `finetuning`'s ranker on a fresh
    encoder (which may learn from the train items when built: piecewise-linear bins)."""
    name = ",".join(f"{k}={v:g}" for k, v in point.items())
    source = {"pretrained": None, "method": cfg.method, "label_setting": cfg.scarcity.tag}

    def build() -> tuple[nn.Module, dict, dict]:
        if cfg.method == "resnet":
            model, spec, _ = build_ranker(finetuning(cfg), prepared)
        else:
            n_features = prepared.n_features
            spec = model_spec(cfg.method, point, cfg.deep, n_features=n_features, layout=layout)
            model = build_model(spec)
        return model, spec, source | {"seed": cfg.seed}

    return Candidate(
        folder=None if run_folder is None else GridPoint.within(run_folder, name).folder,
        lr=point["lr"],
        keys={"name": name, **point},
        build=build,
        desc=f"{cfg.method} {name}",
    )


def _report(
    chosen: TrainedPoint,
    results: list[dict],
    metrics: dict,
    *,
    cfg: BaselineConfig,
    prepared: PreparedData,
    runtime: Runtime,
    layout: FieldLayout | None,
    start: float,
) -> tuple[dict, dict]:
    """The run's report body (the keys `core.runs` adds come first) and tracker summary."""
    selected = chosen.result
    body = {
        "method": cfg.method,
        "metrics": metrics,
        "selected": selected,
        "grid": results,
        "selection": selection_rule(cfg.metrics),
        "labels": prepared.labels.summary(),
        "best_epoch": selected["best_epoch"],
        "seconds_per_epoch": selected["seconds_per_epoch"],
        "parameters": count_parameters(chosen.model),
        "categorical_features": list(layout.categorical) if layout else None,
        "device": runtime.describe(),
        "seconds": round(time.perf_counter() - start, 3),
    }
    return body, {"metrics": metrics, "selected": selected}
