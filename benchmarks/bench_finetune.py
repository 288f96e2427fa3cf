"""Finetuning benchmark: seconds per epoch, and pretrained rankers against the baselines.

For each data set, label fraction and seed, through the CLI into a runs folder:
``pretrain simclr-rank`` and ``pretrain simsiam`` (once per data set and seed: pretraining sees
no label), ``finetune full`` from each, ``baseline resnet`` (no pretraining) and
``baseline gbdt`` (LightGBM LambdaMART). Test NDCG@5 and Outlier-NDCG@5 are then tabulated as
mean and standard deviation over seeds. Every run is skipped once DONE, so the script resumes
where it stopped; ``--budget-minutes`` stops launching runs after that much wall time (the table
says how many seeds each cell holds). ``--timing`` measures seconds per finetuning epoch alone.

    .venv/bin/python benchmarks/bench_finetune.py --budget-minutes 15
    .venv/bin/python benchmarks/bench_finetune.py --data ohsumed --seeds 0,1,2 --summary-only
    .venv/bin/python benchmarks/bench_finetune.py --timing

Finetuning and the ResNet baseline keep the paper's epochs (200 and 300, early stopping with
patience 30 ends most runs sooner); pretraining gets 10 epochs instead of 300 to fit a CPU
(``--pretrain-epochs``, ``--finetune-epochs``, ``--baseline-epochs``; recorded in the summary).
Runs use one torch thread: on small batches and shared cores more threads are slower.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("WANDB_MODE", "disabled")

DATASETS = {
    # name: (overrides, label fractions): fractions leave a few, some and many labeled QGs
    "synthetic": ([], [0.02, 0.1, 0.5]),  # 300 train QGs: 6, 30, 150 labeled
    "ohsumed": (
        ["data=ohsumed", "data.path=../shared/data/ohsumed-letor3"],
        [0.1, 0.3, 1.0],  # 63 train QGs: 7, 19, 63 labeled
    ),
}
PRETRAIN = ("simclr-rank", "simsiam")
METHODS = ("full-simclr-rank", "full-simsiam", "resnet", "gbdt")


def jobs(args: argparse.Namespace, data: str) -> list[tuple[str, list[str], Path]]:
    """``(method, CLI argv, run dir)`` in the order to run them: seed by seed."""
    overrides, fractions = DATASETS[data]
    fractions = args.fractions or fractions
    root = args.runs_dir / data
    common = [*overrides, "logger=none", *args.extra]
    out = []
    for seed in args.seeds:
        pretrained = {}
        for method in PRETRAIN:
            pretrained[method] = root / "pretrain" / method / f"seed={seed}"
            argv = ["pretrain", method, *common, f"seed={seed}", f"epochs={args.pretrain_epochs}"]
            out.append((f"pretrain-{method}", argv, pretrained[method]))
        for fraction in fractions:
            setting = [*common, f"seed={seed}", f"scarcity.fraction={fraction}"]
            tag = f"frac={fraction:g}/seed={seed}"
            for method in PRETRAIN:
                argv = ["finetune", "full", *setting, f"pretrained={pretrained[method]}"]
                argv.append(f"epochs={args.finetune_epochs}")
                out.append((f"full-{method}", argv, root / f"full-{method}" / tag))
            argv = ["baseline", "resnet", *setting, f"epochs={args.baseline_epochs}"]
            out.append(("resnet", argv, root / "resnet" / tag))
            out.append(("gbdt", ["baseline", "gbdt", *setting], root / "gbdt" / tag))
    return out


def run_jobs(args: argparse.Namespace) -> None:
    import torch

    from scarce_ltr.cli import run
    from scarce_ltr.core.errors import UserError

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    for data in args.data:
        for method, argv, run_dir in jobs(args, data):
            if (run_dir / "DONE").is_file():
                continue
            if time.perf_counter() - start > args.budget_minutes * 60:
                print(f"budget of {args.budget_minutes} min spent; stopping", file=sys.stderr)
                return
            began = time.perf_counter()
            try:
                run([*argv, f"run_dir={run_dir}"])
            except UserError as exc:
                print(f"{run_dir}: {exc}", file=sys.stderr)
                continue
            print(f"{time.perf_counter() - began:7.1f} s  {method:18s} {run_dir}", flush=True)


def summarize(args: argparse.Namespace) -> dict:
    """``{data: {fraction: {method: {metric: [values over seeds]}}}}`` and a printed table."""
    summary: dict = {}
    for data in args.data:
        for method, _, run_dir in jobs(args, data):
            if method.startswith("pretrain") or not (run_dir / "DONE").is_file():
                continue
            report = json.loads((run_dir / "report.json").read_text())
            test = report["metrics"]["test"]
            fraction = run_dir.parent.name
            cell = summary.setdefault(data, {}).setdefault(fraction, {}).setdefault(method, {})
            for key in ("ndcg@5", "outlier_ndcg@5"):
                cell.setdefault(key, []).append(test[key])
            if "seconds_per_epoch" in report:
                cell.setdefault("seconds_per_epoch", []).append(report["seconds_per_epoch"])
    for data, fractions in summary.items():
        print(f"\n{data}: test NDCG@5 / Outlier-NDCG@5, mean ± std over seeds (n)")
        print(f"| fraction | {' | '.join(METHODS)} |")
        print("|---" * (len(METHODS) + 1) + "|")
        for fraction, cells in fractions.items():
            row = [_cell(cells.get(m)) for m in METHODS]
            print(f"| {fraction} | {' | '.join(row)} |")
    return summary


def _cell(cell: dict | None) -> str:
    if not cell:
        return "-"
    parts = []
    for key in ("ndcg@5", "outlier_ndcg@5"):
        values = [v for v in cell[key] if v == v]  # drop NaN (no outlier QG)
        if not values:
            parts.append("nan")
            continue
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        parts.append(f"{statistics.mean(values):.3f}±{spread:.3f}")
    return f"{' / '.join(parts)} ({len(cell['ndcg@5'])})"


def timing(args: argparse.Namespace) -> None:
    """Seconds per ``full`` finetuning epoch with every train QG labeled (fresh encoder)."""
    import torch

    from scarce_ltr.cli import run

    torch.set_num_threads(args.threads)
    for data in args.data:
        run_dir = args.runs_dir / data / "timing" / f"threads={args.threads}"
        overrides = [*DATASETS[data][0], "logger=none", *args.extra]
        argv = ["finetune", "full", *overrides, "pretrained=none", "epochs=6", "patience=null"]
        if not (run_dir / "DONE").is_file():
            run([*argv, f"run_dir={run_dir}"])
        report = json.loads((run_dir / "report.json").read_text())
        labels = report["labels"]
        print(
            f"{data}: {report['seconds_per_epoch']:.3f} s per epoch "
            f"({report['train_seconds_per_epoch']:.3f} s training on "
            f"{labels['train_labeled_items']} items in {labels['train_labeled_groups']} QGs, "
            f"the rest scoring vali), {report['parameters']['total']} parameters, "
            f"{report['device']}, {args.threads} thread(s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="synthetic,ohsumed", type=lambda s: s.split(","))
    parser.add_argument("--fractions", type=lambda s: [float(v) for v in s.split(",")])
    parser.add_argument("--seeds", default="0,1,2", type=lambda s: [int(v) for v in s.split(",")])
    parser.add_argument("--pretrain-epochs", type=int, default=10)  # paper: 300
    parser.add_argument("--finetune-epochs", type=int, default=200)  # paper: 100 + 100
    parser.add_argument("--baseline-epochs", type=int, default=300)  # paper: 300
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument("--budget-minutes", type=float, default=15.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--extra", nargs="*", default=[], help="key=value for every run")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--timing", action="store_true")
    args = parser.parse_args()
    os.chdir(ROOT)  # data.path=../shared/... is relative to the project root
    if args.timing:
        timing(args)
        return
    if not args.summary_only:
        run_jobs(args)
    summary = summarize(args)
    settings = {k: str(v) for k, v in vars(args).items()}
    out = args.runs_dir / "summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": settings, "results": summary}, indent=1) + "\n")
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
