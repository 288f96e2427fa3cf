"""``./run.sh finetune lp|mp|full|combine pretrained=<run dir>|none [key=value ...]``.

Builds the model (a pretrained or fresh encoder with a scoring head, or a combination of
finetuned runs), trains it on the labeled train QGs of the scarcity setting with
`finetune.loop.fit` (model selection on vali NDCG@5, early stopping, per-epoch checkpoint), then
scores vali and test once with the validation-best model through `data.evaluation`. The run
directory gets ``report.json``, ``scores.npz``, ``model.pt`` (the whole model, for ``combine``),
``checkpoint.pt`` and ``DONE``. A finished run is skipped; a run directory that holds a run of
other settings is refused rather than overwritten or resumed.

``lrs=[...]`` trains one model per learning rate, each in ``grid/lr=<rate>/`` with its own
checkpoint (a finished rate is not redone after an interruption), from the same seed; the rate
whose model has the best vali NDCG@5 is kept, and test is scored once, by that model.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from torch import nn

from scarce_ltr.core.checkpointing import load_checkpoint
from scarce_ltr.core.device import setup_runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import SOURCE_KEYS, GridPoint, Run, is_done, read_report, sources_moved
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
from scarce_ltr.finetune.combine import build_combined
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.heads import build_head
from scarce_ltr.finetune.loop import CHECKPOINT, fit, predict
from scarce_ltr.finetune.model import (
    MODEL_FILE,
    Ranker,
    count_parameters,
    load_model,
    ranker_spec,
    save_model,
    torch_bundle,
)
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

# Keys that change nothing a run computes: a run may resume or be skipped whatever they say.
_INERT_KEYS = ("logger", "run_dir", "device", "amp", "eval_item_budget")


def main(cfg: FinetuneConfig, out_dir: Path) -> dict | None:
    """Finetune as ``cfg`` says in ``out_dir``; the report, or None when it was done before."""
    identity = run_identity(cfg)
    run = Run.of(cfg, cfg.identity(), out_dir)
    if run.done:
        _check_identity(out_dir, (read_report(out_dir) or {}).get("identity"), identity)
        print(f"{out_dir}: finished before (DONE present); skipped", file=sys.stderr)
        return None
    folders = {lr: _point_folder(cfg, out_dir, lr) for lr in cfg.learning_rates()}
    metas = [_checkpoint_meta(folder / CHECKPOINT) for folder in folders.values()]
    for meta in filter(None, metas):
        _check_identity(out_dir, meta.get("identity"), identity)
    wandb_id = next((m["wandb_id"] for m in metas if m.get("wandb_id")), None)
    seed_everything(cfg.seed)
    runtime = setup_runtime(
        amp=cfg.amp, device=None if cfg.device == "auto" else cfg.device, cpu_amp=cfg.cpu_amp
    )
    try:
        prepared = prepare_data(cfg)
        require_relevant_labels(prepared)
        require_labeled_vali(prepared)
        tracker = run.open_tracker(asdict(cfg), run_id=wandb_id)
        points = [
            _fit_point(cfg, prepared, lr, folder, runtime, tracker, identity, index=i)
            for i, (lr, folder) in enumerate(folders.items())
        ]
        chosen = max(points, key=lambda p: nan_low(p.result["best_vali_ndcg@5"]))  # first of ties
        model, source = chosen.model, chosen.source
        model.to(runtime.device)
        budget = cfg.eval_item_budget
        vali = predict(model, prepared.vali, runtime=runtime, item_budget=budget)
        test = predict(model, prepared.test, runtime=runtime, item_budget=budget)
        metrics = evaluation_report(prepared, vali, test, cfg.metrics)
        save_scores(out_dir, prepared, vali, test)
        if chosen.folder != out_dir:
            shutil.copyfile(chosen.folder / MODEL_FILE, out_dir / MODEL_FILE)
        result = chosen.result
        report = {
            "strategy": cfg.strategy,
            "pretrained": source["pretrained"],
            "pretraining_method": pretraining_name(cfg, source),
            **({"runs": source["runs"]} if "runs" in source else {}),
            "metrics": metrics,
            "learning_rate": chosen.lr,
            **({"lr_grid": [_grid_row(p) for p in points]} if len(points) > 1 else {}),
            "best_epoch": result["best_epoch"],
            "best_vali_ndcg@5": result["best_vali_ndcg@5"],
            "epochs_trained": result["epochs_trained"],
            "phases": [asdict(p) for p in cfg.phases()],
            "seconds_per_epoch": result["seconds_per_epoch"],
            "train_seconds_per_epoch": result["train_seconds_per_epoch"],
            "parameters": count_parameters(model),
            "labels": prepared.labels.summary(),
            "loss": asdict(cfg.loss),
            "device": runtime.describe(),
            "identity": identity,
            "history": result["history"],
        }
        write_run_bundle(run, prepared, metrics, *torch_bundle(model, chosen.spec, budget))
        summary = {"metrics": {"test": metrics["test"], "vali": metrics["vali"]}}
        return run.finish(report, summary=summary)
    finally:
        run.close()
        runtime.close()


@dataclass
class _Point:
    """One learning rate's training: its folder, result and validation-best model."""

    lr: float
    folder: Path
    result: dict
    model: nn.Module
    source: dict
    spec: dict


def _point_folder(cfg: FinetuneConfig, out_dir: Path, lr: float) -> Path:
    """The run directory itself for one rate; ``grid/lr=<rate>/`` per rate for a grid."""
    if len(cfg.learning_rates()) == 1:
        return out_dir
    return GridPoint.within(out_dir, f"lr={lr:g}").folder


def _fit_point(
    cfg: FinetuneConfig,
    prepared: PreparedData,
    lr: float,
    folder: Path,
    runtime,
    tracker,
    identity: str,
    *,
    index: int,
) -> _Point:
    """Train at ``lr`` in ``folder`` (a grid point finished before is read back, not redone)."""
    point = GridPoint(folder)
    if is_done(folder):  # a grid point (a finished run itself never gets here)
        result = point.result()
        model, payload = load_model(folder)
        return _Point(lr, folder, result, model, payload["source"], payload["spec"])
    seed_everything(cfg.seed)  # every rate starts from the same model and data order
    if cfg.strategy == "combine":
        model, spec, source = build_combined(cfg, prepared)
    else:
        model, spec, source = build_ranker(cfg, prepared)
    label_seed = cfg.scarcity.label_seed(cfg.seed)
    source |= {"label_setting": cfg.scarcity.tag, "seed": cfg.seed, "label_seed": label_seed}
    folder.mkdir(parents=True, exist_ok=True)
    epochs = sum(p.epochs for p in cfg.phases()) + 1
    label = {"lr": lr} if len(cfg.learning_rates()) > 1 else {}
    fitted = fit(
        model,
        prepared,
        phases=cfg.phases(),
        loss_fn=cfg.loss.build(),
        options=cfg.train_options(lr),
        metrics_cfg=cfg.metrics,
        runtime=runtime,
        seed=cfg.seed,
        checkpoint=folder / CHECKPOINT,
        log=lambda row: tracker.log(row | label, step=index * epochs + row["epoch"]),
        meta={"identity": identity, "wandb_id": tracker.run_id},
        desc=f"finetune {cfg.strategy}" + (f" lr={lr:g}" if label else ""),
    )
    data = {"name": cfg.data.name, "transform": cfg.data.transform}
    data["n_features"] = prepared.n_features
    save_model(folder, model, spec=spec, data=data, source=source)
    result = {
        "lr": lr,
        "best_vali_ndcg@5": fitted.best_vali,
        "best_epoch": fitted.best_epoch,
        "epochs_trained": fitted.epochs,
        "seconds_per_epoch": fitted.seconds_per_epoch,
        "train_seconds_per_epoch": fitted.train_seconds_per_epoch,
        "history": fitted.history,
    }
    if label:  # a grid point: done on its own, so an interrupted grid resumes after it
        point.finish(result | {"identity": identity})
    return _Point(lr, folder, result, model, source, spec)


def pretraining_name(cfg: FinetuneConfig, source: dict) -> str | None:
    """The encoder's pretraining as its pretraining run's ``model`` and sweeps name it:
    ``simclr-rank``, ``simclr-rank@zero0.7`` (a sweep's variant), ``+``-joined over the members
    of ``combine``; None for a fresh encoder. The run's ``model`` is this ``+<strategy>``."""
    if source["method"] is None:
        return None
    return cfg.identity().model.removesuffix(f"+{cfg.strategy}")


def _grid_row(point: _Point) -> dict:
    keys = ("lr", "best_vali_ndcg@5", "best_epoch", "epochs_trained")
    return {k: point.result[k] for k in keys}


def build_ranker(cfg: FinetuneConfig, prepared: PreparedData) -> tuple[Ranker, dict, dict]:
    """``(model, spec, source)``: the encoder (pretrained or fresh) with a new head."""
    if cfg.from_scratch:
        encoder_cfg = cfg.encoder
        encoder = build_encoder(encoder_cfg, n_features=prepared.n_features)
        source: dict = {"pretrained": None, "method": None}
    else:
        encoder, encoder_cfg, source = load_pretrained(cfg, prepared)
    head = build_head(
        cfg.head, in_dim=encoder.out_dim, hidden=cfg.head_hidden, dropout=cfg.head_dropout
    )
    spec = ranker_spec(
        n_features=prepared.n_features,
        encoder=encoder_cfg,
        head=cfg.head,
        hidden=cfg.head_hidden,
        dropout=cfg.head_dropout,
    )
    return Ranker(encoder=encoder, head=head), spec, source


def load_pretrained(cfg: FinetuneConfig, prepared: PreparedData):
    """The pretrained encoder of ``cfg.pretrained``, checked against the data."""
    from scarce_ltr.pretrain.checkpoint import load_pretrained_encoder

    path = Path(cfg.pretrained)
    encoder, info = load_pretrained_encoder(path)
    if info["n_features"] != prepared.n_features:
        raise UserError(
            f"pretrained={cfg.pretrained}: the encoder takes {info['n_features']} features; "
            f"data {cfg.data.name} has {prepared.n_features}"
        )
    encoder_cfg = info["encoder_config"]
    if cfg.encoder not in (EncoderConfig(), encoder_cfg):
        raise UserError(
            f"encoder.* keys were set, but the encoder comes from pretrained={cfg.pretrained} "
            f"({encoder_cfg}); leave them out, or use pretrained=none"
        )
    data = info.get("data", {})
    if data.get("transform") not in (None, cfg.data.transform):
        print(
            f"warning: the encoder was pretrained on features with transform "
            f"{data.get('transform')}; this run uses {cfg.data.transform}",
            file=sys.stderr,
        )
    source = {"pretrained": str(path.resolve()), "method": info.get("method")}
    return encoder, encoder_cfg, source


def run_identity(cfg: FinetuneConfig) -> str:
    """The settings that make a run what it is, as one JSON string."""
    settings = asdict(cfg)
    for key in _INERT_KEYS:
        settings.pop(key, None)
    if not cfg.from_scratch:
        settings["pretrained"] = str(Path(cfg.pretrained).resolve())
    settings["runs"] = [str(Path(r).resolve()) for r in cfg.runs]
    return json.dumps(settings, sort_keys=True, default=str)


def _check_identity(out_dir: Path, found: str | None, expected: str) -> None:
    if found is not None and found != expected:
        old, new = _data_path_resolved(json.loads(found)), json.loads(expected)
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if not keys:  # the data folder spelled otherwise by an earlier version
            return
        if all(k in SOURCE_KEYS and sources_moved(old.get(k), new.get(k)) for k in keys):
            # The runs it was finetuned from have moved (a copied or moved runs/ tree): the
            # same settings otherwise, so it is the same run.
            print(f"{out_dir}: its {' and '.join(keys)} moved; resuming there", file=sys.stderr)
            return
        raise UserError(
            f"{out_dir} holds a finetuning run with other settings ({', '.join(keys)} differ); "
            "pass run_dir=<new folder>, or delete that folder to start over"
        )


def _data_path_resolved(settings: dict) -> dict:
    """A checkpoint of an earlier version stored ``data.path`` as typed (relative, with a
    trailing ``/``); configs store it absolute now: the same folder is the same setting."""
    data = settings.get("data")
    if isinstance(data, dict) and data.get("path"):
        data["path"] = str(Path(str(data["path"])).expanduser().resolve())
    return settings


def _checkpoint_meta(path: Path) -> dict:
    if not path.is_file():
        return {}
    return load_checkpoint(path, what="finetuning checkpoint").get("meta") or {}
