"""Every model of a fold sweep paired against one base model of it, per label budget.

Over the (fold, seed) units where both cells finished: the model's mean test NDCG@5, its paired
margin over the base (mean ± sd, the report's one-sided test and a two-sided one, the units
above 0), the vali margin (what a vali choice sees) and the model's mean CPU seconds a cell.
Test chooses nothing here. For the screens of configs/sweep/yandex-encoders.yaml (issue 61) and
any sweep of the same layout:

    .venv/bin/python benchmarks/bench_sweep_pairs.py --sweep $LTR_RUNS_DIR/sweeps/yandex-encoders

``--base vali-best:gbdt,gbdt-optuna,catboost,xgboost`` pairs against the vali-best of those models
in each unit (the report's GBDT group: its member chosen on vali, its test read), over the units
where all of them finished. ``--pooled`` adds one table over every setting's units together
(a unit is then (setting, fold, seed)) with the margin's two-sided 95 % t-interval: issue 61's
portfolio bar reads its lower end ("no worse than the 30-trial search by more than 0.005").

``--sweep`` and ``--data`` repeat, pairwise (one ``--data`` serves every sweep), for a model
judged on several data sets: each setting is then named with its data set (sweeps of one data
set share its settings and units: the same label draws), and ``--pooled`` pools the units of all
of them (issue 61's bar: >= 45 units over Yandex and OHSUMED)::

    .venv/bin/python benchmarks/bench_sweep_pairs.py --pooled \
        --sweep $LTR_RUNS_DIR/sweeps/yandex-hybrid --data yandex \
        --sweep $LTR_RUNS_DIR/sweeps/ohsumed-search --data ohsumed
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from ohsumed_folds import finished_report, paired
from scipy import stats


def cells(
    sweep: Path, data: str, prefix: str = ""
) -> dict[tuple[str, str], dict[tuple[int, int], dict]]:
    """``{(model, setting): {(fold, seed): report}}`` of every finished cell; a setting is the
    cell's ``frac=`` folder, after ``prefix``."""
    found: dict[tuple[str, str], dict[tuple[int, int], dict]] = {}
    for folder in sorted(sweep.glob(f"{data}/fold=*/*/*/frac=*/seed=*")):
        if folder.parts[-4] == "pretrain":
            continue
        report = finished_report(folder)
        if report is None or "metrics" not in report:
            continue
        fold = int(folder.parts[-5].split("=")[1])
        seed = int(folder.name.split("=")[1])
        found.setdefault((folder.parts[-3], prefix + folder.parts[-2]), {})[(fold, seed)] = report
    return found


def _vali(report: dict) -> float:
    """The vali NDCG@5 the run chose on: a deep run's best epoch, a tree's kept model."""
    return report.get("best_vali_ndcg@5", report["metrics"]["vali"]["ndcg@5"])


def vali_best(
    found: dict[tuple[str, str], dict[tuple[int, int], dict]], models: list[str], setting: str
) -> dict[tuple[int, int], dict]:
    """Per unit where every one of ``models`` finished at ``setting``: the report of the one
    with the highest vali NDCG@5 (ties to the earlier in ``models``)."""
    runs = [found.get((model, setting), {}) for model in models]
    units = set.intersection(*(set(r) for r in runs)) if runs else set()
    return {u: max((r[u] for r in runs), key=_vali) for u in sorted(units)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", required=True, action="append", help="a sweep's folder")
    parser.add_argument("--data", action="append", help="its data set (default: yandex)")
    parser.add_argument("--base", default="scratch+full")
    parser.add_argument("--pooled", action="store_true", help="a table over all settings' units")
    args = parser.parse_args()
    datas = args.data or ["yandex"]
    if len(datas) == 1:
        datas = datas * len(args.sweep)
    if len(datas) != len(args.sweep):
        parser.error(f"{len(args.sweep)} --sweep and {len(datas)} --data: give one or one each")
    found: dict[tuple[str, str], dict[tuple[int, int], dict]] = {}
    for sweep, data in zip(args.sweep, datas, strict=True):
        prefix = f"{data} " if len(set(datas)) > 1 else ""
        for key, runs in cells(Path(sweep), data, prefix).items():
            found.setdefault(key, {}).update(runs)  # two sweeps of one data set: one setting
    bases = {setting: _base(found, args.base, setting) for setting in {s for _, s in found}}
    for setting, base in sorted(bases.items()):
        print(f"\n### {setting}, against `{args.base}`\n")
        print("| model | units | test NDCG@5 | margin over the base | vali margin | CPU s a cell |")
        print("|---|---|---|---|---|---|")
        for (model, at), runs in sorted(found.items()):
            units = sorted(set(runs) & set(base)) if model != args.base else sorted(runs)
            if at != setting or not units:
                continue
            test = [runs[u]["metrics"]["test"]["ndcg@5"] for u in units]
            vali = [_vali(runs[u]) for u in units]
            cpu = np.mean([runs[u].get("cpu_seconds", np.nan) for u in units])
            margin = vali_margin = "-"
            if model != args.base:
                margin = paired(test, [base[u]["metrics"]["test"]["ndcg@5"] for u in units])
                base_vali = [_vali(base[u]) for u in units]
                vali_margin = f"{np.mean(vali) - np.mean(base_vali):+.4f}"
            print(
                f"| `{model}` | {len(units)} | {np.mean(test):.4f} | {margin} | "
                f"{vali_margin} | {cpu:.0f} |"
            )
    if args.pooled:
        _pooled(found, bases, args.base)


def _base(
    found: dict[tuple[str, str], dict[tuple[int, int], dict]], base: str, setting: str
) -> dict[tuple[int, int], dict]:
    """The base's report per unit at ``setting``: a model's, or the vali-best of several."""
    if base.startswith("vali-best:"):
        return vali_best(found, base.removeprefix("vali-best:").split(","), setting)
    return found.get((base, setting), {})


def _pooled(
    found: dict[tuple[str, str], dict[tuple[int, int], dict]],
    bases: dict[str, dict[tuple[int, int], dict]],
    base_name: str,
) -> None:
    """Each model's test margin over the base pooled over every setting's units."""
    print(f"\n### every setting pooled, against `{base_name}`\n")
    print("| model | settings | units | margin over the base | 95 % interval |")
    print("|---|---|---|---|---|")
    for model in sorted({m for m, _ in found} - {base_name}):
        pairs = [  # (setting, (the model's test NDCG@5, the base's)) per paired unit
            (at, (runs[u]["metrics"]["test"]["ndcg@5"], bases[at][u]["metrics"]["test"]["ndcg@5"]))
            for (m, at), runs in found.items()
            if m == model
            for u in sorted(set(runs) & set(bases[at]))
        ]
        if len(pairs) < 2:
            continue
        test, base_test = (
            list(column) for column in zip(*(pair for _, pair in pairs), strict=True)
        )
        low, high = stats.ttest_rel(test, base_test).confidence_interval(0.95)
        settings = sorted({at for at, _ in pairs})  # those with a unit paired
        print(
            f"| `{model}` | {', '.join(settings)} | {len(pairs)} | {paired(test, base_test)} | "
            f"[{low:+.4f}, {high:+.4f}] |"
        )


if __name__ == "__main__":
    main()
