"""Seeds and random states: one seed per run, and seeds derived from it for every draw.

Training loops draw their randomness from `derive_seed(seed, epoch, step, ...)`, so a run resumed
from the end of epoch ``e`` replays epoch ``e + 1`` exactly as an uninterrupted run would; the
global states (torch, CUDA, numpy, Python) travel in checkpoints as tensors.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch once, at the start of a run (or of a grid point)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
