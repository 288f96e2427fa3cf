"""Keep freed memory in the process for the next allocation: glibc's malloc thresholds.

A deep ranker's epoch allocates and frees the same large buffers again and again (a vali forward
on the Yandex folds: ``[20,000, 256]`` float32 activations, 20 MB each, per layer). glibc hands
such blocks back to the kernel on free (each over its mmap threshold is its own mapping; the top
of the heap is trimmed past its trim threshold), so the next epoch faults every page in again:
on a searched finetuning that was 2-6 % of the CPU time in the kernel and half a million minor
page faults for 5 trials (benchmarks/LOG.md, "Where a search trial's time goes"). Raising both
thresholds keeps blocks up to `MMAP_THRESHOLD` in the heap and the heap's top up to
`TRIM_THRESHOLD`, so they are reused. Only where memory lands changes: every number stays
the same (torch aligns its tensors itself).

The command line sets it for its own process (`scarce_ltr.cli.main`); a Python user's process
is left as it is. glibc only (elsewhere a no-op), and a threshold the user set through glibc's
environment variables (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) wins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

MMAP_THRESHOLD = 32 * 2**20  # glibc's largest (its default adapts between 128 KiB and this)
TRIM_THRESHOLD = 512 * 2**20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; whether it was done."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    done = True
    for name, parameter, value in (
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    ):
        if name not in os.environ:
            done = bool(mallopt(parameter, value)) and done
    return done
