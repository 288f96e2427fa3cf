"""What pretraining adds under one finetuning recipe, and under LP-FT (issue 30, item 5).

On OHSUMED's five folds x seeds x label fractions, vali fully labeled, with the hybrid sweep's
settings (configs/sweep/ohsumed-hybrid.yaml), test NDCG@5 of:

- (p) ``simclr-rank+full``: full finetuning at lr 2e-4 of the SimCLR-Rank encoder (20 epochs);
- (s) ``scratch+full``: the same recipe on a fresh encoder (``pretrained=none``): the control
  that isolates the encoder from the recipe;
- (r) ``resnet``: the same network from scratch with its own lr grid and 300 epochs;
- (P) and (S): (p) and (s) under LP-FT, ``head_lr=<rate>``: the head-only phase at a linear
  probe's rate (benchmarks/hybrid-log.md: vali picks 1e-2 for the probe in 19 of 24 runs), then the
  whole network at 2e-4 from the vali-best head.

(p), (s), (r) and the one pretraining per (fold, seed) are the sweep
``configs/sweep/ohsumed-recipe.yaml`` (run first, by this script, unless ``--no-sweep``); (P) and
(S) finetune through the CLI, one process per run, ``--jobs`` at a time, in
``<sweep>/ohsumed/fold=<k>/finetune/<model>+lpft/frac=<f>/seed=<s>/``. A run holding ``DONE`` is
skipped, so the script resumes. Test is reported only, never chosen on.

    nice -n 10 .venv/bin/python benchmarks/bench_recipe.py [--folds 1 2 3 4 5] [--seeds 0 1 2]
        [--fractions 0.05 0.2] [--head-lr 1e-2] [--jobs 2] [--no-sweep] [--report-only]
        [--methods scarf+full vime+full ...]

``--methods``: other pretraining methods' ``<method>+full`` models the sweep ran (the command in
configs/sweep/ohsumed-recipe.yaml), reported beside the others and paired against (s) and (p).

Prints markdown tables (mean ± std over the units, paired margins with one- and two-sided
paired t-tests, seconds per run) and writes ``<sweep>/recipe-results.json``.
"""

from __future__ import annotations

import json

import numpy as np
import ohsumed_folds
from ohsumed_folds import (
    collect_rows,
    finetune_args,
    head_phase_kept,
    paired,
    pretraining,
    run_all,
    run_dir,
    run_finetuning,
    units,
)

SWEEP = "ohsumed-recipe"
LPFT = "+lpft"  # the folder suffix of an LP-FT run
MODELS = {
    "p": "simclr-rank+full",
    "s": "scratch+full",
    "r": "resnet",
    "P": f"simclr-rank+full{LPFT}",
    "S": f"scratch+full{LPFT}",
}
LABELS = {
    "p": "(p) simclr-rank+full, lr 2e-4",
    "s": "(s) scratch+full, the same recipe from a fresh encoder",
    "r": "(r) resnet, its lr grid",
    "P": "(P) simclr-rank+full, LP-FT",
    "S": "(S) scratch+full, LP-FT",
}
# (first, second): what each paired margin isolates
MARGINS = [
    ("p", "s", "pretraining, plain recipe"),
    ("P", "S", "pretraining, LP-FT"),
    ("P", "p", "LP-FT on the pretrained encoder"),
    ("S", "s", "LP-FT on a fresh encoder"),
    ("s", "r", "recipe: full from scratch against resnet"),
    ("p", "r", "pretrained DL against resnet"),
    ("P", "r", "pretrained DL with LP-FT against resnet"),
]


# Other pretraining methods with the same full finetuning, when the sweep ran them (the
# command in configs/sweep/ohsumed-recipe.yaml); each against (s) and (p).
OTHER_METHODS = ("scarf+full", "vime+full", "simsiam+full", "simclr-rank@zero0.7+full")


def with_other_methods(args) -> tuple[dict, dict, list]:
    """MODELS, LABELS and MARGINS with ``--methods``' models added."""
    models = MODELS | {m: m for m in args.methods}
    labels = LABELS | {m: f"({m}) {m}, lr 2e-4" for m in args.methods}
    margins = [*MARGINS]
    for m in args.methods:
        margins += [
            (m, "s", f"pretraining with {m.split('+')[0]}"),
            (m, "p", "against simclr-rank"),
        ]
    return models, labels, margins


def run_lpft(cell: tuple[str, int, int, float], args) -> None:
    """The sweep's job of (p) or (s) for this cell, with the head phase at ``args.head_lr``."""
    model, fold, seed, fraction = cell
    encoder = pretraining(args.sweep, fold, seed) if model == "P" else None
    run_finetuning(
        run_dir(args.sweep, MODELS[model], fold, seed, fraction),
        [*finetune_args(fold, seed, fraction, encoder or "none"), f"head_lr={args.head_lr:g}"],
        f"{MODELS[model]} fold {fold} seed {seed} frac {fraction:g}",
        wait_for=encoder,
    )


def collect(args) -> list[dict]:
    def per_run(key: str, folder, report: dict, row: dict) -> None:
        if key != "r":
            row[f"{key}_head_epoch"] = head_phase_kept(report)

    return collect_rows(args, with_other_methods(args)[0], per_run)


def report(rows: list[dict], args) -> None:
    for fraction in args.fractions:
        units = [r for r in rows if r["fraction"] == fraction]
        print(f"\n### {fraction:.0%} labeled train QGs\n")
        print(
            "| model | n | test NDCG@5 (mean ± std) | vali NDCG@5 | s per run "
            "| kept epoch in the head phase |"
        )
        print("|---|---|---|---|---|---|")
        _, labels, margins = with_other_methods(args)
        for key, label in labels.items():
            have = [r for r in units if key in r]
            if not have:
                continue
            test = [r[key] for r in have]
            spread = f"{np.mean(test):.3f} ± {np.std(test, ddof=1):.3f}" if len(test) > 1 else ""
            vali = np.mean([r[f"{key}_vali"] for r in have])
            secs = np.mean([r[f"{key}_seconds"] for r in have])
            head = sum(r.get(f"{key}_head_epoch", False) for r in have)
            head_share = f"{head}/{len(have)}" if key != "r" else "-"
            print(f"| {label} | {len(have)} | {spread} | {vali:.3f} | {secs:.0f} | {head_share} |")
        print("\n| paired margin | what it isolates | n | test NDCG@5 |")
        print("|---|---|---|---|")
        for first, second, what in margins:
            both = [r for r in units if first in r and second in r]
            margin = paired([r[first] for r in both], [r[second] for r in both])
            print(f"| ({first}) - ({second}) | {what} | {len(both)} | {margin} |")


def main() -> None:
    parser = ohsumed_folds.parser(__doc__, SWEEP)
    parser.add_argument("--head-lr", type=float, default=1e-2)
    parser.add_argument("--methods", nargs="*", default=list(OTHER_METHODS), help="reported only")
    args = parser.parse_args()
    cells = [(model, *unit) for unit in units(args) for model in ("P", "S")]
    run_all(SWEEP, args, cells, lambda cell: run_lpft(cell, args))
    rows = collect(args)
    (args.sweep / "recipe-results.json").write_text(
        json.dumps({"head_lr": args.head_lr, "rows": rows}, indent=1)
    )
    report(rows, args)


if __name__ == "__main__":
    main()
