"""Overrides shared by the end-to-end tests: tiny synthetic data and small encoders.

These tests run whole commands (pretrain, finetune, baselines, sweeps), so data and models are
kept as small as a run allows to make the suite fast on a small CI machine. The settings live
here once instead of as a copy in each test file; a test adds its own keys to these lists.
Tests import this module as ``from tiny import ...``, like ``headless_chromium``.
"""

from __future__ import annotations


def tiny_data(n_features: int = 12) -> list[str]:
    """A synthetic data set of 30 train, 10 vali and 10 test query groups."""
    return [
        "data.synthetic.n_train_groups=30",
        "data.synthetic.n_vali_groups=10",
        "data.synthetic.n_test_groups=10",
        f"data.synthetic.n_features={n_features}",
    ]


def small_encoder() -> list[str]:
    """A two-block encoder, 16 wide, that the attention encoder can use too (two heads)."""
    return ["encoder.width=16", "encoder.hidden=32", "encoder.n_blocks=2", "encoder.n_heads=2"]


def tiny_pretraining() -> list[str]:
    """Tiny data, a one-block encoder 8 wide, no logger and a 64-item monitor: pretraining runs
    of a few seconds."""
    return [
        *tiny_data(),
        "encoder.width=8",
        "encoder.hidden=16",
        "encoder.n_blocks=1",
        "logger=none",
        "monitor.n_items=64",
    ]


def letor_folder(
    folder, edits: dict[str, dict[int, str]] | None = None, *, zero_labels: tuple[str, ...] = ()
):
    """train/vali/test.txt of 4 QGs x 4 items, 3 features, labels 0..2 (all 0 in the splits
    named in ``zero_labels``); ``edits[split][line]`` replaces a line. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "vali", "test"):
        lines = [
            f"{0 if split in zero_labels else i % 3} qid:{q} 1:{q * 0.5 + i} "
            f"2:{(q * 7 + i * 3) % 5} 3:{i * 1.5}"
            for q in range(1, 5)
            for i in range(4)
        ]
        for number, text in (edits or {}).get(split, {}).items():
            lines[number - 1] = text
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


def start_together(target, args_list: list[tuple]) -> list[int]:
    """Fork one process per ``args_list`` entry running ``target(*args, start)``, release them
    at once (each waits on the ``start`` event), and return their exit codes: the way a sweep's
    first jobs meet on a new data file."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=target, args=(*args, start)) for args in args_list]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    return [p.exitcode for p in procs]


def fork_or_skip() -> int:
    """`os.fork`, or skip the test where CUDA already ran in this process (an earlier test of
    this worker on a GPU machine): a forked child cannot train then (PyTorch's Autograd-and-Fork
    note). The tool itself forks only from processes that never touch CUDA (a sweep's job
    server); these tests fork to kill a run mid-step."""
    import os

    import pytest
    import torch

    if torch.cuda.is_initialized():
        pytest.skip("CUDA ran in this process before: a forked child cannot train")
    return os.fork()
