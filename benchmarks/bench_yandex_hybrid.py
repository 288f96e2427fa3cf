"""The hybrid comparison on the Yandex folds (issue 46, item 3): configs/sweep/yandex-hybrid.yaml.

Per budget, over the (fold, seed) units where every single model finished: each model's test
NDCG@5 and CPU seconds a cell; the deep rankers paired against the vali-best of the four trees
(gbdt, gbdt-optuna, catboost, xgboost: the report's GBDT group), `simclr-rank+full` and `resnet`
paired against `scratch+full` (the same searched finetuning on a fresh encoder: what pretraining
adds), and the model vali chooses among the seven single models in each unit (`./run.sh
select`'s argmax) against the vali-best tree. Ensembles are left to `./run.sh report`. Test never
chooses anything here.

    ./run.sh sweep yandex-hybrid 'fractions=[0.01]' 'seeds=[0]' logger=none   (resumable)
    .venv/bin/python benchmarks/bench_yandex_hybrid.py [--sweep runs/sweeps/yandex-hybrid]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from ohsumed_folds import ROOT, finished_report, paired

TREES = ("gbdt", "gbdt-optuna", "catboost", "xgboost")
DEEP = ("resnet", "scratch+full", "simclr-rank+full")
SCRATCH = "scratch+full"


def cell(sweep: Path, model: str, fold: int, seed: int, fraction: float) -> Path:
    stage = "finetune" if "+" in model else "baseline"
    return sweep / "yandex" / f"fold={fold}" / stage / model / f"frac={fraction:g}" / f"seed={seed}"


def unit_scores(sweep: Path, unit: tuple[int, int], fraction: float) -> dict | None:
    """``{model: (vali, test, cpu seconds)}`` of one unit; None until every model finished."""
    found = {}
    for model in TREES + DEEP:
        report = finished_report(cell(sweep, model, *unit, fraction))
        if report is None:
            return None
        found[model] = (report["_vali"], report["_test"], report.get("cpu_seconds", np.nan))
    return found


def vali_best(scores: dict, models: tuple[str, ...]) -> str:
    return max(models, key=lambda m: scores[m][0])  # the first listed on a tie


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", type=Path, default=ROOT / "runs" / "sweeps" / "yandex-hybrid")
    parser.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.03, 0.1])
    args = parser.parse_args()
    for fraction in args.fractions:
        units = [(f, s) for s in args.seeds for f in args.folds]
        done = {u: s for u in units if (s := unit_scores(args.sweep, u, fraction)) is not None}
        print(f"\n### Yandex, {fraction:g} of the train QGs labeled: {len(done)} unit(s) done\n")
        if not done:
            continue
        tree = {u: s[vali_best(s, TREES)][1] for u, s in done.items()}
        picks = {u: vali_best(s, TREES + DEEP) for u, s in done.items()}
        print("vali-best tree per unit: " + ", ".join(vali_best(s, TREES) for s in done.values()))
        print("vali's pick per unit: " + ", ".join(picks.values()) + "\n")
        print("| model | test NDCG@5 | CPU s a cell | minus the vali-best tree "
              "| minus scratch+full |")  # fmt: skip
        print("|---|---|---|---|---|")
        print(f"| vali-best tree | {np.mean(list(tree.values())):.4f} | | | |")
        for model in TREES + DEEP:
            test = [s[model][1] for s in done.values()]
            cpu = np.mean([s[model][2] for s in done.values()])
            over_tree = paired(test, list(tree.values())) if model in DEEP else ""
            over_scratch = ""
            if model in DEEP and model != SCRATCH:
                over_scratch = paired(test, [s[SCRATCH][1] for s in done.values()])
            print(f"| `{model}` | {np.mean(test):.4f} | {cpu:.1f} | {over_tree} | {over_scratch} |")
        chosen = [done[u][picks[u]][1] for u in done]
        print(f"| vali's pick among the seven | {np.mean(chosen):.4f} | | "
              f"{paired(chosen, list(tree.values()))} | |")  # fmt: skip


if __name__ == "__main__":
    main()
