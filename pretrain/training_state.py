"""``checkpoint.pt`` of pretraining: the training state an interrupted run resumes from.

Format (a dict read with ``torch.load(..., weights_only=True)``)::

    {"method": str, "n_features": int, "encoder_config": dict, "epoch": int,
     "model": objective weights, "optimizer": its state, "scheduler": None, "rng": random states,
     "history": [per-epoch stats], "monitor_initial": dict | None, "knn_ndcg@5_raw": float | None,
     "wandb_id": str | None, "seconds": float, "warnings": [str], "ssl_val_choice": dict}

`save_training_state` writes it after every epoch (`pretrain.train`); `resume_training_state`
loads weights, optimizer and random states back and returns the `Progress` it held, refusing a
checkpoint of another method, feature count or encoder with one `UserError`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.checkpointing import (
    load_checkpoint,
    load_module_state,
    require_keys,
    save_checkpoint,
)
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.seeding import capture_rng_state, restore_rng_state
from scarce_ltr.core.training import Position
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.ssl_val import Choice

_CHECKPOINT_KEYS = ("method", "n_features", "encoder_config", "epoch", "model", "optimizer")


@dataclass
class Progress(Position):
    """What the training checkpoint carries besides weights and optimizer state (its
    ``epoch``: one phase, so ``phase_epoch`` is the same)."""

    history: list = field(default_factory=list)
    initial: dict | None = None
    raw_probe: float | None = None
    wandb_id: str | None = None
    seconds: float = 0.0
    warnings: list = field(default_factory=list)
    choice: Choice = field(default_factory=Choice)  # the SSL-Val-best epoch and its encoder


def resume_training_state(
    path: Path, objective, optimizer, cfg: PretrainConfig, n_features: int
) -> Progress:
    """What ``path`` held (a fresh `Progress` when there is none), its weights, optimizer and
    random states loaded."""
    if not path.is_file():
        return Progress()
    state = load_checkpoint(path, what="training checkpoint")
    require_keys(state, _CHECKPOINT_KEYS, path=path, what="pretraining checkpoint")
    found = {
        "method": (state["method"], cfg.method),
        "feature count": (state["n_features"], n_features),
        "encoder": (state["encoder_config"], cfg.encoder.to_dict()),
    }
    for what, (stored, wanted) in found.items():
        if stored != wanted:
            raise UserError(
                f"{path}: the checkpoint's {what} is {stored}, this run's is {wanted}; "
                "use another run_dir or delete the checkpoint to start over"
            )
    load_module_state(objective, state["model"], path=path, what="the checkpoint's model")
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: the optimizer state does not fit ({exc})") from None
    if "rng" in state:
        restore_rng_state(state["rng"])
    print(f"pretrain: resuming {path.parent} after epoch {state['epoch']}", file=sys.stderr)
    return Progress(
        epoch=int(state["epoch"]),
        phase_epoch=int(state["epoch"]),
        history=list(state.get("history", [])),
        initial=state.get("monitor_initial"),
        raw_probe=state.get("knn_ndcg@5_raw"),
        wandb_id=state.get("wandb_id"),
        seconds=float(state.get("seconds", 0.0)),
        warnings=list(state.get("warnings", [])),
        choice=Choice.from_state(state.get("ssl_val_choice")),
    )


def save_training_state(
    path, objective, optimizer, cfg: PretrainConfig, split, progress: Progress
) -> None:
    save_checkpoint(
        path,
        {
            "method": cfg.method,
            "n_features": split.n_features,
            "encoder_config": cfg.encoder.to_dict(),
            "epoch": progress.epoch,
            "model": objective.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": None,
            "rng": capture_rng_state(),
            "history": progress.history,
            "monitor_initial": progress.initial,
            "knn_ndcg@5_raw": progress.raw_probe,
            "wandb_id": progress.wandb_id,
            "seconds": progress.seconds,
            "warnings": progress.warnings,
            "ssl_val_choice": progress.choice.to_state(),
        },
    )
