"""`core.malloc.keep_freed_memory`: freed buffers stay in the process for the next epoch."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

# Two 20 MB buffers allocated and freed again and again, as an epoch's activations are: the
# minor page faults of 10 rounds after 3 of warm-up (glibc trims the freed 40 MB off the heap
# by default, so each round faults them in again: about 10,000 faults here).
ROUNDS = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from scarce_ltr.core.malloc import keep_freed_memory
    assert keep_freed_memory()
n = 5 * 2**20
for _ in range(3):
    a = np.ones(n, np.float32); b = np.ones(n, np.float32); del a, b
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    a = np.ones(n, np.float32); b = np.ones(n, np.float32); del a, b
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
"""


def faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS, mode], env=env, check=True, capture_output=True, text=True
    )
    return int(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_freed_buffers_are_reused_without_faulting_their_pages_again() -> None:
    kept = faults("keep")
    assert kept < 200  # the same pages, reused
    assert faults("default") > 10 * kept
