"""Does pretraining use the pool? (issue 46, item 4) The curve of configs/sweep/yandex-pool.yaml.

For each pretraining setting of that sweep (pool 10 / 30 / 100 % of the train QGs, train +
vali, 5 / 20 / 40 epochs) it pairs the finetuned encoder's test NDCG@5 with the same finetuning
from a fresh encoder (``scratch+full``) over the (fold, seed) units both finished: the margin,
its spread, the one-sided paired p and n. Then the pool-size curve: the margin against log10
of the QGs pretraining read, a least-squares line per unit (its slope's mean and std over the
units) and the line of the means, with what that line projects for a 30k-QG pool (the paper's
sets) — a projection of a fitted line, not a measurement; it says something only where the
slope is clearly non-zero. Vali is never used here; the sweep chose nothing.

    nice -n 19 ./run.sh sweep yandex-pool 'seeds=[0]' logger=none   (the runs; resumable)
    .venv/bin/python benchmarks/bench_pool_curve.py [--sweep runs/sweeps/yandex-pool]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ohsumed_folds import finished_report, fold_seed_units, paired, readout_parser, run_dir

SCRATCH = "scratch+full"
TRAIN_QGS, VALI_QGS = 2001, 667  # a Yandex fold's (../shared/data/README.md)
# model -> (what it varies, the QGs its pretraining read; None: not on the pool curve)
SETTINGS = {
    "simclr-rank@pool10+full": ("pool 10 %, 20 epochs", round(0.1 * TRAIN_QGS)),
    "simclr-rank@pool30+full": ("pool 30 %, 20 epochs", round(0.3 * TRAIN_QGS)),
    "simclr-rank+full": ("pool 100 %, 20 epochs", TRAIN_QGS),
    "simclr-rank@vali+full": ("train + vali, 20 epochs", TRAIN_QGS + VALI_QGS),
    "simclr-rank@ep5+full": ("pool 100 %, 5 epochs", None),
    "simclr-rank@ep40+full": ("pool 100 %, 40 epochs", None),
}
PROJECT_TO = 30_000  # QGs: MSLR-WEB30K's order


def test_scores(sweep: Path, model: str, units, fraction: float) -> dict:
    scores = {}
    for fold, seed in units:
        report = finished_report(run_dir(sweep, model, fold, seed, fraction, data="yandex"))
        if report is not None:
            scores[fold, seed] = report["_test"]
    return scores


def main() -> None:
    parser = readout_parser(__doc__, "yandex-pool")
    parser.add_argument("--fraction", type=float, default=0.01)
    args = parser.parse_args()
    units = fold_seed_units(args)
    scratch = test_scores(args.sweep, SCRATCH, units, args.fraction)
    print(f"\n### Yandex, {args.fraction:g} of the train QGs labeled: pretraining - scratch+full\n")
    print(f"scratch+full: {len(scratch)} units, test NDCG@5 {np.mean(list(scratch.values())):.4f}"
          if scratch else "scratch+full: no finished unit")  # fmt: skip
    print("\n| pretraining | QGs read | units | test NDCG@5 | margin over scratch+full |")
    print("|---|---|---|---|---|")
    margins: dict[str, dict] = {}
    for model, (what, qgs) in SETTINGS.items():
        scores = test_scores(args.sweep, model, units, args.fraction)
        both = [u for u in units if u in scores and u in scratch]
        if not both:
            print(f"| {what} | {qgs or TRAIN_QGS} | 0 | | |")
            continue
        margins[model] = {u: scores[u] - scratch[u] for u in both}
        pretrained, fresh = [scores[u] for u in both], [scratch[u] for u in both]
        print(f"| {what} | {qgs or TRAIN_QGS} | {len(both)} | {np.mean(pretrained):.4f} "
              f"| {paired(pretrained, fresh)} |")  # fmt: skip
    pool_curve(margins, units)


def pool_curve(margins: dict[str, dict], units) -> None:
    """The margin against log10(QGs read): a line per unit and the line of the means."""
    on_curve = [(m, SETTINGS[m][1]) for m in margins if SETTINGS[m][1] is not None]
    if len(on_curve) < 2:
        print("\nPool curve: fewer than two pool sizes finished.")
        return
    x = np.log10([qgs for _, qgs in on_curve])
    slopes = []
    for unit in units:
        ys = [margins[m].get(unit) for m, _ in on_curve]
        if all(y is not None for y in ys):
            slopes.append(np.polyfit(x, ys, 1)[0])
    means = [np.mean(list(margins[m].values())) for m, _ in on_curve]
    slope, intercept = np.polyfit(x, means, 1)
    projected = slope * np.log10(PROJECT_TO) + intercept
    spread = f"{np.mean(slopes):+.4f} ± {np.std(slopes, ddof=1):.4f} over {len(slopes)} units" \
        if len(slopes) >= 2 else f"{len(slopes)} unit(s) with every pool size"  # fmt: skip
    print(
        f"\nPool curve ({', '.join(f'{q} QGs' for _, q in on_curve)}): margin = "
        f"{slope:+.4f} x log10(QGs) {intercept:+.4f} (the means); the slope per unit: {spread}. "
        f"Projected at {PROJECT_TO:,} QGs: {projected:+.4f} NDCG@5 (a fitted line's value, not a "
        "measurement)."
    )


if __name__ == "__main__":
    main()
