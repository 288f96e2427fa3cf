"""Where the deep rankers win or lose against the tree, per test QG (`reports.where`): the bins
against a hand-computed example, and ``./run.sh report`` on a tiny fake sweep whose deep ranker
wins on the outlier QGs and loses on the largest ones."""

from __future__ import annotations

import contextlib
import csv
import io
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fake_sweep import run_cell, write_manifest

from scarce_ltr.core.metrics import ndcg_per_group
from scarce_ltr.data import evaluation
from scarce_ltr.data.evaluation import read_test_per_group
from scarce_ltr.reports import where
from scarce_ltr.reports.report import ReportConfig
from scarce_ltr.reports.report import main as report_main


def _unit(margin: list[float], outlier: list[bool], items: list[int]) -> dict:
    margin_array = np.array(margin)
    return {
        "margin": margin_array,
        "keep": np.isfinite(margin_array),
        "outlier": np.array(outlier),
        "items": np.array(items),
        "relevant": 1.0 / np.array(items),
    }


def test_bins_by_hand() -> None:
    # Two units of three defined QGs; unit A has a fourth QG undefined for a model (NaN), which
    # no bin counts and no tercile sees.
    units = [
        _unit([0.2, 0.0, -0.1, math.nan], [True, False, False, False], [10, 20, 30, 40]),
        _unit([0.4, -0.2, 0.1], [True, False, False], [10, 20, 30]),
    ]
    rows = {(r["attribute"], r["bin"]): r for r in where.bins(units)}
    # all: per-unit means 1/30 and 1/10, mean 1/15, std sqrt(2) / 30; t = 2 with one degree of
    # freedom, whose two-sided p has the closed form 1 - (2 / pi) atan(|t|).
    everything = rows[("all", "all")]
    assert (everything["n_qgs"], everything["n_units"]) == (6, 2)
    assert (everything["wins"], everything["ties"], everything["losses"]) == (3, 1, 2)
    assert everything["margin"] == pytest.approx(1 / 15)
    assert everything["margin_std"] == pytest.approx(math.sqrt(2) / 30)
    assert everything["p"] == pytest.approx(1 - 2 / math.pi * math.atan(2.0))
    # outlier: 0.2 and 0.4, mean 0.3, std 0.1 sqrt(2), t = 3.
    outlier = rows[("outlier", "outlier")]
    assert (outlier["n_qgs"], outlier["wins"], outlier["losses"]) == (2, 2, 0)
    assert outlier["p"] == pytest.approx(1 - 2 / math.pi * math.atan(3.0))
    # Holm over the bins but "all" (`holm` is checked by hand below).
    split = [r for (attribute, _), r in rows.items() if attribute != "all"]
    assert everything["p_holm"] == everything["p"]
    assert outlier["p_holm"] == pytest.approx(
        where.holm([r["p"] for r in split])[split.index(outlier)]
    )
    assert outlier["p_holm"] > outlier["p"]
    # not outlier: -0.05 in both units: no spread, t is infinite (p 0, as in the paired test).
    inlier = rows[("outlier", "not outlier")]
    assert inlier["margin"] == pytest.approx(-0.05) and inlier["p"] == 0.0
    assert rows[("items", "30")]["p"] == pytest.approx(1.0)  # margins -0.1 and 0.1: t = 0
    # Terciles of 10, 20, 30 (the undefined QG's 40 items are not among them): one size each.
    assert [name for attribute, name in rows if attribute == "items"] == ["10", "20", "30"]
    largest = rows[("items", "30")]
    assert (largest["wins"], largest["losses"], largest["margin"]) == (1, 1, pytest.approx(0.0))
    assert [n for a, n in rows if a == "relevant share"] == ["3%", "5%", "10%"]
    # A single repeated value is one bin, not three.
    flat = where.bins([_unit([0.1, 0.2], [False, False], [5, 5])])
    assert [r["bin"] for r in flat if r["attribute"] == "items"] == ["5"]
    assert not [r for r in flat if r["bin"] == "outlier"]  # an empty bin is not shown


# A fake sweep: 2 folds x 2 seeds; six test QGs of 4, 4, 6, 6, 8 and 8 items (labels 2, 1, 0,
# ...), the first two flagged outliers. The tree ranks the outliers backwards and the rest right
# (on fold 2 also the fourth QG); the pretrained DL ranks everything right but the two largest
# QGs; the ResNet ranks as the tree does.
SIZES = [4, 4, 6, 6, 8, 8]
OUTLIERS = [True, True, False, False, False, False]
BACKWARDS = {"gbdt": {0, 1}, "simclr-rank+full": {4, 5}, "resnet": {0, 1}}
STAGES = {"gbdt": ("baseline", "gbdt"), "resnet": ("baseline", "no-pretrain-dl")}
STAGES["simclr-rank+full"] = ("finetune", "pretrained-dl")


def _scores(model: str, fold: int) -> dict:
    offsets = np.concatenate([[0], np.cumsum(SIZES)])
    labels = np.concatenate([[2.0, 1.0] + [0.0] * (n - 2) for n in SIZES])
    backwards = BACKWARDS[model] | ({3} if fold == 2 and model != "simclr-rank+full" else set())
    scores = np.concatenate(
        [np.arange(n) if i in backwards else -np.arange(n) for i, n in enumerate(SIZES)]
    ).astype(float)
    split = {"offsets": offsets, "qids": np.arange(len(SIZES)) + 100}
    arrays = {f"{s}_{key}": value for s in ("vali", "test") for key, value in split.items()}
    arrays |= {"test": scores, "vali": scores, "test_labels": labels, "vali_labels": labels}
    arrays |= {"test_outliers": np.array(OUTLIERS), "vali_labeled": np.ones(len(SIZES), bool)}
    return arrays


def _backwards_ndcg(n: int) -> float:
    labels = np.array([2.0, 1.0] + [0.0] * (n - 2))
    return float(ndcg_per_group(np.arange(n, dtype=float), labels, np.array([0, n]), k=5)[0])


def _fake_sweep(root: Path) -> Path:
    folder, cells = root / "sweeps" / "demo", []
    for fold in (1, 2):
        for seed in (0, 1):
            for model, (stage, group) in STAGES.items():
                arrays = _scores(model, fold)
                ndcg = float(
                    np.mean(ndcg_per_group(arrays["test"], arrays["test_labels"],
                                           arrays["test_offsets"], k=5))
                )  # fmt: skip
                metrics = {s: {f"ndcg@{k}": ndcg for k in (1, 3, 5, 10)} for s in ("vali", "test")}
                cell = run_cell(
                    folder, f"ohsumed/fold={fold}", model,
                    stage=stage, group=group, seed=seed, metrics=metrics, fold=fold,
                )  # fmt: skip
                np.savez(Path(cell["run_dir"]) / "scores.npz", **arrays)
                cells.append(cell)
    write_manifest(folder, cells)
    return folder


# The fake's DL scores the same in every unit: scipy's Welch test in the summary warns of it.
@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")
def test_report_shows_where_the_deep_rankers_win_and_lose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _fake_sweep(tmp_path / "runs")
    reads = Counter()

    def counted(path: Path, **kwargs) -> dict | None:
        reads[path] += 1
        return read_test_per_group(path, **kwargs)

    monkeypatch.setattr(evaluation, "read_test_per_group", counted)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = report_main(
            ReportConfig(sweep="demo", runs_root=str(tmp_path / "runs"), outlier_figure=False)
        )
    entries = {(e["group"], e["against"]): e for e in report["where"]}
    assert set(entries) == {
        ("pretrained-dl", "gbdt"), ("no-pretrain-dl", "gbdt"), ("pretrained-dl", "no-pretrain-dl")
    }  # fmt: skip
    dl = entries[("pretrained-dl", "gbdt")]
    assert (dl["model"], dl["reference"], dl["n_units"]) == ("simclr-rank+full", "gbdt", 4)
    rows = {(r["attribute"], r["bin"]): r for r in dl["bins"]}
    # Bin "all" is the report's paired margin of the two groups.
    group = next(g for g in report["summary"]["groups"] if g["group"] == "pretrained-dl")
    assert rows[("all", "all")]["margin"] == pytest.approx(group["margin_test"])
    outlier, largest = rows[("outlier", "outlier")], rows[("items", "8")]
    backwards = {n: _backwards_ndcg(n) for n in (4, 8)}
    assert outlier["margin"] == pytest.approx(1 - backwards[4])
    assert largest["margin"] == pytest.approx(backwards[8] - 1)
    assert (outlier["wins"], outlier["ties"], outlier["losses"]) == (8, 0, 0)
    assert (largest["wins"], largest["losses"]) == (0, 8) and largest["margin"] < 0
    middle = rows[("items", "6")]  # the tree's slip on fold 2: a win in 2 of its 8 QGs
    assert (middle["wins"], middle["ties"], middle["losses"]) == (2, 6, 0)
    backwards[6] = _backwards_ndcg(6)
    assert middle["margin"] == pytest.approx((1 - backwards[6]) / 4)
    # The ResNet ranks as the tree does: a tie everywhere, so what pretraining adds is the DL's
    # margin over the tree, bin by bin.
    assert all(r["margin"] == 0 for r in entries[("no-pretrain-dl", "gbdt")]["bins"])
    gain = entries[("pretrained-dl", "no-pretrain-dl")]
    assert (gain["model"], gain["reference"]) == ("simclr-rank+full", "resnet")
    assert [r["margin"] for r in gain["bins"]] == pytest.approx([r["margin"] for r in dl["bins"]])
    with (folder / "report" / "where.csv").open() as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == sum(len(e["bins"]) for e in entries.values())
    assert {r["against"] for r in written} == {"gbdt", "no-pretrain-dl"}
    assert {r["model"] for r in written} == {"simclr-rank+full", "resnet"}
    assert "id='where-table'" in (folder / "report" / "dashboard.html").read_text()
    printed = next(
        line for line in out.getvalue().splitlines() if "simclr-rank+full - gbdt:" in line
    )
    # Printed: the bins apart by Holm p (the same margin in every unit: p 0), not the others.
    assert f"items 8 {largest['margin']:+.4f} (Holm p=0.000)" in printed
    assert "outlier outlier" in printed and "items 6 " not in printed
    assert "resnet - gbdt: all +0.0000" in out.getvalue()
    assert "simclr-rank+full - resnet: all " in out.getvalue()
    # The page's per-QG view and this section share one read of each run's scores.
    assert len(reads) == 12 and set(reads.values()) == {1}


def test_holm_by_hand() -> None:
    # Sorted 0.01, 0.03, 0.04 times 3, 2, 1: 0.03, 0.06, 0.04 -> step-down keeps the running max.
    assert where.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adjusted = where.holm([0.5, math.nan, 0.001])  # NaN is not part of the family of two
    assert adjusted[0] == pytest.approx(0.5) and math.isnan(adjusted[1])
    assert adjusted[2] == pytest.approx(0.002)
    assert where.holm([0.6, 0.7]) == [1.0, 1.0]


def test_read_test_per_group_by_hand(tmp_path: Path) -> None:
    # QG 7: 3 items, the relevant one ranked last; QG 8: 2 items, none relevant.
    path = tmp_path / "scores.npz"
    labels = np.array([0.0, 0.0, 1.0, 0.0, 0.0], dtype=np.float32)
    arrays = {"test": np.array([3.0, 2.0, 1.0, 1.0, 0.0]), "test_labels": labels}
    arrays |= {"test_offsets": np.array([0, 3, 5]), "test_qids": np.array([7, 8])}
    np.savez(path, **arrays, test_outliers=np.array([False, True]))
    loaded = read_test_per_group(path, k=5, policy="skip")
    assert list(loaded["qids"]) == [7, 8] and list(loaded["outlier"]) == [False, True]
    assert list(loaded["items"]) == [3, 2]
    assert loaded["relevant"] == pytest.approx([1 / 3, 0.0])
    assert loaded["ndcg"][0] == pytest.approx(1 / math.log2(4)) and math.isnan(loaded["ndcg"][1])
    assert read_test_per_group(path, k=5, policy="zero")["ndcg"][1] == 0.0
    # A run without scores, one written before test labels were kept, a broken file: left out.
    assert read_test_per_group(tmp_path / "missing.npz", k=5, policy="skip") is None
    np.savez(tmp_path / "old.npz", **{k: v for k, v in arrays.items() if k != "test_labels"})
    assert read_test_per_group(tmp_path / "old.npz", k=5, policy="skip") is None
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    assert read_test_per_group(tmp_path / "broken.npz", k=5, policy="skip") is None
