"""Paired statistics over (fold, seed): `stats.paired_greater` against hand-computed values, and
``./run.sh report`` / ``./run.sh select`` on a tiny fake sweep over two folds, where the fold
moves every model a lot and the paired test sees what Welch cannot."""

from __future__ import annotations

import contextlib
import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest
from fake_sweep import run_cell, write_manifest
from scipy import stats as scipy_stats

from scarce_ltr.reports import results, stats
from scarce_ltr.reports.report import ReportConfig
from scarce_ltr.reports.report import main as report_main
from scarce_ltr.sweeps.select import SelectConfig
from scarce_ltr.sweeps.select import main as select_main


def test_paired_greater_worked_by_hand() -> None:
    # d = (0.1, 0.2, 0.0): mean 0.1; std sqrt((0 + 0.01 + 0.01) / 2) = 0.1;
    # t = 0.1 / (0.1 / sqrt(3)) = sqrt(3); Student's t with 2 degrees of freedom has the closed
    # form P(T > t) = 1/2 - t / (2 sqrt(t^2 + 2)) = 1/2 - sqrt(3) / (2 sqrt(5)) = 0.11270...
    a = {(1, 0): 0.5, (1, 1): 0.7, (2, 0): 0.6}
    b = {(1, 0): 0.4, (1, 1): 0.5, (2, 0): 0.6}
    mean, std, n, p = stats.paired_greater(a, b)
    assert (n, mean, std) == (3, pytest.approx(0.1), pytest.approx(0.1))
    assert p == pytest.approx(0.5 - math.sqrt(3) / (2 * math.sqrt(5)), rel=1e-9)
    assert p == pytest.approx(0.1127017, abs=1e-6)


def test_paired_greater_pairs_units_present_and_finite_in_both() -> None:
    a = {(1, 0): 0.61, (1, 1): 0.55, (2, 0): 0.72, (2, 1): 0.70, (3, 0): 0.58, (3, 1): 0.9}
    b = {(1, 0): 0.60, (1, 1): 0.50, (2, 0): 0.69, (2, 1): 0.71, (3, 0): 0.51, (4, 0): 0.1}
    b[(3, 1)] = math.nan  # (3, 1): NaN in b; (4, 0): only in b
    d = np.array([0.01, 0.05, 0.03, -0.01, 0.07])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(5))
    mean, std, n, p = stats.paired_greater(a, b)
    assert n == 5 and mean == pytest.approx(d.mean()) and std == pytest.approx(d.std(ddof=1))
    assert p == pytest.approx(scipy_stats.t.sf(t, df=4), rel=1e-9)
    assert stats.paired_greater(b, a)[3] == pytest.approx(scipy_stats.t.cdf(t, df=4), rel=1e-9)


def test_paired_greater_needs_two_pairs() -> None:
    mean, std, n, p = stats.paired_greater({(None, 0): 0.5, (None, 1): 0.4}, {(None, 0): 0.3})
    assert (mean, n) == (pytest.approx(0.2), 1) and math.isnan(std) and math.isnan(p)
    assert stats.paired_greater({(1, 0): 0.5}, {(2, 0): 0.5})[2] == 0
    # The same difference in every pair: no spread, the sign decides.
    assert stats.paired_greater({1: 0.5, 2: 0.7}, {1: 0.4, 2: 0.6})[3] == 0.0


# Per fold a level every model shares (fold 2 is an easy fold), per seed a small wobble: the
# hybrid beats the tree by 0.01 (+-0.002) on every (fold, seed), which Welch over the pooled
# values drowns in the fold's 0.4 spread. The pretrained DL trails the tree by 0.01 on every unit
# but missed (failed) its two units of the easy fold: by the means it would beat the tree. The
# same network from scratch trails the tree by 0.005, without the DL's wobble.
LEVEL = {1: 0.30, 2: 0.70}
WOBBLE = {0: 0.000, 1: 0.004, 2: -0.003}
OFFSET = {"gbdt": 0.0, "ensemble:simclr-rank+full,gbdt": 0.01, "simclr-rank+full": -0.01}
OFFSET["scratch+full"] = -0.005
OFFSET_NOISE = {0: 0.0, 1: 0.002, 2: -0.002}
GROUPS = {"gbdt": "gbdt", "ensemble:simclr-rank+full,gbdt": "hybrid"}
GROUPS |= {"simclr-rank+full": "pretrained-dl", "scratch+full": "no-pretrain-dl"}


def _metrics(vali: float, test: float) -> dict:
    ks = (1, 3, 5, 10)
    return {
        "vali": {**{f"ndcg@{k}": vali for k in ks}, "n_groups_evaluated": 20},
        "test": {
            **{f"ndcg@{k}": test for k in ks},
            **{f"outlier_ndcg@{k}": test - 0.1 for k in ks},
            "n_groups_evaluated": 20,
            "n_outlier_groups": 3,
        },
        "val_labels": "full",
        "policy": "skip",
    }


def _fold_sweep(root: Path, *, folds: bool = True) -> Path:
    folder = root / "sweeps" / "demo"
    cells = []
    for fold in (1, 2):
        for seed in (0, 1, 2):
            for model, group in GROUPS.items():
                place = f"ohsumed/fold={fold}" if folds else f"ohsumed-{fold}"
                stage = "ensemble" if model.startswith("ensemble") else "finetune"
                stage = "baseline" if model == "gbdt" else stage
                test = (
                    LEVEL[fold]
                    + WOBBLE[seed]
                    + OFFSET[model]
                    + OFFSET_NOISE[seed] * (model not in ("gbdt", "scratch+full"))
                )
                status = "failed" if model == "simclr-rank+full" and fold == 2 else "done"
                # vali: the hybrid is best on validation, so select chooses it
                vali = 0.5 + 0.02 * (model.startswith("ensemble")) - 0.01 * (model != "gbdt")
                cells.append(
                    run_cell(
                        folder, place, model, stage=stage, group=group, seed=seed,
                        metrics=_metrics(vali, test), fold=fold if folds else None, status=status,
                    )
                )  # fmt: skip
    if not folds:  # an old manifest: two "folds" as two seeds sets would collide; keep fold 1
        cells = [c for c in cells if "ohsumed-1/" in c["run_dir"]]
    write_manifest(folder, cells)
    return folder


@pytest.fixture(scope="module")
def fold_report(tmp_path_factory) -> tuple[dict, Path, str]:
    root = tmp_path_factory.mktemp("folds") / "runs"
    folder = _fold_sweep(root)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = report_main(ReportConfig(sweep="demo", runs_root=str(root), outlier_figure=False))
    return report, folder, out.getvalue()


def _one(entries: list[dict], **match) -> dict:
    found = [e for e in entries if all(e[k] == v for k, v in match.items())]
    assert len(found) == 1, match
    return found[0]


def test_report_pairs_over_fold_and_seed(fold_report) -> None:
    report, folder, text = fold_report
    hybrid = _one(report["summary"]["groups"], group="hybrid")
    assert hybrid["units"] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert hybrid["seeds"] == [0, 1, 2, 0, 1, 2]
    diffs = [0.01 + OFFSET_NOISE[s] for s in (0, 1, 2)] * 2
    assert hybrid["n_pairs"] == 6 and hybrid["margin_test"] == pytest.approx(np.mean(diffs))
    assert hybrid["margin_test_std"] == pytest.approx(np.std(diffs, ddof=1))
    t = np.mean(diffs) / (np.std(diffs, ddof=1) / math.sqrt(6))
    assert hybrid["p_paired_test"] == pytest.approx(scipy_stats.t.sf(t, df=5), rel=1e-9)
    assert hybrid["p_paired_test"] < 0.001 < 0.4 < hybrid["p_test"]  # Welch sees nothing
    tree = _one(report["summary"]["groups"], group="gbdt")
    assert math.isnan(tree["p_paired_test"]) and tree["n_pairs"] == 0
    model = _one(report["summary"]["models"], model="ensemble:simclr-rank+full,gbdt")
    assert model["p_paired_test"] == hybrid["p_paired_test"]
    assert report["units"] == "(fold, seed) units"
    assert "Δ +0.0100 ± 0.0018, paired p=<0.001, n=6" in text
    assert "over (fold, seed) units" in text
    with (folder / "report" / "summary.csv").open() as handle:
        row = next(r for r in csv.DictReader(handle) if r["name"] == "hybrid")
    assert float(row["p_paired_test"]) == pytest.approx(hybrid["p_paired_test"])
    assert row["units"] == "1:0 1:1 1:2 2:0 2:1 2:2" and row["n_pairs"] == "6"
    html = (folder / "report" / "dashboard.html").read_text()
    assert "Δ +0.0100 ± 0.0018, paired p=&lt;0.001, n=6" in html


def test_crossover_follows_the_paired_margin_not_the_means(fold_report) -> None:
    report = fold_report[0]
    dl = _one(report["summary"]["groups"], group="pretrained-dl")
    best_other = _one(report["summary"]["groups"], group="hybrid")
    assert dl["test_mean"] < best_other["test_mean"]  # the means alone: the DL loses
    tree = _one(report["summary"]["groups"], group="gbdt")
    assert dl["test_mean"] < tree["test_mean"]
    info = report["sections"][0]["crossovers"]["test"]
    assert info["status"] == "never" and info["paired"][0]["against"] == "hybrid"
    assert info["paired"][0]["n"] == 3 and info["paired"][0]["margin"] == pytest.approx(-0.02)
    # Against the tree, by the means over its units the DL (fold 1 only) looks far worse; the
    # paired margin over the units it ran is -0.01 (by construction).
    paired = stats.paired_greater(stats.by_unit(dl, "test"), stats.by_unit(tree, "test"))
    assert paired[0] == pytest.approx(-0.01) and paired[2] == 3
    assert "20%: -0.0200 vs hybrid, p=" in report["sections"][0]["crossover_text"]


def test_what_pretraining_adds_pairs_the_dl_with_the_network_from_scratch(fold_report) -> None:
    report, folder, text = fold_report
    (step,) = report["sections"][0]["pretraining_gain"]["test"]
    assert (step["member"], step["against"], step["n"]) == ("simclr-rank+full", "scratch+full", 3)
    # Fold 1 only (the DL failed on fold 2): d = -0.005 + (0, 0.002, -0.002); a loss, so p is
    # P(T < t) with 2 degrees of freedom.
    d = -0.005 + np.array([0.0, 0.002, -0.002])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    assert step["margin"] == pytest.approx(-0.005) and step["std"] == pytest.approx(0.002)
    assert step["p"] == pytest.approx(scipy_stats.t.cdf(t, df=2), rel=1e-6)
    line = "20%: simclr-rank+full - scratch+full -0.0050, p=0.025, n=3"
    assert line in text and line in (folder / "report" / "dashboard.html").read_text()


def test_select_reports_the_paired_margin_against_the_tree(fold_report, capsys) -> None:
    _, folder, _ = fold_report
    best = select_main(SelectConfig(sweep=str(folder)))
    (choice,) = best["choices"]
    assert choice["model"] == "ensemble:simclr-rank+full,gbdt" and choice["reference"] == "gbdt"
    assert choice["n_pairs"] == 6 and choice["margin_test"] == pytest.approx(0.01, abs=1e-9)
    assert choice["p_paired_test"] < 0.001
    assert [(s["fold"], s["seed"]) for s in choice["seeds"]] == [
        (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2),
    ]  # fmt: skip
    assert len({s["run_dir"] for s in choice["seeds"]}) == 6  # each unit its own run
    assert "+0.0100 ± 0.0018 vs gbdt (p=<0.001, n=6)" in capsys.readouterr().out


def test_an_old_manifest_without_folds_still_reports(tmp_path: Path) -> None:
    folder = _fold_sweep(tmp_path / "runs", folds=False)
    rows = results.rows_from_manifest(folder / "manifest.json", [5])
    assert rows and all(r["fold"] is None for r in rows)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = report_main(
            ReportConfig(sweep="demo", runs_root=str(tmp_path / "runs"), outlier_figure=False)
        )
    hybrid = _one(report["summary"]["groups"], group="hybrid")
    assert hybrid["units"] == [(None, 0), (None, 1), (None, 2)] and hybrid["n_pairs"] == 3
    assert report["units"] == "seeds" and "over seeds" in out.getvalue()


def test_a_scan_keeps_the_folds_apart(fold_report) -> None:
    """``./run.sh report`` without a sweep: two folds' runs of one cell are two rows, not two
    runs competing for one cell."""
    _, folder, _ = fold_report
    notes: list[str] = []
    rows = results.rows_from_scan(folder, [5], notes)
    trees = sorted((r["fold"], r["seed"]) for r in rows if r["model"] == "gbdt")
    assert trees == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)] and not notes
    assert "ohsumed/fold=2/gbdt/frac=0.2/seed=1" in {r["id"] for r in rows}
