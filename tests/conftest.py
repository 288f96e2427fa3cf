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

# Under xdist (--dist loadfile, no reordering: pyproject's addopts) a worker that runs dry takes
# the next module. The two longest start first, so that the workers end together: the Ray
# cluster's sweeps (about a quarter of the suite, on one worker) and the local sweep runner's.
LONGEST_MODULES = ("test_ray_sweep.py", "test_sweep.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def place(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_MODULES.index(name) if name in LONGEST_MODULES else len(LONGEST_MODULES)

    items.sort(key=place)  # stable: the other modules, and each module's tests, keep their order


def _hide_cuda_where_marked_cpu(node, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine every stage runs on CUDA (``device=auto``), so the suite tests the GPU
    path too; a test marked ``cpu`` pins what the CPU computes (numbers measured on it, scores
    bit-equal to a bundle's on the CPU, a child forked after CUDA started) and sees no CUDA."""
    if node.get_closest_marker("cpu") is not None and torch.cuda.is_available():
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a sweep's job processes too


@pytest.fixture(autouse=True, scope="module")
def _cpu_module(request):
    """`_hide_cuda_where_marked_cpu` for a module marked ``cpu``: its module fixtures too."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _hide_cuda_where_marked_cpu(request.node, monkeypatch)
        yield


@pytest.fixture(autouse=True)
def _cpu_test(request, monkeypatch):
    _hide_cuda_where_marked_cpu(request.node, monkeypatch)


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
