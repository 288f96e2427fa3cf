"""What a config's sizes would take in memory, estimated before anything is allocated.

A size typed one order of magnitude too far (``encoder.width=1e8``,
``data.synthetic.n_train_groups=1e9``, ``data.outliers.n_bins=1e9``) ends in one line naming the
key and the memory it needs, when the config is checked, instead of an allocator's traceback
minutes later or the kernel killing the process. The estimates are simple and low, so that
they never refuse what would run: a model's float32 parameters (its weight matrices only) times
the copies training keeps (`TRAINING_COPIES`), an array's items x columns x bytes; activations
and the data are left out, and a count the config does not know (the features of a LETOR file)
counts as its least. They are weighed against the memory this machine has (`machine_memory`),
not what is free now: a size refused here cannot run on this machine at all.
"""

from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

FLOAT32 = 4
# A float32 parameter in training: the weight, its gradient and Adam's two moments.
TRAINING_COPIES = 4


def machine_memory() -> int | None:
    """Bytes of memory a process of this machine may hold: its physical memory, lowered to a
    cgroup v2 limit (a container's) and to the address-space limit (``ulimit -v``); None where
    the system says nothing."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            total = min(total, soft)
    except (ImportError, ValueError):
        pass
    return total


def check_fits(key: str, needed: int, what: str) -> None:
    """`ValueError` naming ``key`` (``encoder.width=100000000``) when ``needed`` bytes, what
    ``what`` would take, pass this machine's memory."""
    memory = machine_memory()
    if memory is not None and needed > memory:
        raise ValueError(
            f"{key}: {what} would need at least {_bytes(needed)}, more than the "
            f"{_bytes(memory)} of memory of this machine; choose a smaller value"
        )


def model_fits(key: str, parameters: int, what: str = "the model") -> None:
    """`check_fits` of a model of ``parameters`` float32 parameters in training."""
    needed = parameters * FLOAT32 * TRAINING_COPIES
    check_fits(key, needed, f"{what} ({parameters:,} parameters, with gradients and Adam's state)")


def largest(prefix: str, options: Any, keys: tuple[str, ...]) -> str:
    """``<prefix><key>=<value>`` of the key of ``keys`` (fields of the dataclass ``options``)
    the most above its default: the one to name when their product is too large."""
    defaults = {f.name: f.default for f in fields(options)}

    def ratio(key: str) -> float:
        default = defaults.get(key)
        value = getattr(options, key)
        return value / default if isinstance(default, int) and default > 0 else value

    key = max(keys, key=ratio)
    return f"{prefix}{key}={getattr(options, key)}"


def _bytes(n: int) -> str:
    for unit, size in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return re.sub(r"\.0 ", " ", f"{n / size:.1f} {unit}")
    return f"{n:,} bytes"
