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
its ``model.pt``, ``scores.npz``, ``report.json`` and ``DONE``.
"""

from __future__ import annotations

import itertools
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.deep.config import DeepBaselineOptions
from scarce_ltr.baselines.deep.fields import FieldLayout, detect_fields
from scarce_ltr.baselines.deep.models import build_model, load_model
from scarce_ltr.core.device import Runtime, setup_runtime
from scarce_ltr.core.runs import GridPoint, Run
from scarce_ltr.core.seeding import seed_everything
from scarce_ltr.core.selection import nan_low
from scarce_ltr.data.bundling import write_run_bundle
from scarce_ltr.data.evaluation import evaluation_report, save_scores
from scarce_ltr.data.pipeline import (
    PreparedData,
    prepare_data,
    require_labeled_vali,
    require_relevant_labels,
)
from scarce_ltr.finetune.config import Phase
from scarce_ltr.finetune.loop import CHECKPOINT, fit, predict
from scarce_ltr.finetune.model import MODEL_FILE, count_parameters, ranker_spec, torch_bundle
from scarce_ltr.finetune.model import save_model as save_model_file


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
    out_dir = run.folder
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
        results = []
        for i, point in enumerate(grid(cfg.method, options)):
            spec = model_spec(
                cfg.method, point, options, n_features=prepared.n_features, layout=layout
            )
            result = _fit_point(cfg, prepared, point, spec, out_dir, runtime)
            tracker.log({"grid": result}, step=i)
            results.append(result)
        chosen = max(results, key=lambda r: nan_low(r["best_vali_ndcg@5"]))  # first of ties
        chosen_folder = GridPoint.within(out_dir, chosen["name"]).folder
        model, payload = load_model(chosen_folder)
        model.to(runtime.device)
        budget = options.eval_item_budget
        vali = predict(model, prepared.vali, runtime=runtime, item_budget=budget)
        test = predict(model, prepared.test, runtime=runtime, item_budget=budget)
        report = {
            "method": cfg.method,
            "metrics": evaluation_report(prepared, vali, test, cfg.metrics),
            "selected": chosen,
            "grid": results,
            "selection": f"vali ndcg@5, policy {cfg.metrics.policy}",
            "labels": prepared.labels.summary(),
            "best_epoch": chosen["best_epoch"],
            "seconds_per_epoch": chosen["seconds_per_epoch"],
            "parameters": count_parameters(model),
            "categorical_features": list(layout.categorical) if layout else None,
            "device": runtime.describe(),
            "seconds": round(time.perf_counter() - start, 3),
        }
        save_scores(out_dir, prepared, vali, test)
        shutil.copyfile(chosen_folder / MODEL_FILE, out_dir / MODEL_FILE)
        metrics = report["metrics"]
        write_run_bundle(run, prepared, metrics, *torch_bundle(model, payload["spec"], budget))
        return run.finish(report, summary={"metrics": report["metrics"], "selected": chosen})
    finally:
        runtime.close()


def _fit_point(
    cfg: BaselineConfig,
    prepared: PreparedData,
    point: dict,
    spec: dict,
    out_dir: Path,
    runtime: Runtime,
) -> dict:
    """Train one grid point in ``grid/<point>/`` (or read its result when done)."""
    name = ",".join(f"{k}={v:g}" for k, v in point.items())
    grid_point = GridPoint.within(out_dir, name)
    folder = grid_point.folder
    finished = grid_point.result()
    if finished is not None:
        return finished
    folder.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)  # every point starts from the same seed, whatever ran before
    model = build_model(spec)
    options = cfg.deep
    result = fit(
        model,
        prepared,
        phases=[Phase("full", options.epochs(cfg.epochs), True)],
        loss_fn=options.loss.build(),
        options=options.train_options(point["lr"]),
        metrics_cfg=cfg.metrics,
        runtime=runtime,
        seed=cfg.seed,
        checkpoint=folder / CHECKPOINT,
        desc=f"{cfg.method} {name}",
    )
    data = {"name": cfg.data.name, "transform": cfg.data.transform}
    data["n_features"] = prepared.n_features
    source = {"pretrained": None, "method": cfg.method, "label_setting": cfg.scarcity.tag}
    save_model_file(folder, model, spec=spec, data=data, source=source | {"seed": cfg.seed})
    summary = {
        "name": name,
        **point,
        "best_vali_ndcg@5": result.best_vali,
        "best_epoch": result.best_epoch,
        "epochs_trained": result.epochs,
        "seconds_per_epoch": result.seconds_per_epoch,
        "history": result.history,  # vali NDCG@5 and loss per epoch: the dashboard's curves
    }
    grid_point.finish(summary)
    return summary
