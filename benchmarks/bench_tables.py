"""Reading tables and the estimators' overhead (issue 27).

1. Reading 1M MSLR-shaped items (136 features, the generator of ``bench_parse.py``): the same
   data as LETOR text (``data.cache.load_split``: parse + write the cache), as Parquet and as
   ``.npz`` columns (``data.tables.load_table``: read + write the same cache), their cached
   reloads, and ``lightgbm.Dataset`` built from the same Parquet (read with pyarrow, then
   ``construct()``, which bins). Target: Parquet into the cache >= 10x faster than the text.
2. The estimators' overhead over the equivalent ``./run.sh`` commands on cells of the quick
   sweep (synthetic default data): each cell run as commands (``cli.run``) and as an estimator
   fit on the same arrays (the same labeled QGs); the overhead is the estimator's wall time
   beyond the time its own commands took (checking, writing the arrays, loading the bundle),
   which the shared machine's noise does not blur. Target: under 5 %.

    .venv/bin/python benchmarks/bench_tables.py [--items 1000000] [--features 136]
        [--keep DIR] [--skip-read] [--skip-overhead] [--cells gbdt,resnet,simclr-rank+full]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_parse import make_split  # noqa: E402

from scarce_ltr.data.cache import load_split  # noqa: E402
from scarce_ltr.data.letor import write_letor  # noqa: E402
from scarce_ltr.data.ranking_split import RankingSplit  # noqa: E402
from scarce_ltr.data.tables import load_table  # noqa: E402


def columns(split: RankingSplit) -> dict[str, np.ndarray]:
    out = {"qid": np.repeat(split.qids, split.group_sizes), "label": split.labels}
    features = {
        f"f{j}": np.ascontiguousarray(split.features[:, j]) for j in range(split.n_features)
    }
    return out | features


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - start, out


def reading(args) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench-tables-"))
    folder.mkdir(parents=True, exist_ok=True)
    text, parquet, npz = folder / "bench.txt", folder / "bench.parquet", folder / "bench.npz"
    if not (text.is_file() and parquet.is_file() and npz.is_file()):
        split = make_split(args.items, args.features)
        write_letor(split, text, precision=6)
        pq.write_table(pa.table(columns(split)), parquet)
        np.savez(npz, **columns(split))
    sizes = {p: p.stat().st_size / 2**20 for p in (text, parquet, npz)}
    rows = []
    for _ in range(args.repeat):
        cache = Path(tempfile.mkdtemp(prefix="cache-", dir=folder))
        for what in ("parse + write cache", "cached reload"):
            seconds = timed(load_split, text, name="t", cache_root=cache)[0]
            rows.append((f"LETOR text: load_split, {what}", text, seconds))
        for path, kind in ((parquet, "Parquet"), (npz, ".npz")):
            for what in ("read + write cache", "cached reload"):
                seconds = timed(load_table, path, name="t", cache_root=cache)[0]
                rows.append((f"{kind}: load_table, {what}", path, seconds))
        seconds = timed(lightgbm_from_parquet, parquet)[0]
        rows.append(
            ("lightgbm.Dataset from the Parquet (pyarrow read + construct)", parquet, seconds)
        )
    best: dict[str, tuple[Path, float]] = {}
    for name, path, seconds in rows:
        if name not in best or seconds < best[name][1]:
            best[name] = (path, seconds)
    text_seconds = best["LETOR text: load_split, parse + write cache"][1]
    where = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    load = f"load {os.getloadavg()[0]:.1f}"
    print(
        f"{args.items:,} items x {args.features} features; {where}; {load}; best of {args.repeat}"
    )
    print("| reader | file MB | seconds | text / this |")
    print("|---|---:|---:|---:|")
    for name, (path, seconds) in best.items():
        ratio = f"{text_seconds / seconds:.1f}x" if seconds > 0.005 else "-"
        print(f"| {name} | {sizes[path]:,.0f} | {seconds:.2f} | {ratio} |")


def lightgbm_from_parquet(path: Path) -> None:
    import lightgbm as lgb
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    qid = table.column("qid").to_numpy()
    names = [n for n in table.column_names if n not in ("qid", "label")]
    x = np.column_stack([table.column(n).to_numpy() for n in names])
    _, sizes = np.unique(qid, return_counts=True)
    dataset = lgb.Dataset(x, label=table.column("label").to_numpy(), group=sizes,
                          params={"verbose": -1, "num_threads": os.cpu_count()})  # fmt: skip
    dataset.construct()


def overhead(args) -> None:
    from scarce_ltr import baselines, finetune, pretrain
    from scarce_ltr.cli import run
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.scarcity import ScarcityConfig, apply_scarcity
    from scarce_ltr.data.stage_config import CommonConfig

    cfg, _ = load_config(CommonConfig, [])
    data = load_dataset(cfg.data)
    train, vali = data["train"], data["vali"]

    def rows(split, mask=None):
        qid = np.repeat(split.qids, split.group_sizes)
        keep = np.ones(split.n_items, bool) if mask is None else mask[split.group_index]
        return np.asarray(split.features)[keep], np.asarray(split.labels)[keep], qid[keep]

    stage_seconds = []

    def timed_stage(real):
        def run_timed(*args, **kwargs):
            seconds, out = timed(real, *args, **kwargs)
            stage_seconds.append(seconds)
            return out

        return run_timed

    for stage in (pretrain, finetune, baselines):  # the stage functions the estimators call
        stage.fit = timed_stage(stage.fit)
    print("| cell | ./run.sh commands (s) | estimator fit (s) | its commands (s) | overhead |")
    print("|---|---:|---:|---:|---:|")
    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    for cell in args.cells.split(","):
        fraction = 0.1
        mask = apply_scarcity(train, vali, ScarcityConfig(fraction=fraction), seed=0).train_labeled
        labeled = rows(train, mask)
        unlabeled = rows(train, ~mask)
        common = ["logger=none", f"scarcity.fraction={fraction}", "data.outliers.method=none"]
        out = work / cell.replace("+", "_")
        cli_seconds, estimator = run_cell(run, cell, common, out)
        stage_seconds.clear()
        eval_set = rows(vali)
        fit_seconds = timed(estimator.fit, *labeled, unlabeled=unlabeled[::2], eval_set=eval_set)[0]
        inside = sum(stage_seconds)
        share = (fit_seconds - inside) / inside
        print(f"| {cell} | {cli_seconds:.1f} | {fit_seconds:.1f} | {inside:.1f} | "
              f"{100 * share:.2f} % |")  # fmt: skip


def run_cell(run, cell: str, common: list[str], out: Path):
    """``./run.sh`` seconds of a quick-sweep cell, and the estimator of the same settings."""
    from scarce_ltr.api import PretrainedRanker, TreeRanker

    start = time.perf_counter()
    if "+" in cell:
        method, strategy = cell.split("+")
        run(["pretrain", method, *common, "epochs=20", f"run_dir={out}-p"])
        run(["finetune", strategy, *common, "optimizer.lr=2e-4", f"pretrained={out}-p",
             f"run_dir={out}-f"])  # fmt: skip
        # the quick sweep's overrides (configs/sweep/quick.yaml)
        estimator = PretrainedRanker(method, strategy, pretrain__epochs=20,
                                     finetune__optimizer__lr=2e-4)  # fmt: skip
    else:
        gbdt = ["data.transform=none", "gbdt.num_threads=1"] if cell == "gbdt" else []
        run(["baseline", cell, *common, *gbdt, f"run_dir={out}-b"])
        estimator = TreeRanker(cell, **({"gbdt__num_threads": 1} if cell == "gbdt" else {}))
    return time.perf_counter() - start, estimator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=136)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", default=None)
    parser.add_argument("--skip-read", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--cells", default="gbdt,resnet,simclr-rank+full")
    args = parser.parse_args()
    if not args.skip_read:
        reading(args)
    if not args.skip_overhead:
        overhead(args)


if __name__ == "__main__":
    main()
