"""Pretraining throughput: items per second, peak memory and the share of the matmul peak.

Usage (from the project root)::

    .venv/bin/python benchmarks/bench_pretrain.py                 # CPU, ~3 min
    .venv/bin/python benchmarks/bench_pretrain.py --device cuda   # 2.3M items
    .venv/bin/python benchmarks/bench_pretrain.py --against 6d6c4b6 --methods simclr-rank simsiam

``--against REV`` also runs every epoch with the code of git revision ``REV`` (a temporary git
worktree, imported as ``scarce_ltr`` ahead of the installed package), right before the current
code's, on the same data and thread count, and prints the speed-up.

Data shaped like MSLR-WEB30K: 136 Gaussian features, QG sizes log-normal around 120 items
(clipped to [5, 1251]); the ResNet encoder of the paper with width 136. Every method trains one
epoch in a fresh subprocess (so ``ru_maxrss`` is its own peak; on CUDA
``torch.cuda.max_memory_allocated``) after two warm-up steps, with the real training loop
(``pretrain.train._train_epoch``). The encoder's FLOPs are counted from its linear layers
(forward ``2 in out`` per item and view, backward twice that, minus the input gradient of the
first layer) and compared with the best of several ``torch.mm`` of 4096 x 4096 float32 matrices
measured in the same process just before and after the epoch (the machine may be shared).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
HEADLINE = ("simclr-rank", "simsiam")
_SAME_BUDGET = 8_192  # simclr-rank vs. batch-wide simclr on the CPU
VIEWS = {"vime": 1, "subtab": 4}  # encoder passes per item; 2 for every other method


def mslr_like(n_items: int, *, seed: int = 0):
    """A `RankingSplit` of about ``n_items`` items, 136 features, QGs of ~120 items."""
    from scarce_ltr.data.ranking_split import RankingSplit

    rng = np.random.default_rng(seed)
    sizes = []
    while sum(sizes) < n_items:
        sizes.append(int(np.clip(round(rng.lognormal(np.log(100), 0.6)), 5, 1251)))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    features = rng.standard_normal((offsets[-1], 136), dtype=np.float32)
    labels = np.zeros(offsets[-1], dtype=np.float32)
    return RankingSplit(features, labels, offsets, np.arange(len(sizes)), "bench")


def matmul_peak(device: torch.device, *, dtype=torch.float32, n: int = 4096) -> float:
    """Best GFLOP/s of ``n x n`` matmuls."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(4 if device.type == "cpu" else 20):
        _sync(device)
        start = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def encoder_flops_per_item(encoder: torch.nn.Module) -> float:
    """Forward + backward FLOPs of the encoder's linear layers for one item and one view."""
    linears = [m for m in encoder.modules() if isinstance(m, torch.nn.Linear)]
    total = 0.0
    for i, layer in enumerate(linears):
        mac = layer.in_features * layer.out_features
        total += 2 * mac + 2 * mac + (0 if i == 0 else 2 * mac)  # forward, dW, dX
    return total


def prepare(method: str, split, *, budget: int, overrides: list[str], device: str = "cpu"):
    """``(cfg, runtime, objective, optimizer, batcher)`` of one method on ``split``, after two
    warm-up steps (kernels, allocator): what every timed or profiled epoch starts from."""
    from scarce_ltr.core.config import CONFIG_ROOT, load_config
    from scarce_ltr.core.device import setup_runtime
    from scarce_ltr.pretrain.config import PretrainConfig
    from scarce_ltr.pretrain.objectives import build_objective
    from scarce_ltr.pretrain.pretraining_set import make_batcher
    from scarce_ltr.pretrain.train import _device_split

    base = [f"item_budget={budget}", "encoder.width=136", f"device={device}"]
    stage_file = CONFIG_ROOT / "pretrain" / f"{method}.yaml"
    cfg, _ = load_config(PretrainConfig, [*base, *overrides], stage_file=stage_file)
    runtime = setup_runtime(amp=device == "cuda", device=device, cpu_amp=cfg.cpu_amp)
    objective = build_objective(cfg, n_features=136).to(runtime.device)
    optimizer = torch.optim.Adam(objective.parameters(), lr=cfg.optimizer.lr)
    on_device = _device_split(split, cfg, runtime)  # CUDA: batches gathered there
    batcher = make_batcher(
        split, item_budget=budget, max_list_len=None, seed=0, rank=0, world_size=1,
        length_buckets=cfg.length_buckets, on_device=on_device,
    )  # fmt: skip
    for step, batch in zip(range(2), batcher, strict=False):
        gen = torch.Generator(runtime.device).manual_seed(step)
        with runtime.train_autocast():
            loss = objective(
                batch.features.to(runtime.device), batch.mask.to(runtime.device), generator=gen
            )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return cfg, runtime, objective, optimizer, batcher


def worker(args: argparse.Namespace) -> dict:
    from scarce_ltr.pretrain.train import _CrashAfter, _train_epoch

    torch.manual_seed(0)
    split = mslr_like(args.items)
    cfg, runtime, objective, optimizer, batcher = prepare(
        args.method, split, budget=args.budget, overrides=args.overrides, device=args.device
    )
    baseline_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if runtime.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    peak_before = matmul_peak(runtime.device)
    cpu_start = time.process_time()
    stats = _train_epoch(objective, optimizer, batcher, cfg, runtime, 0, _CrashAfter())
    _sync(runtime.device)
    cpu_seconds = time.process_time() - cpu_start  # all threads; robust to other jobs
    peak = max(peak_before, matmul_peak(runtime.device))
    flops = encoder_flops_per_item(objective.encoder) * VIEWS.get(args.method, 2)
    achieved = flops * stats["items_per_s"] / 1e9
    result = {
        "method": args.method,
        "overrides": args.overrides,
        "item_budget": args.budget,
        "items": stats["items"],
        "steps": stats["steps"],
        "seconds": stats["seconds"],
        "items_per_s": stats["items_per_s"],
        "items_per_cpu_s": stats["items"] / max(cpu_seconds, 1e-9),
        "encoder_gflop_per_s": achieved,
        "matmul_peak_gflop_per_s": peak,
        "share_of_peak": achieved / peak,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_epoch_mb": baseline_rss,
        "load_average": os.getloadavg()[0],  # other jobs on the machine distort every figure
    }
    if runtime.device.type == "cuda":
        result["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
        bf16_peak = matmul_peak(runtime.device, dtype=torch.bfloat16)
        result["bf16_matmul_peak_gflop_per_s"] = bf16_peak
        result["share_of_bf16_peak"] = achieved / bf16_peak
        result.update(_input_seconds(batcher, runtime.device))
    return result


def _input_seconds(batcher, device: torch.device) -> dict:
    """Seconds of one epoch's collation alone, and of collation plus the host-to-device copies:
    what the model's steps wait for when nothing overlaps them."""
    start = time.perf_counter()
    for _ in batcher:
        pass
    _sync(device)
    collate = time.perf_counter() - start
    start = time.perf_counter()
    for batch in batcher:
        batch.features.to(device, non_blocking=True)
        batch.mask.to(device, non_blocking=True)
    _sync(device)
    return {"collate_seconds": collate, "collate_and_copy_seconds": time.perf_counter() - start}


def _machine(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [
            ln.split(":", 1)[1].strip()
            for ln in cpuinfo.read_text().splitlines()
            if ln.startswith("model name")
        ]
        name = names[0] if names else name
    return f"{name}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def _plan(device: str) -> list[tuple[str, int, int, list[str]]]:
    """(method, item budget, items, overrides) per run: headline methods on >= 100k items."""
    if device == "cuda":
        big, small, n = 200_000, 2_000, 2_300_000
        # Plain padding at 200,000 items costs 1.8 s of collating per epoch (bench_batching.py).
        # Gathered on the GPU by default (gather_on_device); collated on the host for comparison.
        buckets = ["length_buckets=true"]
        runs = [(m, big, n, [*buckets, "gather_on_device=false"]) for m in HEADLINE]
        runs += [(m, big, n, buckets) for m in ("simclr-rank", "simsiam", "simclr-sample", "vime")]
        runs += [("subtab", big, n // 4, buckets)]
        runs += [(m, small, n // 10, []) for m in ("simclr", "scarf", "dacl")]
        return runs + [(m, _SAME_BUDGET, n // 10, []) for m in ("simclr", "simclr-rank")]
    runs = [(m, 16_384, 120_000, []) for m in HEADLINE]
    runs += [(m, 16_384, 120_000, ["cpu_amp=true"]) for m in HEADLINE]
    runs += [(m, 16_384, 60_000, ["encoder.dropout=0"]) for m in HEADLINE]
    runs += [(m, 16_384, 20_000, []) for m in ("simclr-sample", "vime", "subtab")]
    runs += [(m, 2_048, 20_000, []) for m in ("simclr", "scarf", "dacl")]
    return runs + [(m, _SAME_BUDGET, 24_000, []) for m in ("simclr", "simclr-rank")]


def _print(result: dict) -> None:
    print(
        f"{result['method']:14s} {' '.join(result['overrides']):18s} "
        f"budget {result['item_budget']:>7,d}  {result['items']:>9,d} items  "
        f"{result['items_per_s']:>9,.0f} items/s ({result['items_per_cpu_s']:,.0f}/CPU-s)  "
        f"{result['seconds']:7.1f} s  "
        f"peak RSS {result['peak_rss_mb']:6.0f} MB  "
        f"{result['share_of_peak']:6.1%} of {result['matmul_peak_gflop_per_s']:.0f} GFLOP/s  "
        + (_cuda_text(result) if "share_of_bf16_peak" in result else "")
        + f"(load {result['load_average']:.1f})",
        flush=True,
    )


def _cuda_text(result: dict) -> str:
    return (
        f"{result['share_of_bf16_peak']:6.1%} of bf16 "
        f"{result['bf16_matmul_peak_gflop_per_s']:.0f}  "
        f"{result['cuda_max_allocated_mb']:.0f} MB on the GPU  "
        f"collate {result['collate_seconds']:.2f} s "
        f"(+copy {result['collate_and_copy_seconds']:.2f} s)  "
    )


@contextlib.contextmanager
def _worktree(revision: str):
    """``(root of a worktree of revision, folder to put first on PYTHONPATH)``; removed after."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree),
                        revision], check=True)  # fmt: skip
        (Path(tmp) / "path").mkdir()
        (Path(tmp) / "path" / "scarce_ltr").symlink_to(tree)  # the package is the repo root
        try:
            yield tree, Path(tmp) / "path"
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=False)  # fmt: skip


def _run_worker(run: list[str], old: tuple[Path, Path] | None) -> dict | None:
    """One epoch in a fresh process, by today's code or (``old``) a worktree's."""
    script = __file__ if old is None else str(old[0] / "benchmarks" / Path(__file__).name)
    env = {"WANDB_MODE": "disabled", "PATH": "/usr/bin:/bin"}
    paths = [str(old[1])] if old is not None else []
    paths += [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []  # a GPU machine's
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    command = [sys.executable, script, "--worker", *run]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        print(
            f"{run[0]} {'(previous) ' if old else ''}failed\n{done.stderr[-2000:]}", file=sys.stderr
        )
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    parser.add_argument("--methods", nargs="*", default=None, help="only these methods")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument(
        "--pair", action="store_true", help=f"only simclr vs simclr-rank at {_SAME_BUDGET} items"
    )
    parser.add_argument("--against", default=None, help="also time this git revision's code")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=int, default=16_384, help=argparse.SUPPRESS)
    parser.add_argument("--items", type=int, default=120_000, help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args()  # extra: key=value config overrides (workers)
    args.overrides = extra
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        args.method = args.worker
        print(json.dumps(worker(args)))
        return
    results, previous = [], []
    with contextlib.ExitStack() as stack:
        old = stack.enter_context(_worktree(args.against)) if args.against else None
        for method, budget, items, overrides in _plan(args.device):
            if args.methods and method not in args.methods:
                continue
            if args.pair and budget != _SAME_BUDGET:
                continue
            run = [method, "--device", args.device, "--budget", str(budget)]
            run += ["--items", str(items), *overrides]
            if args.threads:
                run += ["--threads", str(args.threads)]
            if old is not None:  # the previous code first, then today's, back to back
                before = _run_worker(run, old)
                if before is not None:
                    before["revision"] = args.against
                    previous.append(before)
                    _print(before)
            result = _run_worker(run, None)
            if result is None:
                continue
            results.append(result)
            _print(result)
            if old is not None and before is not None:
                speedup = result["items_per_s"] / before["items_per_s"]
                cpu = result["items_per_cpu_s"] / before["items_per_cpu_s"]
                print(f"  -> {speedup:.2f}x the items/s of {args.against} ({cpu:.2f}x per CPU-s)")
    same_budget = {
        r["method"]: r["items_per_s"] for r in results if r["item_budget"] == _SAME_BUDGET
    }
    if {"simclr", "simclr-rank"} <= set(same_budget):
        ratio = same_budget["simclr-rank"] / same_budget["simclr"]
        cpu = {
            r["method"]: r["items_per_cpu_s"] for r in results if r["item_budget"] == _SAME_BUDGET
        }
        cpu_ratio = cpu["simclr-rank"] / cpu["simclr"]
        print(
            f"simclr-rank epochs are {ratio:.1f}x faster than simclr at {_SAME_BUDGET} items "
            f"({cpu_ratio:.1f}x in CPU time)"
        )
    summary = {
        "machine": _machine(args.device),
        "torch": torch.__version__,
        "device": args.device,
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
        "previous": previous,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
