"""The searched augmentations on the Yandex folds (issue 46, item 5): yandex-augmentations.yaml.

Each pretraining variant of that sweep finetuned under the 30-trial search, paired over the
(fold, seed) units with the same search on a fresh encoder (``scratch+full``): test NDCG@5
margin, its spread, the one-sided paired p and n, and the vali margin beside it; then, per
method, the variant vali picks in each unit where all of them ran. The control is the
sweep's own ``scratch+full`` where it ran, else ``--control``'s (the hybrid sweep's: the same
folds, seeds and label draws, the same search; the runs are deterministic), so that a variant
screened on vali can be searched alone (``models=[simsiam@zero0.1+full]`` on the sweep's command
line) without searching the control twice. Test never chooses anything here.

    ./run.sh sweep yandex-augmentations 'fractions=[0.01]' 'models=[simsiam@zero0.1+full]'
    .venv/bin/python benchmarks/bench_yandex_augmentations.py \\
        [--sweep runs/sweeps/yandex-augmentations] [--control runs/sweeps/yandex-hybrid]
"""

from __future__ import annotations

from pathlib import Path

from bench_flags_screen import row, scores_of, vali_choice
from ohsumed_folds import ROOT, fold_seed_units, readout_parser

SCRATCH = "scratch+full"
# method -> its variants (the sweep's model names), the config's augmentation first
METHODS = {
    "SimCLR-Rank, noise 1.0": (
        "simclr-rank@noise1+full",
        "simclr-rank@noise1-flags0.3+full",
        "simclr-rank@noise1-flags0.6+full",
    ),
    "SimSiam, zeroing 0.1": (
        "simsiam@zero0.1+full",
        "simsiam@zero0.1-flags0.3+full",
        "simsiam@zero0.1-flags0.6+full",
    ),
}


def main() -> None:
    parser = readout_parser(__doc__, "yandex-augmentations", seeds=(0, 1))
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--control", type=Path, default=ROOT / "runs" / "sweeps" / "yandex-hybrid")
    args = parser.parse_args()
    units = fold_seed_units(args)
    scratch = scores_of(args.sweep, SCRATCH, units, args.fraction)
    source = args.sweep
    if not scratch:
        scratch, source = scores_of(args.control, SCRATCH, units, args.fraction), args.control
    print(f"\n### Yandex, {args.fraction:g} of the train QGs labeled: each searched pretraining - "
          f"the searched scratch+full ({len(scratch)} units, from {source})\n")  # fmt: skip
    print("| pretraining + searched `full` | units | test NDCG@5 | test margin over "
          "scratch+full | vali margin |")  # fmt: skip
    print("|---|---|---|---|---|")
    for method, variants in METHODS.items():
        found = [scores_of(args.sweep, v, units, args.fraction) for v in variants]
        for variant, scores in zip(variants, found, strict=True):
            if scores:
                print(row(f"`{variant}`", scores, scratch))
        ran = [scores for scores in found if scores]
        if len(ran) > 1:
            print(row(f"{method}: the variant vali picks per unit", vali_choice(*ran), scratch))


if __name__ == "__main__":
    main()
