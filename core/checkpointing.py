"""Training checkpoints: written atomically, read with ``weights_only=True``.

A checkpoint is a dict of tensors and plain containers (dict, list, tuple, str, int, float, bool,
None), so ``torch.load(..., weights_only=True)`` reads it without running pickled code. It is
serialised into memory and written with a temp file and a rename, so a process killed while
saving leaves the previous checkpoint intact. Random-number states are stored as tensors
(`scarce_ltr.core.seeding.capture_rng_state`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_bytes


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Serialise ``state`` in memory, then write it atomically to ``path``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(Path(path), buffer.getvalue())


def load_checkpoint(
    path: Path, *, what: str = "checkpoint", advice: str | None = None
) -> dict[str, Any]:
    """A checkpoint written by `save_checkpoint`; `UserError` when it cannot be read, ending in
    ``advice`` (what to do that works: the default suits a training checkpoint, whose run
    starts that part over without it)."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except Exception as exc:  # torch raises many types for truncated or foreign files
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        reason = reason.split(". ")[0]  # torch appends paragraphs of advice that do not apply
        advice = advice or "delete it and run the same command again: the run starts over"
        raise UserError(f"{path}: not a readable {what} ({reason[:200]}); {advice}") from None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a {what} (holds a {type(state).__name__}, not a dict)")
    return state


def require_keys(state: dict[str, Any], keys: tuple[str, ...], *, path: Path, what: str) -> None:
    missing = [k for k in keys if k not in state]
    if missing:
        raise UserError(
            f"{path}: not a {what} (missing {', '.join(missing)}); delete it and run the command "
            "that wrote it again"
        )


def load_module_state(module: torch.nn.Module, state_dict: Any, *, path: Path, what: str) -> None:
    """``module.load_state_dict(state_dict)`` with a `UserError` on any mismatch."""
    try:
        module.load_state_dict(state_dict)
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        first = str(exc).strip().splitlines()
        raise UserError(
            f"{path}: {what} does not fit this model ({first[0][:300] if first else exc})"
        ) from None
