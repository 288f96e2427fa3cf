"""``./run.sh baseline resnet|deepfm|dcnv2``: deep rankers without pretraining (paper 4.1.1).

- ``resnet``: the tabular ResNet of the pretrained rankers with the 3-layer MLP head, from random
  init, the whole network trained for 300 epochs; lr in {1e-2, 1e-3, 1e-4}.
- ``deepfm``: DeepFM (`baselines.deep.deepfm`); lr in {5e-2, 5e-3, 5e-4}.
- ``dcnv2``: DCNv2 (`baselines.deep.dcnv2`); lr in {5e-2, 5e-3, 5e-4} x cross layers in {2, 3, 4}.
- ``dasalc``: DASALC (`baselines.deep.dasalc`, qin2021): log1p inputs, Gaussian input noise,
  self-attention with latent cross, softmax loss (``configs/baseline/dasalc.yaml``).

Every grid point trains on the labeled train QGs with `finetune.loop.fit` (``deep.loss``, early
stopping on vali NDCG@5, the validation-best epoch kept) in a folder of its own,
``grid/<point>/``, which is skipped once done, so an interrupted grid resumes. The point with the
best vali NDCG@5 is then scored once on vali and test through `data.evaluation`; the run dir gets
its ``model.pt``, ``scores.npz``, bundle, ``report.json`` and ``DONE``. All of that is
`finetune.grid.run_grid`, the runner finetuning's ``lrs=[...]`` shares; this module says what
the grid holds, how each point's model is built and what the report adds.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.deep.config import DeepBaselineOptions
from scarce_ltr.baselines.deep.fields import FieldLayout, detect_fields
from scarce_ltr.baselines.deep.models import MODEL_KINDS, build_model
from scarce_ltr.core.device import Runtime, setup_runtime
from scarce_ltr.core.runs import GridPoint, Run
from scarce_ltr.data.evaluation import selection_rule
from scarce_ltr.data.pipeline import (
    PreparedData,
    prepare_data,
    require_labeled_vali,
    require_relevant_labels,
)
from scarce_ltr.finetune.config import Phase
from scarce_ltr.finetune.grid import RESULT_KEYS, Candidate, GridTraining, TrainedPoint, run_grid
from scarce_ltr.finetune.model import count_parameters, ranker_spec

# The deep baselines' point results (and reports) predate train_seconds_per_epoch.
_RESULT_KEYS = tuple(k for k in RESULT_KEYS if k != "train_seconds_per_epoch")


def grid(method: str, options: DeepBaselineOptions) -> list[dict]:
    """The grid points of a method: ``[{"lr": ...}, ...]`` (and ``cross_layers`` for dcnv2)."""
    if method == "dcnv2":
        combos = itertools.product(options.lrs, options.cross_layers)
        return [{"lr": lr, "cross_layers": c} for lr, c in combos]
    return [{"lr": lr} for lr in options.lrs]


def model_spec(
    method: str,
    point: dict,
    options: DeepBaselineOptions,
    *,
    n_features: int,
    layout: FieldLayout | None,
) -> dict:
    if method == "resnet":
        return ranker_spec(
            n_features=n_features,
            encoder=options.encoder,
            head=options.head,
            hidden=options.head_hidden,
            dropout=options.head_dropout,
        )
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


def main(cfg: BaselineConfig, run: Run) -> dict:
    options = cfg.deep
    runtime = setup_runtime(
        amp=options.amp,
        device=None if options.device == "auto" else options.device,
        cpu_amp=options.cpu_amp,
    )
    tracker = run.open_tracker(asdict(cfg))
    try:
        start = time.perf_counter()
        prepared = prepare_data(cfg)
        require_relevant_labels(prepared)
        require_labeled_vali(prepared)
        layout = None
        if cfg.method not in ("resnet", "dasalc"):  # the models with field embeddings
            layout = detect_fields(prepared.train.features, max_values=options.max_categories)
        training = GridTraining(
            cfg=cfg,
            prepared=prepared,
            runtime=runtime,
            phases=[Phase("full", options.epochs(cfg.epochs), True)],
            loss_fn=options.loss.build(),
            options=options.train_options,
            eval_item_budget=options.eval_item_budget,
            kinds=MODEL_KINDS,
            result_keys=_RESULT_KEYS,
        )
        candidates = [
            _candidate(cfg, point, run.folder, n_features=prepared.n_features, layout=layout)
            for point in grid(cfg.method, options)
        ]
        report = partial(
            _report, cfg=cfg, prepared=prepared, runtime=runtime, layout=layout, start=start
        )
        return run_grid(
            run,
            training,
            candidates,
            report=report,
            on_point=lambda i, result: tracker.log({"grid": result}, step=i),
        )
    finally:
        runtime.close()


def _candidate(
    cfg: BaselineConfig,
    point: dict,
    run_folder: Path,
    *,
    n_features: int,
    layout: FieldLayout | None,
) -> Candidate:
    """A grid point in ``grid/<point>/``, e.g. ``grid/lr=0.05,cross_layers=2/``."""
    name = ",".join(f"{k}={v:g}" for k, v in point.items())
    spec = model_spec(cfg.method, point, cfg.deep, n_features=n_features, layout=layout)
    source = {"pretrained": None, "method": cfg.method, "label_setting": cfg.scarcity.tag}
    return Candidate(
        folder=GridPoint.within(run_folder, name).folder,
        lr=point["lr"],
        keys={"name": name, **point},
        build=lambda: (build_model(spec), spec, source | {"seed": cfg.seed}),
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
