"""Hybrid rankers against their parts: test NDCG@5 per label fraction, mean and std over seeds.

For each data set and seed: one SimCLR-Rank pretraining run; for each label fraction: the GBDT
(``baseline gbdt``), the pretrained DL (``finetune full`` on that encoder), ``baseline gbdt-ssl``
on that encoder, and the ensemble of the DL and GBDT runs with weights chosen on vali
(``ensemble``, weights chosen on vali). "hybrid" is the ensemble of all three (DL, GBDT and
gbdt-ssl), weights chosen on vali: its grid holds gbdt-ssl alone and every DL + GBDT mix, so it is
the validation-chosen hybrid without a second selection step. Every run goes through the CLI,
one process each, into
``<out>/<data>/...``; a run holding ``DONE`` is not started again, so the script resumes.

    .venv/bin/python benchmarks/bench_hybrid.py [--data synthetic ohsumed] [--seeds 0 1 2]
        [--fractions 0.05 0.2 1.0] [--pretrain-epochs 20] [--finetune-lr 2e-4]

Prints a markdown table and writes ``<out>/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = {
    "synthetic": [],
    "ohsumed": ["data=ohsumed", f"data.path={ROOT.parent / 'shared/data/ohsumed-letor3'}"],
}
MODELS = ("gbdt", "pretrained-dl", "gbdt-ssl", "ensemble", "hybrid")
RUN_FOLDERS = {"gbdt": "gbdt", "pretrained-dl": "dl", "gbdt-ssl": "ssl", "ensemble": "ensemble",
               "hybrid": "hybrid"}  # fmt: skip


def cli(args: list[str], run_dir: Path) -> dict | None:
    """The run's report.json, running ``./run.sh <args>`` first unless it finished before."""
    if not (run_dir / "DONE").is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "WANDB_MODE": "disabled"}
        command = [sys.executable, "-m", "scarce_ltr", *args, f"run_dir={run_dir}"]
        start = time.perf_counter()
        with open(run_dir / "log.txt", "ab") as log:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        took = time.perf_counter() - start
        name = " ".join(a for a in args[:2] if "=" not in a)
        print(f"  {name}: exit {code}, {took:.0f} s ({run_dir})", flush=True)
        if code != 0:
            return None
    return json.loads((run_dir / "report.json").read_text())


def ndcg(report: dict | None, split: str) -> float:
    return float("nan") if report is None else float(report["metrics"][split]["ndcg@5"])


def run_seed(data: str, seed: int, fractions: list[float], args, out: Path) -> list[dict]:
    base = [*DATA[data], f"seed={seed}", "logger=none"]
    pre = out / data / "pretrain" / f"seed={seed}"
    options = [f"epochs={args.pretrain_epochs}", "monitor.enabled=false"]
    if cli(["pretrain", "simclr-rank", *base, *options], pre) is None:
        return []
    rows = []
    for fraction in fractions:
        common = [*base, f"scarcity.fraction={fraction}"]
        folder = out / data / f"frac={fraction:g}" / f"seed={seed}"
        pretrained = f"pretrained={pre}"
        finetune = ["finetune", "full", *common, pretrained]
        finetune += [f"optimizer.lr={args.finetune_lr}"]
        if args.finetune_epochs:
            finetune += [f"epochs={args.finetune_epochs}"]
        run = {name: folder / sub for name, sub in RUN_FOLDERS.items()}
        reports = {
            "gbdt": cli(["baseline", "gbdt", *common], run["gbdt"]),
            "pretrained-dl": cli(finetune, run["pretrained-dl"]),
            "gbdt-ssl": cli(["baseline", "gbdt-ssl", *common, pretrained], run["gbdt-ssl"]),
        }
        ensembles = {
            "ensemble": ("pretrained-dl", "gbdt"),
            "hybrid": ("pretrained-dl", "gbdt", "gbdt-ssl"),
        }
        for name, parts in ensembles.items():
            if all(reports[part] for part in parts):
                members = "runs=[" + ",".join(str(run[part]) for part in parts) + "]"
                reports[name] = cli(["ensemble", *common, members], run[name])
        row = {"data": data, "fraction": fraction, "seed": seed}
        for name in MODELS:
            row[name] = ndcg(reports.get(name), "test")
            row[f"{name}_vali"] = ndcg(reports.get(name), "vali")
            if name in ensembles:
                weights = (reports.get(name) or {}).get("weights") or {}
                row[f"{name}_weights"] = {Path(k).name: w for k, w in weights.items()}
        row["gbdt_ssl_embedding"] = ((reports.get("gbdt-ssl") or {}).get("selected") or {}).get(
            "embedding"
        )
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| data | % labeled | " + " | ".join(MODELS) + " | target met |",
        "|---|---|" + "---|" * (len(MODELS) + 1),
    ]
    for data in dict.fromkeys(r["data"] for r in rows):
        fractions = sorted({r["fraction"] for r in rows if r["data"] == data})
        for fraction in fractions:
            mine = [r for r in rows if (r["data"], r["fraction"]) == (data, fraction)]
            means = {m: np.mean([r[m] for r in mine if np.isfinite(r[m])]) for m in MODELS}
            cells = [_cell([r[m] for r in mine]) for m in MODELS]
            parts = max(means["gbdt"], means["pretrained-dl"])
            strict = fraction == fractions[0]
            met = means["hybrid"] > parts if strict else means["hybrid"] >= parts
            lines.append(
                f"| {data} | {100 * fraction:g} | " + " | ".join(cells) + f" | {_yes(met)} |"
            )
    return "\n".join(lines)


def _cell(values: list[float]) -> str:
    kept = [v for v in values if np.isfinite(v)]
    if not kept:
        return "failed"
    spread = f" ± {np.std(kept, ddof=1):.4f}" if len(kept) > 1 else ""
    return f"{np.mean(kept):.4f}{spread}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["synthetic", "ohsumed"], choices=DATA)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.05, 0.2, 1.0])
    parser.add_argument("--pretrain-epochs", type=int, default=20)  # the quick sweep's
    parser.add_argument("--finetune-epochs", type=int, default=None)  # None: 100 + 100
    parser.add_argument("--finetune-lr", type=float, default=2e-4)  # the quick sweep's
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_hybrid")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = []
    for data in args.data:
        for seed in args.seeds:
            print(f"{data} seed {seed}", flush=True)
            rows += run_seed(data, seed, sorted(args.fractions), args, args.out)
    print(f"\n{platform.node()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}, "
          f"{time.perf_counter() - start:.0f} s; test NDCG@5, mean ± std over seeds "
          f"{args.seeds}; pretrain {args.pretrain_epochs} epochs, finetune "
          f"{args.finetune_epochs or '100 + 100'} epochs at lr {args.finetune_lr}")  # fmt: skip
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
