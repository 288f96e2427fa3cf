"""Test-wide settings: no wandb, a private data cache, few threads on a small CI machine."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
# Spinning OpenMP threads make small runs on shared cores many times slower.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models and tensors run fastest on one thread, above all on cores shared with other
    jobs; each test starts on one thread whatever the one before it set."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch) -> None:
    """Caches and default run folders of tests never land in the project tree."""
    root = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("LTR_CACHE_DIR", str(root / "letor-cache"))
    monkeypatch.setenv("LTR_RUNS_DIR", str(root / "runs"))
