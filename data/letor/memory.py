"""Room for the dense feature array: checked before it is allocated, so that one stray large
feature index ends in a message naming its line instead of the kernel killing the process."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor.parsed import Parsed, parsed_width


def available_memory() -> int | None:
    """Bytes this process can still allocate without swapping: ``MemAvailable`` of
    ``/proc/meminfo``, lowered to the room left under a cgroup v2 limit (a container's) and
    under the process's own address-space limit (``ulimit -v``), or the free pages `os.sysconf`
    counts elsewhere; None when the system says nothing."""
    try:
        meminfo = Path("/proc/meminfo").read_text()
        match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.MULTILINE)
        available = int(match.group(1)) * 1024 if match else None
    except OSError:
        available = None
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit.isdigit():
            available = min(available, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    room = address_space_room()
    return available if room is None else min(available, room)


def address_space_room() -> int | None:
    """Bytes of address space left under ``ulimit -v`` (``RLIMIT_AS``, what the process's
    mappings may add up to: an allocation beyond it fails whatever the free memory), or None
    without a limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft < 0:
            return None
        status = Path("/proc/self/status").read_text()
        match = re.search(r"^VmSize:\s+(\d+) kB", status, re.MULTILINE)
    except (ImportError, OSError, ValueError):
        return None
    used = int(match.group(1)) * 1024 if match else 0
    return max(soft - used, 0)


def check_memory(path: Path, chunks: list[Parsed], n_items: int, n_features: int) -> None:
    """Refuse, naming the line of the largest feature index, a dense feature array larger
    than the memory available: allocating it would get the process killed by the kernel."""
    needed = n_items * n_features * 4
    available = available_memory()
    if available is None or needed <= available:
        return
    line = None
    for c in chunks:
        if parsed_width(c) == n_features and len(c.labels):
            at = 0 if c.width is not None else int(c.rows[np.argmax(c.cols)])
            line = int(c.line_numbers[at])
            break
    stored = sum(len(c.values) for c in chunks)
    if stored < n_items * n_features // 2:  # mostly absent features: a stray index
        way_out = (
            f"feature index {n_features:,} on this line is the largest; the features are "
            "stored dense, so renumber the feature indices to be contiguous or drop the stray one"
        )
    else:
        way_out = "use a machine with more memory, or split the file"
    raise DataFormatError(
        path,
        line,
        f"{n_items:,} items x {n_features:,} features need {_bytes(needed)} as dense float32, "
        f"more than the {_bytes(available)} of memory available; {way_out}",
    )


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
