"""What a pretraining run tells: each epoch's line on stderr and its ``report.json``.

`log_epoch` prints an epoch's loss, speed, monitors, SSL-Val loss and ETA, and warns (and keeps
the warning for the report) when the embeddings look collapsed. `pretrain_report`, written after
every epoch (``finished: false``) and at the end, gathers the run's data, pretraining set, loss
curve, SSL-Val curve and choice, timings, parameter counts, monitors and `_diagnosis` (the random
encoder beside the one finetuning loads) from the training `Progress` (`pretrain.training_state`).
"""

from __future__ import annotations

import sys

from scarce_ltr.core.device import Runtime
from scarce_ltr.core.progress import duration
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.training_state import Progress


def log_epoch(
    cfg: PretrainConfig, stats: dict, progress: Progress, width: int, left: float
) -> None:
    line = (
        f"pretrain {cfg.method} epoch {stats['epoch']}/{cfg.n_epochs}: loss {stats['loss']:.4f}, "
        f"{stats['items_per_s']:,.0f} items/s"
    )
    monitor = stats.get("monitor", {})
    if monitor:
        line += f", effective rank {monitor['effective_rank']:.1f}/{width}"
        if "knn_ndcg@5" in monitor:
            line += f", knn-probe vali NDCG@5 {monitor['knn_ndcg@5']:.4f}"
    if "ssl_val_loss" in stats:
        line += f", SSL-Val loss {stats['ssl_val_loss']:.4f}"
    if stats["epoch"] < cfg.n_epochs:
        line += f", ETA {duration(left)}"
    print(line, file=sys.stderr, flush=True)
    if monitor.get("collapsed"):
        message = (
            f"epoch {stats['epoch']}: effective rank {monitor['effective_rank']:.1f} of "
            f"{width} dimensions; the embeddings may have collapsed (a falling loss does not "
            "show it); try another augmentation, a lower lr or simclr-rank"
        )
        print(f"warning: {message}", file=sys.stderr)
        progress.warnings.append(message)


def pretrain_report(
    cfg: PretrainConfig,
    split,
    objective,
    runtime: Runtime,
    progress: Progress,
    *,
    done: bool,
) -> dict:
    n_encoder = sum(p.numel() for p in objective.encoder.parameters())
    n_total = sum(p.numel() for p in objective.parameters())
    items = sum(h["items"] for h in progress.history)
    return {
        "method": cfg.method,
        "finished": done,
        "data": {
            "name": cfg.data.name,
            "transform": cfg.data.transform,
            "n_features": split.n_features,
        },
        "val_labels": cfg.scarcity.val,
        "pretraining_set": {
            "groups": split.n_groups,
            "items": split.n_items,
            "include_vali": cfg.include_vali,
        },
        "epochs": progress.epoch,
        "loss_curve": [h["loss"] for h in progress.history],
        "ssl_val": _ssl_val_report(cfg, progress),
        "seconds": progress.seconds,
        "items_per_s": items / max(progress.seconds, 1e-9),
        "parameters": {"encoder": n_encoder, "heads": n_total - n_encoder, "total": n_total},
        "monitor_initial": progress.initial,
        "knn_ndcg@5_raw": progress.raw_probe,
        "diagnosis": _diagnosis(cfg, progress),
        "history": progress.history,
        "warnings": progress.warnings,
        "device": runtime.describe(),
        "world_size": runtime.world_size,
        "wandb_id": progress.wandb_id,
    }


_DIAGNOSIS_KEYS = ("knn_ndcg@5", "effective_rank_vali", "effective_rank")


def _diagnosis(cfg: PretrainConfig, progress: Progress) -> dict | None:
    """What pretraining learned, side by side: the monitors of the randomly initialised encoder
    (same seed, before the first step) and of the encoder finetuning loads (the SSL-Val-chosen
    epoch, else the last measured one), and the k-NN probe on the input features."""
    if progress.initial is None:
        return None
    chosen = progress.choice.epoch if cfg.ssl_val != "none" else progress.epoch
    measured = [h for h in progress.history if "monitor" in h]
    at = [h for h in measured if h["epoch"] == chosen] or measured[-1:]
    encoder = at[0]["monitor"] if at else {}
    return {
        "random_init": {k: progress.initial[k] for k in _DIAGNOSIS_KEYS if k in progress.initial},
        "pretrained": {k: encoder[k] for k in _DIAGNOSIS_KEYS if k in encoder},
        "pretrained_epoch": at[0]["epoch"] if at else None,
        "knn_ndcg@5_raw": progress.raw_probe,
    }


def _ssl_val_report(cfg: PretrainConfig, progress: Progress) -> dict:
    """The criterion, its curve and the epoch ``encoder.pt`` holds."""
    curve = [h.get("ssl_val_loss") for h in progress.history]
    chosen = progress.choice.epoch if cfg.ssl_val != "none" else progress.epoch
    return {"criterion": cfg.ssl_val, "curve": curve, "chosen_epoch": chosen}
