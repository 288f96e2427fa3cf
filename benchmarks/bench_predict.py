"""Scoring speed of model bundles: 1M MSLR-shaped items (136 features), bundle vs bare model.

Trains two small rankers on MSLR-shaped synthetic data (a ResNet deep baseline, the encoder of
the pretrained rankers, and a LightGBM LambdaMART of ``--trees`` trees), then scores 1M items
(the test split tiled) side by side in this process:

- ResNet: the bundle (`BundledRanker.score_split`: transform + QG batches) against the bare
  model (the same batched forward on features transformed beforehand), and ONNX Runtime on the
  exported graph (transform inside; batches of whole QGs, padded);
- LightGBM: the bundle against ``Booster.predict`` on the transformed matrix;
- ``./run.sh predict`` end to end on a LETOR file of ``--file-items`` items (parse, score, CSV).

Each measurement runs in a child process of its own so that its peak resident memory (above the
process after loading the data) is its own; times are the best of ``--repeat`` runs.

    .venv/bin/python benchmarks/bench_predict.py [--items 1000000] [--threads 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MSLR = [
    "data.synthetic.n_features=136",
    "data.synthetic.n_train_groups=300",
    "data.synthetic.n_vali_groups=100",
    "data.synthetic.n_test_groups=200",
    "data.synthetic.mean_group_size=120",
    "logger=none",
]


def train(folder: Path, trees: int) -> dict[str, Path]:
    from scarce_ltr.cli import run

    runs = {"resnet": folder / "resnet", "lightgbm": folder / "lightgbm"}
    run(["baseline", "resnet", *MSLR, "epochs=2", "deep.lrs=[1e-3]", f"run_dir={runs['resnet']}"])
    run(["baseline", "gbdt", *MSLR, "gbdt.grid=full", "gbdt.num_leaves=[31]",
         "gbdt.min_data_in_leaf=[20]", "gbdt.feature_fraction=[1.0]", f"gbdt.max_rounds={trees}",
         f"gbdt.early_stopping_rounds={trees}", f"run_dir={runs['lightgbm']}"])  # fmt: skip
    return runs


def items(n_items: int):
    """The test split tiled to ``n_items`` items of whole QGs (raw features)."""
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.ranking_split import RankingSplit
    from scarce_ltr.data.stage_config import CommonConfig

    cfg, _ = load_config(CommonConfig, MSLR)
    test = load_dataset(cfg.data)["test"]
    copies = -(-n_items // test.n_items)
    sizes = np.tile(test.group_sizes, copies)
    keep = int(np.searchsorted(np.cumsum(sizes), n_items, side="left")) + 1
    sizes = sizes[:keep]
    features = np.tile(np.asarray(test.features), (copies, 1))[: sizes.sum()]
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    labels = np.zeros(len(features), dtype=np.float32)
    return RankingSplit(features, labels, offsets, np.arange(len(sizes)), "bench")


def save_items(split, folder: Path) -> Path:
    np.save(folder / "features.npy", np.asarray(split.features))
    np.save(folder / "offsets.npy", split.offsets)
    return folder


def load_items(folder: Path):
    from scarce_ltr.data.ranking_split import RankingSplit

    features = np.load(folder / "features.npy")
    offsets = np.load(folder / "offsets.npy")
    labels = np.zeros(len(features), dtype=np.float32)
    return RankingSplit(features, labels, offsets, np.arange(len(offsets) - 1), "bench")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _child(job, args, queue) -> None:
    import lightgbm  # noqa: F401  (imports before the memory baseline)
    import onnxruntime  # noqa: F401
    import torch

    import scarce_ltr.cli  # noqa: F401
    import scarce_ltr.serving.predict  # noqa: F401

    torch.set_num_threads(args["threads"])
    split = load_items(Path(args["data"]))
    before = _rss_mib()
    seconds = min(job(split, args) for _ in range(args.get("repeat", 1)))  # best of n
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((split.n_items, seconds, peak - before))


def measure(job, **args) -> tuple[int, float, float]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=_child, args=(job, args, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def resnet_bundle(split, args) -> float:
    import scarce_ltr

    ranker = scarce_ltr.load_ranker(args["run"])
    start = time.perf_counter()
    ranker.score_split(split)
    return time.perf_counter() - start


def resnet_bare(split, args) -> float:
    import torch

    import scarce_ltr
    from scarce_ltr.core.device import Runtime
    from scarce_ltr.finetune.loop import predict

    ranker = scarce_ltr.load_ranker(args["run"])
    transformed = ranker.transform(ranker.check_width(split))
    model = ranker.model
    start = time.perf_counter()
    predict(model.module, transformed, runtime=Runtime(device=torch.device("cpu")),
            item_budget=model.item_budget)  # fmt: skip
    return time.perf_counter() - start


def resnet_onnx(split, args) -> float:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = args["threads"]
    session = onnxruntime.InferenceSession(
        args["onnx"], options, providers=["CPUExecutionProvider"]
    )
    features = np.asarray(split.features)
    sizes = split.group_sizes
    start = time.perf_counter()
    for first in range(0, split.n_groups, 64):  # 64 QGs per call, padded to the longest
        group_sizes = sizes[first : first + 64]
        width = int(group_sizes.max())
        batch = np.zeros((len(group_sizes), width, features.shape[1]), dtype=np.float32)
        mask = np.arange(width)[None, :] < group_sizes[:, None]
        rows = slice(split.offsets[first], split.offsets[first + len(group_sizes)])
        batch[mask] = features[rows]
        session.run(None, {"features": batch, "mask": mask})
    return time.perf_counter() - start


def lightgbm_bundle(split, args) -> float:
    return resnet_bundle(split, args)


def lightgbm_bare(split, args) -> float:
    import scarce_ltr

    ranker = scarce_ltr.load_ranker(args["run"])
    transformed = np.asarray(ranker.transform(ranker.check_width(split)).features)
    start = time.perf_counter()
    ranker.model.booster.predict(transformed)
    return time.perf_counter() - start


def predict_file(split, args) -> float:
    from scarce_ltr.cli import run

    start = time.perf_counter()
    run(["predict", args["run"], f"data.path={args['file']}", f"out={args['out']}"])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--file-items", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trees", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3, help="best of n timings per scorer")
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    work = Path(tempfile.mkdtemp(prefix="bench-predict-"))
    os.environ["LTR_RUNS_DIR"] = str(work / "runs")
    os.environ.setdefault("LTR_CACHE_DIR", str(work / "cache"))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"threads {args.threads}; git {_git()}", flush=True)  # fmt: skip
    start = time.perf_counter()
    runs = train(work, args.trees)
    print(f"trained both rankers in {time.perf_counter() - start:.0f} s", flush=True)
    from scarce_ltr.cli import run
    from scarce_ltr.data.letor import write_letor

    onnx = work / "resnet.onnx"
    run(["export", str(runs["resnet"]), "format=onnx", f"out={onnx}"])
    file = work / "items.txt"
    write_letor(items(args.file_items), file, precision=6)
    big = save_items(items(args.items), Path(tempfile.mkdtemp(dir=work)))
    small = save_items(items(1000), Path(tempfile.mkdtemp(dir=work)))
    common = {"data": str(big), "threads": args.threads, "repeat": args.repeat}
    rows = [
        ("ResNet", "bare model (batched forward)", resnet_bare, {"run": str(runs["resnet"])}),
        ("ResNet", "bundle (transform + model)", resnet_bundle, {"run": str(runs["resnet"])}),
        ("ResNet", "ONNX Runtime (transform inside)", resnet_onnx, {"onnx": str(onnx)}),
        ("LightGBM", "bare Booster.predict", lightgbm_bare, {"run": str(runs["lightgbm"])}),
        ("LightGBM", "bundle (transform + booster)", lightgbm_bundle,
         {"run": str(runs["lightgbm"])}),
    ]  # fmt: skip
    print("\n| model | scorer | items | seconds | items/s | peak memory above the data (MiB) |")
    print("|---|---|---|---|---|---|")
    for model, scorer, job, extra in rows:
        n, seconds, memory = measure(job, **common, **extra)
        print(f"| {model} | {scorer} | {n:,} | {seconds:.2f} | {n / seconds:,.0f} | {memory:.0f} |",
              flush=True)  # fmt: skip
    print(f"\n`./run.sh predict` on a LETOR file ({file.stat().st_size / 2**20:.0f} MiB, "
          f"{args.file_items:,} items): parse + score + CSV", flush=True)  # fmt: skip
    for model in ("resnet", "lightgbm"):
        extra = {"run": str(runs[model]), "file": str(file), "out": str(work / f"{model}.csv")}
        n, seconds, memory = measure(predict_file, **common | {"data": str(small), "repeat": 1},
                                     **extra)  # fmt: skip
        print(f"| {model} | predict | {args.file_items:,} | {seconds:.2f} | "
              f"{args.file_items / seconds:,.0f} | {memory:.0f} |", flush=True)  # fmt: skip


def _git() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True)  # fmt: skip
    return done.stdout.strip() or "?"


if __name__ == "__main__":
    main()
