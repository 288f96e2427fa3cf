"""Training checkpoints: written atomically, read with ``weights_only=True``.

A checkpoint is a dict of tensors and plain containers (dict, list, tuple, str, int, float, bool,
None), so ``torch.load(..., weights_only=True)`` reads it without running pickled code. It is
serialised into memory and written with a temp file and a rename, so a process killed while
saving leaves the previous checkpoint intact. Random-number states (torch, CUDA, numpy, Python)
are stored as tensors.

Training loops also draw their randomness from `derive_seed(seed, epoch, step, ...)`, so a run
resumed from the end of epoch ``e`` replays epoch ``e + 1`` exactly as an uninterrupted run would.
"""

from __future__ import annotations

import hashlib
import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.errors import UserError
from core.rundir import atomic_write_bytes


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that depends on every part (stable across processes and Python versions)."""
    digest = hashlib.blake2b(repr(tuple(int(p) for p in parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def generator(device: torch.device, *parts: int) -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` seeded by `derive_seed(*parts)`."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(*parts))
    return gen


def capture_rng_state() -> dict[str, Any]:
    """The global random states of torch, CUDA, numpy and Python, as tensors and numbers."""
    _, keys, position, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "numpy_pos": int(position),
        "numpy_has_gauss": int(has_gauss),
        "numpy_cached_gaussian": float(cached),
        "python_version": int(version),
        "python_internal": torch.tensor(internal, dtype=torch.int64),
        "python_gauss_next": gauss_next,
    }
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (
            "MT19937",
            keys,
            state["numpy_pos"],
            state["numpy_has_gauss"],
            state["numpy_cached_gaussian"],
        )
    )
    internal = tuple(int(v) for v in state["python_internal"].tolist())
    random.setstate((state["python_version"], internal, state["python_gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all(cuda_states)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Serialise ``state`` in memory, then write it atomically to ``path``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(Path(path), buffer.getvalue())


def load_checkpoint(path: Path, *, what: str = "checkpoint") -> dict[str, Any]:
    """A checkpoint written by `save_checkpoint`; `UserError` when it cannot be read."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except Exception as exc:  # torch raises many types for truncated or foreign files
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"{path}: not a readable {what} ({reason[:200]}); delete it to start over"
        ) from None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a {what} (holds a {type(state).__name__}, not a dict)")
    return state


def require_keys(state: dict[str, Any], keys: tuple[str, ...], *, path: Path, what: str) -> None:
    missing = [k for k in keys if k not in state]
    if missing:
        raise UserError(f"{path}: not a {what} (missing {', '.join(missing)})")


def load_module_state(module: torch.nn.Module, state_dict: Any, *, path: Path, what: str) -> None:
    """``module.load_state_dict(state_dict)`` with a `UserError` on any mismatch."""
    try:
        module.load_state_dict(state_dict)
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        first = str(exc).strip().splitlines()
        raise UserError(
            f"{path}: {what} does not fit this model ({first[0][:300] if first else exc})"
        ) from None
