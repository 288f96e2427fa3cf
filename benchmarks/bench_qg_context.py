"""Is the released recipe's gain the QG context? Give the ranker that context directly (issue 60).

The released SimCLR recipe's encoders put 87-90 % of their embeddings' variance between QGs
(bench_encoder_diagnostics.py): same-QG swaps and batch-wide negatives teach the encoder which QG
an item is in, and Yandex's features are not normalised per query (43 % of their variance lies
between QGs). If that is what pays, a network from scratch that sees each QG's mean features
beside the item's own should gain as much, with no pretraining. This script writes the five
Yandex folds with each item's QG means appended (features 51-100: the mean of features 1-50
over the item's QG; labels, QGs and their order unchanged, so every seeded label draw is the
same), outside the project, and pairs the runs of configs/sweep/yandex-context.yaml on them
against configs/sweep/yandex-released.yaml's on the plain folds (the same fixed recipe):

    .venv/bin/python benchmarks/bench_qg_context.py write --out /work/runs-yandex/data/yandex-ctx
    LTR_YANDEX_CTX=/work/runs-yandex/data/yandex-ctx ./run.sh sweep yandex-context   (resumable)
    .venv/bin/python benchmarks/bench_qg_context.py table --runs $LTR_RUNS_DIR/sweeps

A QG's mean needs the whole QG at scoring time, as `qg-standardize` does; nothing here is a
project option yet: the question is whether it pays.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from ohsumed_folds import finished_report, paired

SPLITS = ("train", "vali", "test")
MODELS = ("scratch+full", "simclr@released+full")
FRACTIONS = (0.01, 0.03, 0.1)


def qg_means(features: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``[n_items, d]``: each item's QG mean of every feature."""
    sizes = np.diff(offsets)
    sums = np.add.reduceat(features.astype(np.float64), offsets[:-1], axis=0)
    return np.repeat(sums / sizes[:, None], sizes, axis=0)


def write(args) -> None:
    from scarce_ltr.data.letor import read_letor, write_letor

    source = Path(args.source)
    for fold in range(1, 6):
        folder = Path(args.out) / f"Fold{fold}"
        folder.mkdir(parents=True, exist_ok=True)
        for split in SPLITS:
            data = read_letor(source / f"Fold{fold}" / f"{split}.txt.gz")
            wider = np.hstack([data.features, qg_means(data.features, data.offsets)])
            target = folder / f"{split}.txt.gz"
            partial = folder / f"{split}.partial.txt.gz"  # whole files only under the name
            write_letor(data.with_features(wider.astype(np.float32)), partial)
            partial.replace(target)
            print(f"{target}: {data.n_items:,} items, {wider.shape[1]} features")


def cell(runs: Path, sweep: str, model: str, fold: int, seed: int, fraction: float):
    folder = runs / sweep / "yandex" / f"fold={fold}" / "finetune" / model
    report = finished_report(folder / f"frac={fraction:g}" / f"seed={seed}")
    if report is None:
        return None
    return report["metrics"]["test"]["ndcg@5"], report["best_vali_ndcg@5"]


def table(args) -> None:
    runs = Path(args.runs)
    print("| budget | model | units | test NDCG@5, context | plain | context - plain | "
          "context - plain released | vali: context - plain |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for fraction in FRACTIONS:
        for model in MODELS:
            rows = []
            for fold in range(1, 6):
                for seed in args.seeds:
                    ctx = cell(runs, "yandex-context", model, fold, seed, fraction)
                    plain = cell(runs, "yandex-released", model, fold, seed, fraction)
                    released = cell(runs, "yandex-released", MODELS[1], fold, seed, fraction)
                    if ctx and plain and released:
                        rows.append((ctx, plain, released))
            if len(rows) < 2:
                continue
            test = [r[0][0] for r in rows]
            print(
                f"| {fraction:g} | `{model}` | {len(rows)} | {np.mean(test):.4f} | "
                f"{np.mean([r[1][0] for r in rows]):.4f} | "
                f"{paired(test, [r[1][0] for r in rows])} | "
                f"{paired(test, [r[2][0] for r in rows])} | "
                f"{np.mean([r[0][1] - r[1][1] for r in rows]):+.4f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    w = commands.add_parser("write", help="the folds with QG means appended")
    w.add_argument("--source", default=str(Path(__file__).parents[2] / "shared/data/yandex-web"))
    w.add_argument("--out", required=True)
    t = commands.add_parser("table", help="pair the sweeps' cells")
    t.add_argument("--runs", required=True, help="the sweeps' folder ($LTR_RUNS_DIR/sweeps)")
    t.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    write(args) if args.command == "write" else table(args)


if __name__ == "__main__":
    main()
