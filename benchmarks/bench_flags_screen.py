"""Flag noise on the Yandex folds (issue 46, item 5): the screen of configs/sweep/yandex-flags.yaml.

Each pretraining of that sweep (SimCLR-Rank with Gaussian noise, SimSiam with zeroing, each
without and with flag noise ``augment.binary_p=0.6``) finetuned with the fixed recipe at 1 % of
the train QGs labeled, paired over the (fold, seed) units with the same finetuning from a fresh
encoder (``scratch+full``): test NDCG@5 margin, its spread, the one-sided paired p and n, and the
vali margin beside it. Then, per method, the variant vali chooses in each unit (with or without
flag noise: the higher vali NDCG@5) against ``scratch+full`` — the honest figure for "flag noise
where vali picks it". Test never chooses anything here.

    ./run.sh sweep yandex-flags 'seeds=[0]' logger=none       (the runs; resumable)
    .venv/bin/python benchmarks/bench_flags_screen.py [--sweep runs/sweeps/yandex-flags]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ohsumed_folds import finished_report, fold_seed_units, paired, readout_parser, run_dir

SCRATCH = "scratch+full"
# method -> its variants without and with flag noise (the sweep's model names)
METHODS = {
    "SimCLR-Rank, noise 1.0": ("simclr-rank@noise1+full", "simclr-rank@noise1-flags0.6+full"),
    "SimSiam, zeroing 0.1": ("simsiam@zero0.1+full", "simsiam@zero0.1-flags0.6+full"),
}


def scores_of(sweep: Path, model: str, units, fraction: float) -> dict:
    """``{(fold, seed): (test, vali)}`` NDCG@5 of the model's finished runs."""
    found = {}
    for fold, seed in units:
        report = finished_report(run_dir(sweep, model, fold, seed, fraction, data="yandex"))
        if report is not None:
            found[fold, seed] = (report["_test"], report["_vali"])
    return found


def row(name: str, scores: dict, scratch: dict) -> str:
    both = [u for u in scores if u in scratch]
    if not both:
        return f"| {name} | 0 | | | |"
    test = [scores[u][0] for u in both]
    vali = [scores[u][1] for u in both]
    fresh_test, fresh_vali = [scratch[u][0] for u in both], [scratch[u][1] for u in both]
    return (f"| {name} | {len(both)} | {np.mean(test):.4f} | {paired(test, fresh_test)} "
            f"| {np.mean(vali) - np.mean(fresh_vali):+.4f} |")  # fmt: skip


def vali_choice(*variants: dict) -> dict:
    """Per unit where every variant ran, the variant with the highest vali NDCG@5 (the first
    listed on a tie)."""
    units = [u for u in variants[0] if all(u in v for v in variants)]
    return {u: max((v[u] for v in variants), key=lambda test_vali: test_vali[1]) for u in units}


def main() -> None:
    parser = readout_parser(__doc__, "yandex-flags")
    parser.add_argument("--fraction", type=float, default=0.01)
    args = parser.parse_args()
    units = fold_seed_units(args)
    scratch = scores_of(args.sweep, SCRATCH, units, args.fraction)
    print(f"\n### Yandex, {args.fraction:g} of the train QGs labeled: each pretraining - "
          f"scratch+full ({len(scratch)} units of scratch+full)\n")  # fmt: skip
    print("| pretraining + fixed-recipe `full` | units | test NDCG@5 | test margin over "
          "scratch+full | vali margin |")  # fmt: skip
    print("|---|---|---|---|---|")
    for method, (plain, flags) in METHODS.items():
        plain_scores = scores_of(args.sweep, plain, units, args.fraction)
        flag_scores = scores_of(args.sweep, flags, units, args.fraction)
        print(row(f"`{plain}`", plain_scores, scratch))
        print(row(f"`{flags}`", flag_scores, scratch))
        chosen = vali_choice(plain_scores, flag_scores)
        print(row(f"{method}: flags or not, chosen on vali", chosen, scratch))


if __name__ == "__main__":
    main()
