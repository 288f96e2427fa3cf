"""A portfolio cut to its first k recipes, read off the K-recipe runs already made, against the
30-trial search: what each k costs and what it loses (issue 61's cost bar and its pooled bar).

A mined portfolio's recipes are in greedy order (`search/portfolio.py`: each step adds the recipe
that helps the cells most), so its first k recipes are the portfolio mined with ``k``. A run of
`search.strategy=portfolio` keeps every recipe's trained model (``grid/trial=<j>/model.pt``) and
its vali NDCG@5 (``report.json`` ``search.trials``), so the run the k-recipe portfolio would have
made is known without training: vali chooses among trials 0..k-1 (ties to the earlier, as the
search), and the chosen trial's model scores the test split here. Test chooses nothing. For k = K
the choice and its test NDCG@5 are checked against the run's own report.

Each (sweep, setting, fold, seed) unit where the portfolio run and ``--base`` (the 30-trial
search, `scratch+full`) both finished is paired; per k: the units, the mean test NDCG@5, the
pooled margin over the base with its two-sided 95 % t-interval (the bar reads its lower end, no
worse than -0.005), and the training seconds of the first k trials against the base's search::

    .venv/bin/python benchmarks/bench_portfolio_prefix.py \\
        --sweep $LTR_RUNS_DIR/sweeps/yandex-hybrid --sweep $LTR_RUNS_DIR/sweeps/ohsumed-search \\
        --model scratch@pfo-ohsumed+full --model scratch@pfo-yandex+full
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from bench_sweep_pairs import cells
from ohsumed_folds import paired, run_dir
from scipy import stats

from scarce_ltr.core.device import Runtime
from scarce_ltr.core.run_config import read_config
from scarce_ltr.data.evaluation import test_metrics
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.model import load_model
from scarce_ltr.finetune.scoring import predict
from scarce_ltr.search.selection import select_best

METRIC = "ndcg@5"


def prefix_choice(trials: list[dict], k: int) -> int:
    """The trial vali picks among the first ``k``, by the search's own rule (`select_best`)."""
    return select_best([t[f"best_vali_{METRIC}"] for t in trials[:k]])


def trial_tests(folder: Path, trials: list[int]) -> dict[int, float]:
    """Test NDCG@5 of each of ``trials``' saved models, scored as the run scored its choice."""
    cfg = read_config(folder, FinetuneConfig)
    prepared = prepare_data(cfg)
    runtime = Runtime(device=torch.device("cpu"))
    tests = {}
    for j in trials:
        model, _ = load_model(folder / "grid" / f"trial={j}")
        scores = predict(model, prepared.test, runtime=runtime, item_budget=cfg.eval_item_budget)
        tests[j] = test_metrics(prepared, scores, cfg.metrics)[METRIC]
    return tests


def unit_rows(sweeps: list[Path], models: list[str], base: str) -> list[dict]:
    """Per paired unit: the portfolio run's trials, each prefix's choice and test, the base's
    test and the seconds of both."""
    rows = []
    for sweep in sweeps:
        for data in sorted(p.name for p in sweep.iterdir() if any(p.glob("fold=*"))):
            found = cells(sweep, data)
            for (model, setting), runs in sorted(found.items()):
                if model not in models:
                    continue
                base_runs = found.get((base, setting), {})
                for (fold, seed), report in sorted(runs.items()):
                    if (fold, seed) not in base_runs:
                        continue
                    search = report["search"]
                    trials = search["trials"]
                    picks = [prefix_choice(trials, k) for k in range(1, len(trials) + 1)]
                    if picks[-1] != search["chosen_trial"]:
                        raise SystemExit(f"{sweep} {setting} fold {fold} seed {seed}: the "
                                         f"prefix rule picks trial {picks[-1]}, the run "
                                         f"{search['chosen_trial']}")  # fmt: skip
                    fraction = float(setting.removeprefix("frac="))
                    folder = run_dir(sweep, model, fold, seed, fraction, data)
                    tests = trial_tests(folder, sorted(set(picks)))
                    if abs(tests[picks[-1]] - report["metrics"]["test"][METRIC]) > 1e-9:
                        raise SystemExit(f"{folder}: trial {picks[-1]} scores "
                                         f"{tests[picks[-1]]:.6f} here, the report "
                                         f"{report['metrics']['test'][METRIC]:.6f}")  # fmt: skip
                    seconds = np.cumsum([t["seconds"] for t in trials])
                    base_report = base_runs[(fold, seed)]
                    base_trials = base_report.get("search", {}).get("trials", [])
                    rows.append({
                        "unit": (sweep.name, data, setting, fold, seed),
                        "test": [tests[j] for j in picks],
                        "seconds": list(seconds),
                        "base_test": base_report["metrics"]["test"][METRIC],
                        "base_seconds": sum(t.get("seconds", np.nan) for t in base_trials),
                    })  # fmt: skip
                    print(f"  {data} {setting} fold {fold} seed {seed}: picks {picks}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="append", required=True, help="a sweep's folder")
    parser.add_argument("--model", action="append", required=True,
                        help="a portfolio run's model name (scratch@<variant>+full)")  # fmt: skip
    parser.add_argument("--base", default="scratch+full")
    args = parser.parse_args()
    rows = unit_rows([Path(s) for s in args.sweep], args.model, args.base)
    if len(rows) < 2:
        raise SystemExit("fewer than two paired units")
    settings = sorted({(r["unit"][1], r["unit"][2]) for r in rows})
    print(f"\n{len(rows)} units ({', '.join(f'{d} {s}' for d, s in settings)}), against "
          f"`{args.base}`\n")  # fmt: skip
    print("| k | test NDCG@5 | margin over the base | 95 % interval | training s a cell "
          "(the base's search) |")  # fmt: skip
    print("|---|---|---|---|---|")
    base_test = [r["base_test"] for r in rows]
    base_seconds = np.mean([r["base_seconds"] for r in rows])
    for k in range(1, min(len(r["test"]) for r in rows) + 1):
        test = [r["test"][k - 1] for r in rows]
        low, high = stats.ttest_rel(test, base_test).confidence_interval(0.95)
        seconds = np.mean([r["seconds"][k - 1] for r in rows])
        print(f"| {k} | {np.mean(test):.4f} | {paired(test, base_test)} | "
              f"[{low:+.4f}, {high:+.4f}] | {seconds:.0f} ({base_seconds:.0f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
