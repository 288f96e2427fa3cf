"""What pretraining learned, on the synthetic default against OHSUMED (issue 30, item 5).

Every pretraining run of the given sweeps keeps, in its report.json ``diagnosis``, the k-NN
probe (vali NDCG@5 of the 10 nearest labeled train items, `pretrain.monitor`) and the effective
rank of the vali items' embeddings, for the encoder finetuning loads and for the randomly
initialised encoder of the same seed, and the same probe on the input features. This script
reads them (no training) and prints, per sweep and pretraining method (variants apart), mean ±
std over its runs and the paired gain of the pretrained encoder over the random one (one-sided
paired t-test over runs, `ohsumed_folds.paired`). Beside them, as the scale a probe gain is
read on: the vali NDCG@5 of the sweep's ``resnet`` at its largest label fraction (a supervised
ranker trained on most labels).

    .venv/bin/python benchmarks/bench_probe_contrast.py runs/sweeps/quick-scratch \
        runs/sweeps/ohsumed-recipe
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from ohsumed_folds import paired


def pretraining_diagnoses(sweep: Path) -> dict[str, list[dict]]:
    """``{method folder: [diagnosis, ...]}`` of the sweep's finished pretraining runs."""
    found: dict[str, list[dict]] = defaultdict(list)
    for report_path in sorted(sweep.glob("**/pretrain/*/**/report.json")):
        if not (report_path.parent / "DONE").is_file():
            continue
        report = json.loads(report_path.read_text())
        if report.get("diagnosis"):
            method = report_path.relative_to(sweep).parts
            found[method[method.index("pretrain") + 1]].append(report["diagnosis"])
    return found


def supervised_vali(sweep: Path) -> tuple[str, float, int] | None:
    """``(setting, mean vali NDCG@5, runs)`` of ``resnet`` at the sweep's largest fraction."""
    by_setting: dict[str, list[float]] = defaultdict(list)
    for report_path in sweep.glob("**/baseline/resnet/frac=*/seed=*/report.json"):
        if (report_path.parent / "DONE").is_file():
            report = json.loads(report_path.read_text())
            by_setting[report_path.parts[-3]].append(report["metrics"]["vali"]["ndcg@5"])
    if not by_setting:
        return None
    setting = max(by_setting, key=lambda s: float(s.removeprefix("frac=")))
    return setting, float(np.mean(by_setting[setting])), len(by_setting[setting])


def _mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "-"
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweeps", type=Path, nargs="+", help="sweep folders")
    args = parser.parse_args()
    print(
        "| sweep | pretraining | runs | k-NN probe: input features | random encoder "
        "| pretrained | pretrained - random | effective rank (vali): random | pretrained "
        "| resnet vali NDCG@5 (most labels) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for sweep in args.sweeps:
        ceiling = supervised_vali(sweep)
        ceiling_text = f"{ceiling[1]:.3f} ({ceiling[0]}, {ceiling[2]} runs)" if ceiling else "-"
        for method, diagnoses in sorted(pretraining_diagnoses(sweep).items()):
            raw = [d["knn_ndcg@5_raw"] for d in diagnoses]
            random = [d["random_init"]["knn_ndcg@5"] for d in diagnoses]
            trained = [d["pretrained"]["knn_ndcg@5"] for d in diagnoses]
            ranks = [
                [d[which]["effective_rank_vali"] for d in diagnoses]
                for which in ("random_init", "pretrained")
            ]
            print(
                f"| {sweep.name} | {method} | {len(diagnoses)} | {_mean_std(raw)} "
                f"| {_mean_std(random)} | {_mean_std(trained)} | {paired(trained, random)} "
                f"| {_mean_std(ranks[0])} | {_mean_std(ranks[1])} | {ceiling_text} |"
            )


if __name__ == "__main__":
    main()
