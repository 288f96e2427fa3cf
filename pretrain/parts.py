"""Pretraining's parts around its epochs: the objective and optimizer built, the SSL-Val set,
the items held on the device, and the SSL-Val-chosen encoder at the end (kept in memory as an
`Encoder`, written as ``encoder.pt`` for a run)."""

from __future__ import annotations

import sys

import torch

from scarce_ltr.core.collectives import sync_batchnorm
from scarce_ltr.core.device import Runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.optim import make_optimizer
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.data.batching import DeviceSplit
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.pretrain.checkpoint import Encoder
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.objectives import OBJECTIVES, build_objective
from scarce_ltr.pretrain.objectives.base import Objective
from scarce_ltr.pretrain.ssl_val import SslVal, ssl_val_split
from scarce_ltr.pretrain.training_state import Progress


def build(cfg: PretrainConfig, split: RankingSplit, runtime: Runtime):
    """The objective (encoder + heads) on the device, and its Adam optimizer. The pretraining
    items are the data piecewise-linear embeddings take their bins from."""
    try:
        objective = build_objective(cfg, n_features=split.n_features, features=split.features)
    except ValueError as exc:
        raise UserError(f"pretrain {cfg.method}: {exc}") from None
    if objective.sync_batchnorm:
        objective = sync_batchnorm(objective, runtime.device)
    objective.to(runtime.device)
    optimizer = make_optimizer(
        objective.parameters(),
        name=cfg.optimizer.name,
        lr=cfg.optimizer.lr,
        weight_decay=cfg.optimizer.weight_decay,
    )
    return objective, optimizer


def ssl_val(cfg: PretrainConfig, prepared) -> SslVal | None:
    if cfg.ssl_val == "none":
        return None
    return SslVal(
        ssl_val_split(prepared, method=cfg.method),
        item_budget=cfg.item_budget,
        max_list_len=cfg.max_list_len,
        seed=cfg.seed,
        fake_groups=OBJECTIVES[cfg.method].fake_groups,
    )


def device_split(split: RankingSplit, cfg: PretrainConfig, runtime: Runtime):
    """The pretraining items held on the training device, for batches gathered there
    (``gather_on_device``; null: on CUDA when they take at most a quarter of its memory), or
    None: batches collated on the host, as for methods that regroup the items every epoch."""
    if cfg.gather_on_device is False or OBJECTIVES[cfg.method].fake_groups:
        return None
    if cfg.gather_on_device is None:
        if runtime.device.type != "cuda":
            return None
        total = torch.cuda.get_device_properties(runtime.device).total_memory
        if DeviceSplit.nbytes(split) > total // 4:
            return None
    return DeviceSplit.of(split, runtime.device)


def chosen_encoder(
    cfg: PretrainConfig, objective: Objective, progress: Progress, *, n_features: int
) -> Encoder:
    """The encoder finetuning takes: the SSL-Val-best epoch's weights, not the last one's (the
    last's where SSL Val is off), loaded into ``objective.encoder``."""
    if cfg.ssl_val != "none" and progress.choice.state is not None:
        objective.encoder.load_state_dict(progress.choice.state)
        print(
            f"pretrain: encoder of epoch {progress.choice.epoch} (lowest SSL-Val loss "
            f"{progress.choice.loss:.4f}) of {progress.epoch}",
            file=sys.stderr,
        )
    return Encoder.of(
        objective.encoder, method=cfg.method, n_features=n_features,
        config=cfg.encoder, data={"name": cfg.data.name, "transform": cfg.data.transform},
        epochs=progress.epoch,
    )  # fmt: skip


def save_chosen(run: Run, encoder: Encoder, progress: Progress, report: dict) -> Outcome:
    """``encoder.pt`` in ``run``'s folder; the run's outcome (its report and tracker summary)."""
    encoder.save(run.folder)
    last = progress.history[-1].get("monitor", {}) if progress.history else {}
    loss = report["loss_curve"][-1] if report["loss_curve"] else None
    print(f"pretrain: wrote {run.folder / 'encoder.pt'}", file=sys.stderr)
    return Outcome(report, {"loss": loss, **last})
