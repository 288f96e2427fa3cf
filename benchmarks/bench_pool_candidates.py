"""Every use of the unlabeled pool screened on the Yandex folds (issue 60, items 5-6), one table.

Each candidate is a finetuned model of some sweep folder, paired over the (fold, seed) units
with ``scratch+full`` of its control sweep (the same folds, seeds, label draws and finetuning
recipe): test NDCG@5, the margin with its spread and one-sided p, the vali margin, and, with
``--ceiling`` (the oracle encoder's margin over the same ``scratch+full``,
benchmarks/bench_oracle_encoder.py; docs/results.md: +0.079 at 1 % under the fixed recipe), the
share of that ceiling the candidate captures. A candidate that loses stays in the table.

    .venv/bin/python benchmarks/bench_pool_candidates.py --runs $LTR_RUNS_DIR/sweeps [--seeds 0 1]
        [--fraction 0.01] [--ceiling 0.079]

The fixed-recipe screen (lr 2e-4, no search) reads yandex-released (the released recipe, the
pretext tasks) and yandex-joint (joint training), controlled by yandex-released's scratch+full;
the searched rows read yandex-hybrid (the 30-trial search on both sides).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_flags_screen import row, scores_of
from ohsumed_folds import ROOT

SCRATCH = "scratch+full"
# (what it is, the sweep holding it, its model, the sweep whose scratch+full controls it)
FIXED = [
    ("SimCLR-Rank, today's default (noise 1.0)", "yandex-released", "simclr-rank@noise1+full"),
    ("SimCLR, the released recipe (preset)", "yandex-released", "simclr@released+full"),
    ("SimCLR-Rank with the released views", "yandex-released", "simclr-rank@released-b256+full"),
    ("rank-pretext (random monotone orders)", "yandex-released", "rank-pretext+full"),
    ("qg-bins (in-QG quantile bins)", "yandex-released", "qg-bins+full"),
    ("released + joint SimCLR in finetuning (w 0.5)", "yandex-joint", "simclr@released+full"),
    ("released + rank-pretext (w 1)", "yandex-released", "simclr-pretext@released+full"),
    ("released + rank-pretext (w 5)", "yandex-released", "simclr-pretext@released-w5+full"),
    ("released + rank-pretext (w 20)", "yandex-released", "simclr-pretext@released-w20+full"),
]
SEARCHED = [
    ("SimCLR, the released recipe (preset)", "yandex-hybrid", "simclr@released+full"),
]
CONTROL = {"fixed": "yandex-released", "searched": "yandex-hybrid"}


def table(args, title: str, rows: list[tuple[str, str, str]], control: str) -> None:
    units = [(f, s) for s in args.seeds for f in args.folds]
    scratch = scores_of(args.runs / control, SCRATCH, units, args.fraction)
    header = "| units | test NDCG@5 | margin over scratch+full | vali margin |"
    share = " share of the ceiling |" if args.ceiling else ""
    print(f"\n### {title}: Yandex, {args.fraction:g} labeled, against {control}'s {SCRATCH} "
          f"({len(scratch)} units)\n")  # fmt: skip
    print(f"| use of the pool (model, sweep) {header}{share}")
    print("|---|---|---|---|---|" + ("---|" if share else ""))
    for what, sweep, model in rows:
        scores = scores_of(args.runs / sweep, model, units, args.fraction)
        line = row(f"{what} (`{model}`, {sweep})", scores, scratch)
        if args.ceiling:
            both = [u for u in scores if u in scratch]
            gain = sum(scores[u][0] - scratch[u][0] for u in both) / len(both) if both else None
            line += f" {gain / args.ceiling:+.0%} |" if gain is not None else " |"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "sweeps")
    parser.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--ceiling", type=float, default=None,
                        help="the oracle encoder's margin over scratch+full")  # fmt: skip
    args = parser.parse_args()
    table(args, "Fixed recipe (lr 2e-4, no search)", FIXED, CONTROL["fixed"])
    table(args, "30-trial search on both sides", SEARCHED, CONTROL["searched"])


if __name__ == "__main__":
    main()
