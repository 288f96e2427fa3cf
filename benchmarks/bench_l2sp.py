"""L2-SP finetuning against the pretrained DL and the same ResNet from scratch (issue 30, item 5).

On OHSUMED's five folds x seeds x label fractions, vali fully labeled, with the hybrid sweep's
settings (configs/sweep/ohsumed-hybrid.yaml), test NDCG@5 of:

- (a) ``simclr-rank+full``: full finetuning at lr 2e-4 of the SimCLR-Rank encoder (20 epochs);
- (b) the same with L2-SP, ``l2sp_grid=[...]``: one model per alpha, the vali-best kept (alpha
  chosen per fold, seed and fraction on vali NDCG@5);
- (c) ``resnet``: the same network from scratch with its own lr grid.

(a), (c) and the one pretraining per (fold, seed) are the sweep ``configs/sweep/ohsumed-l2sp.yaml``
(run first, by this script, unless ``--no-sweep``); (b) finetunes each of that sweep's
pretrainings through the CLI, one process per run, ``--jobs`` at a time, in
``<sweep>/ohsumed/fold=<k>/finetune/simclr-rank+full+l2sp/frac=<f>/seed=<s>/``. A run holding
``DONE`` is skipped, so the script resumes. Test is reported only, never chosen on.

    nice -n 10 .venv/bin/python benchmarks/bench_l2sp.py [--folds 1 2 3 4 5] [--seeds 0 1 2]
        [--fractions 0.05 0.2] [--grid 0.01 0.1 1 10] [--jobs 2] [--no-sweep]

Prints markdown tables (mean ± std over the units, paired margins with one- and two-sided
paired t-tests, the alphas chosen, seconds per run) and writes ``<sweep>/l2sp-results.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

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

SWEEP = "ohsumed-l2sp"
MODELS = {"a": "simclr-rank+full", "b": "simclr-rank+full+l2sp", "c": "resnet"}


def run_l2sp(cell: tuple[int, int, float], args) -> None:
    """The sweep's (a) job for this cell, with the alpha grid."""
    fold, seed, fraction = cell
    encoder = pretraining(args.sweep, fold, seed)
    grid = "l2sp_grid=[" + ",".join(f"{a:g}" for a in args.grid) + "]"
    run_finetuning(
        run_dir(args.sweep, MODELS["b"], fold, seed, fraction),
        [*finetune_args(fold, seed, fraction, encoder), grid],
        f"l2sp fold {fold} seed {seed} frac {fraction:g}",
        wait_for=encoder,
    )


def seconds(folder: Path) -> float:
    """Wall seconds of a finished run: its config written at the start, DONE at the end."""
    return (folder / "DONE").stat().st_mtime - (folder / "config.yaml").stat().st_mtime


def moved(folder: Path, pretrained: Path) -> float:
    """Squared distance of a finetuned model's encoder parameters from the pretrained ones."""
    import torch

    model = torch.load(folder / "model.pt", weights_only=True)["state_dict"]
    encoder = torch.load(pretrained / "encoder.pt", weights_only=True)["state_dict"]
    names = [k for k, v in encoder.items() if v.is_floating_point() and "running" not in k]
    return sum(float((model[f"encoder.{k}"] - encoder[k]).pow(2).sum()) for k in names)


def collect(args) -> list[dict]:
    def per_run(key: str, folder: Path, report: dict, row: dict) -> None:
        if key == "b":
            row["alpha"] = report["l2sp"]
            row["grid_vali"] = {g["l2sp"]: g["best_vali_ndcg@5"] for g in report["lr_grid"]}
        if key in ("a", "b"):
            row[f"{key}_head_epoch"] = head_phase_kept(report)
            row[f"{key}_moved"] = moved(folder, pretraining(args.sweep, row["fold"], row["seed"]))

    def per_unit(row: dict) -> None:
        pre = pretraining(args.sweep, row["fold"], row["seed"])
        if (pre / "DONE").is_file():
            row["pretrain_seconds"] = seconds(pre)

    return collect_rows(args, MODELS, per_run, per_unit)


def report(rows: list[dict], args) -> None:
    for fraction in args.fractions:
        units = [r for r in rows if r["fraction"] == fraction and all(k in r for k in "abc")]
        print(f"\n### {fraction:.0%} labeled train QGs: n = {len(units)} (fold, seed) units\n")
        if not units:
            continue
        print("| model | test NDCG@5 (mean ± std) | vali NDCG@5 | s per run |")
        print("|---|---|---|---|")
        for key, name in (
            ("a", "(a) simclr-rank+full"),
            ("b", "(b) + L2-SP, alpha on vali"),
            ("c", "(c) resnet"),
        ):
            test = [r[key] for r in units]
            vali = [r[f"{key}_vali"] for r in units]
            secs = [r[f"{key}_seconds"] for r in units]
            spread = f"{np.mean(test):.3f} ± {np.std(test, ddof=1):.3f}"
            print(f"| {name} | {spread} | {np.mean(vali):.3f} | {np.mean(secs):.0f} |")
        print("\n| paired margin | test NDCG@5 |")
        print("|---|---|")
        for p, q in (("b", "c"), ("b", "a"), ("a", "c")):
            print(f"| ({p}) - ({q}) | {paired([r[p] for r in units], [r[q] for r in units])} |")
        ties = sum(r["a"] == r["b"] for r in units)
        print(f"\n(b) = (a) exactly on test in {ties}/{len(units)} units")
        for key in ("a", "b"):
            dist = [r[f"{key}_moved"] for r in units]
            print(
                f"({key}) kept model's encoder, squared distance from pretrained: "
                f"median {np.median(dist):.3f}, max {np.max(dist):.3f}"
            )
        tied = sum(len(set(r["grid_vali"].values())) == 1 for r in units)
        by_alpha = {a: np.mean([r["grid_vali"][a] for r in units]) for a in units[0]["grid_vali"]}
        print(
            f"every alpha the same vali NDCG@5 in {tied}/{len(units)} units; mean vali per alpha: "
            + ", ".join(f"{a:g}: {v:.4f}" for a, v in by_alpha.items())
        )
        alphas = [r["alpha"] for r in units]
        counts = {a: alphas.count(a) for a in sorted(set(alphas))}
        print(
            f"\nalpha chosen on vali: {counts}; vali-best epoch in the head-only phase: "
            f"(a) {sum(r['a_head_epoch'] for r in units)}/{len(units)}, "
            f"(b) {sum(r['b_head_epoch'] for r in units)}/{len(units)}"
        )
    pre = [r["pretrain_seconds"] for r in rows if "pretrain_seconds" in r]
    if pre:
        reuse = "reused by (a), (b) and both fractions"
        print(f"\npretraining: {np.mean(pre):.0f} s per (fold, seed), {reuse}")


def main() -> None:
    parser = ohsumed_folds.parser(__doc__, SWEEP)
    parser.add_argument("--grid", type=float, nargs="+", default=[0.01, 0.1, 1.0, 10.0])
    args = parser.parse_args()
    cells = units(args)
    run_all(SWEEP, args, cells, lambda cell: run_l2sp(cell, args))
    rows = collect(args)
    (args.sweep / "l2sp-results.json").write_text(
        json.dumps({"grid": args.grid, "rows": rows}, indent=1)
    )
    report(rows, args)


if __name__ == "__main__":
    main()
