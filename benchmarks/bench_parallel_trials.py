"""Do a deep search's trials gain from running at once, and in threads or in processes?

A 4-trial search of the ``resnet`` deep baseline on the tests' tiny synthetic data
(``deep.search.n_trials=4``), each mode in a fresh process; the wall and CPU seconds (user +
system of the process and its children) of the whole run, and each trial's vali NDCG@5:

- ``sequential``: ``deep.search.n_jobs=1`` (torch's default threads, every core);
- ``sequential-1``: the same with one torch thread;
- ``processes``: ``deep.search.n_jobs=2``, the tool's way (`finetune.trial_pool`: two spawned
  children of one thread each);
- ``threads``: two trials at once in two threads of one process, one torch thread each (not
  offered by the tool: trials share torch's global generator; measured here to say why).

    nice -n 10 .venv/bin/python benchmarks/bench_parallel_trials.py [--epochs 20] [--groups 30]
        [--repeats 1]

Every trial trains its ``--epochs`` (no early stop: ``deep.patience=null``). ``--trees``:
``gbdt-optuna``'s 12 trials instead, one by one on 2 threads against 2 at once on 1 thread each
(``gbdt.n_jobs=2``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("sequential", "sequential-1", "processes", "threads")
TREE_MODES = ("gbdt-sequential", "gbdt-threads")


def _args(run_dir: Path, epochs: int, mode: str, groups: int) -> list[str]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from tiny import small_encoder, tiny_data

    return [
        "baseline", "resnet", *tiny_data(), f"data.synthetic.n_train_groups={groups}",
        "logger=none", "deep.patience=null",
        *(f"deep.{o}" for o in small_encoder()),
        "deep.search.n_trials=4", f"deep.search.full_epochs=[{epochs},{epochs}]",
        f"epochs={epochs}", f"deep.search.n_jobs={2 if mode == 'processes' else 1}",
        f"run_dir={run_dir}",
    ]  # fmt: skip


def _threaded(asked, pool, study, space):
    """Two trials at once in threads of this process (the benchmark's mode only)."""
    from scarce_ltr.finetune.grid import train_point
    from scarce_ltr.search.trial_batches import in_threads

    return in_threads([partial(train_point, item[3], item[4], in_grid=True) for item in asked])


def _tree_args(run_dir: Path, mode: str, groups: int) -> list[str]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from tiny import tiny_data

    return [
        "baseline", "gbdt-optuna", *tiny_data(), f"data.synthetic.n_train_groups={groups}",
        "logger=none", "gbdt.n_trials=12", "gbdt.num_threads=2",
        f"gbdt.n_jobs={2 if mode == 'gbdt-threads' else 1}", f"run_dir={run_dir}",
    ]  # fmt: skip


def child(mode: str, run_dir: Path, epochs: int, groups: int) -> None:
    import torch

    from scarce_ltr.cli import run
    from scarce_ltr.finetune import search

    if mode in TREE_MODES:
        report = run(_tree_args(run_dir, mode, groups))
        print(json.dumps({"vali": [t["vali_ndcg@5"] or float("nan") for t in report["grid"]]}))
        return

    if mode != "sequential":
        torch.set_num_threads(1)
    args = _args(run_dir, epochs, mode, groups)
    if mode == "threads":
        args[args.index("deep.search.n_jobs=1")] = "deep.search.n_jobs=2"
        search._pool = lambda *args: None  # type: ignore[assignment]
        real = search._train_batch
        search._train_batch = lambda asked, pool, study, space: (  # type: ignore[assignment]
            _threaded(asked, pool, study, space)
            if len(asked) > 1
            else real(asked, None, study, space)
        )
    report = run(args)
    rows = [t["best_vali_ndcg@5"] for t in report["search"]["trials"]]
    print(json.dumps({"vali": rows}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--groups", type=int, default=30, help="train QGs (the tests': 30)")
    parser.add_argument("--trees", action="store_true", help="gbdt-optuna's 12 trials instead")
    parser.add_argument("--child", choices=MODES + TREE_MODES)
    parser.add_argument("--modes", nargs="+", choices=MODES + TREE_MODES, help="these only")
    parser.add_argument("--run-dir", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.run_dir, args.epochs, args.groups)
        return
    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
    for repeat in range(args.repeats):
        for mode in args.modes or (TREE_MODES if args.trees else MODES):
            with tempfile.TemporaryDirectory() as tmp:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, __file__, "--child", mode, "--run-dir", f"{tmp}/run",
                     "--epochs", str(args.epochs), "--groups", str(args.groups)],
                    capture_output=True, text=True,
                )  # fmt: skip
                if done.returncode != 0:
                    sys.exit(f"{mode} failed:\n{done.stderr[-3000:]}")
                wall = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                vali = json.loads(done.stdout.strip().splitlines()[-1])["vali"]
                shown = " ".join(f"{v:.6f}" for v in vali)
                print(f"{repeat} {mode:13s} wall {wall:6.1f} s  cpu {cpu:6.1f} s  vali {shown}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
