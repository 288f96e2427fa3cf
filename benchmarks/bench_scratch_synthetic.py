"""Pretraining against the same recipe from scratch on the synthetic default (issue 30, item 5).

The quick sweep's `simclr-rank+full` and `resnet` beside `scratch+full` (the same finetuning on
a fresh encoder, `pretrained=none`), seeds 0-5, at its 2 %, 10 % and 50 % labels: does the
pretrained DL's lead over `resnet` on the synthetic default come from pretraining or from the
finetuning recipe? benchmarks/bench_recipe.py asks the same on OHSUMED's five folds. And how
much of the unlabeled pool does pretraining need: `simclr-rank@pool10+full` and
`simclr-rank@pool30+full` pretrain on 10 % and 30 % of the train QGs (`pool_fraction`). And
the unlabeled QGs used during finetuning instead: `scratch+full~self` and
`simclr-rank+full~self` (`teacher=self`, consistency regularisation; docs/teachers.md).

    nice -n 10 .venv/bin/python benchmarks/bench_scratch_synthetic.py [--seeds 0 1 2 3 4 5]
        [--workers 1] [--models p s r c C] [--report-only]

``--workers`` sets the sweep's threads per job (cores / workers): the figures in BENCHMARKS.md
ran at workers=1 on 2 cores, so they differ from the README's quick table (workers=2) in the
last digits. Prints test NDCG@5 per model and the paired margins (one- and two-sided paired
t-tests over seeds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
from ohsumed_folds import ROOT, paired

# Pretraining pools: a variant per share of the train QGs pretraining reads (pool_fraction).
POOLS = {"p10": 0.1, "p30": 0.3}
MODELS = {"p": "simclr-rank+full", "s": "scratch+full", "r": "resnet"}
MODELS |= {key: f"simclr-rank@pool{round(100 * share)}+full" for key, share in POOLS.items()}
MODELS |= {"c": "scratch+full~self", "C": "simclr-rank+full~self"}  # consistency (teacher=self)
FRACTIONS = (0.02, 0.1, 0.5)  # configs/sweep/quick.yaml's
MARGINS = [("p", "s", "pretraining, same recipe"), ("s", "r", "recipe"), ("p", "r", "both")]
MARGINS += [(key, "s", f"pretraining on {share:.0%} of the pool") for key, share in POOLS.items()]
MARGINS += [("p", key, f"the whole pool against {share:.0%}") for key, share in POOLS.items()]
MARGINS += [
    ("c", "s", "consistency on the unlabeled QGs, fresh encoder"),
    ("C", "p", "consistency on top of pretraining"),
    ("c", "p", "consistency against pretraining"),
    ("C", "s", "pretraining and consistency against neither"),
]


def test_ndcg(sweep: Path, key: str, fraction: float, seed: int) -> float | None:
    stage = "baseline" if MODELS[key] == "resnet" else "finetune"
    folder = sweep / "synthetic" / stage / MODELS[key] / f"frac={fraction:g}" / f"seed={seed}"
    if not (folder / "DONE").is_file():
        return None
    return json.loads((folder / "report.json").read_text())["metrics"]["test"]["ndcg@5"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--sweep", type=Path, default=ROOT / "runs" / "sweeps" / "quick-scratch")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    if not args.report_only:
        models = "models=[" + ",".join(MODELS[key] for key in args.models) + "]"
        seeds = "seeds=[" + ",".join(map(str, args.seeds)) + "]"
        command = [str(ROOT / "run.sh"), "sweep", "quick", models, seeds, "logger=none"]
        command += [
            f"variants.pool{round(100 * share)}=[pool_fraction={share}]" for share in POOLS.values()
        ]
        command += [f"workers={args.workers}", "report=false", f"run_dir={args.sweep}"]
        subprocess.run(command, check=True)
    for fraction in FRACTIONS:
        scores = {
            key: {seed: test_ndcg(args.sweep, key, fraction, seed) for seed in args.seeds}
            for key in args.models
        }
        print(f"\n### {fraction:.0%} labeled train QGs\n")
        print("| model | test NDCG@5 (mean ± std over seeds) |\n|---|---|")
        for key in args.models:
            model = MODELS[key]
            done = [v for v in scores[key].values() if v is not None]
            if len(done) > 1:
                print(f"| ({key}) {model} | {np.mean(done):.3f} ± {np.std(done, ddof=1):.3f} |")
        print("\n| paired margin | what it isolates | test NDCG@5 |\n|---|---|---|")
        for first, second, what in MARGINS:
            if first not in scores or second not in scores:
                continue
            seeds = [s for s in args.seeds if None not in (scores[first][s], scores[second][s])]
            if len(seeds) < 2:
                continue
            x = [scores[first][s] for s in seeds]
            y = [scores[second][s] for s in seeds]
            print(f"| ({first}) - ({second}) | {what} | {paired(x, y)} |")


if __name__ == "__main__":
    main()
