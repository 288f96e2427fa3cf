"""Data sets told apart in run folders, the missing-split hint, data-info's transform line, and
the report's words when no outlier QG was flagged or a curve crosses back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import DataConfig, check_files
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.reports.report_text import crossover_text

ROOT = Path(__file__).resolve().parents[1]
OHSUMED = ROOT.parent / "shared" / "data" / "ohsumed-letor3"


def test_letor_run_folders_carry_the_folder_name(tmp_path: Path) -> None:
    a, b = tmp_path / "web" / "Fold1", tmp_path / "news"
    assert DataConfig(name="letor", path=str(a)).run_name == "letor-web-Fold1"
    assert DataConfig(name="letor", path=str(b)).run_name == "letor-news"
    assert DataConfig(name="synthetic").run_name == "synthetic"  # README paths unchanged
    assert DataConfig(name="ohsumed", path=str(b)).run_name == "ohsumed"
    cfg, _ = load_config(PretrainConfig, ["data=letor", f"data.path={b}", "method=simclr"])
    assert cfg.identity().default_folder().parts[-5] == "letor-news"
    synthetic, _ = load_config(PretrainConfig, ["method=simclr"])
    assert synthetic.identity().default_folder().parts[-5] == "synthetic"


def test_missing_split_suggests_the_file_that_is_there(tmp_path: Path) -> None:
    for name in ("train.txt", "valid.txt", "test.txt"):
        (tmp_path / name).write_text("0 qid:1 1:0.5\n")
    cfg, _ = load_config(CommonConfig, ["data=letor", f"data.path={tmp_path}"])
    with pytest.raises(UserError, match=r"(?s)vali\[.*try data\.splits\.vali=valid$"):
        check_files(cfg.data)
    fixed, _ = load_config(
        CommonConfig, ["data=letor", f"data.path={tmp_path}", "data.splits.vali=valid"]
    )
    check_files(fixed.data)


def test_no_hint_without_a_likely_file(tmp_path: Path) -> None:
    (tmp_path / "train.txt").write_text("0 qid:1 1:0.5\n")
    cfg, _ = load_config(CommonConfig, ["data=letor", f"data.path={tmp_path}"])
    with pytest.raises(UserError) as info:
        check_files(cfg.data)
    assert "try data.splits" not in str(info.value)


@pytest.mark.skipif(not OHSUMED.is_dir(), reason="OHSUMED LETOR 3.0 not present")
def test_data_info_prints_the_transform_and_explains_no_outliers(capsys) -> None:
    run(["data-info", "data=letor", f"data.path={OHSUMED / 'Fold1'}", "data.transform=log1p"])
    out = capsys.readouterr().out
    assert "data set: letor-ohsumed-letor3-Fold1" in out
    assert "features: transform log1p (fit on train" in out
    # The histogram rule flags no OHSUMED test QG (the preset uses knn for that reason).
    assert "no test QG was flagged" in out and "data.outliers.method=knn" in out


def _scan_run(folder: Path, model: str, fraction: float, seed: int, test: float) -> None:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        json.dumps(
            {"data": {"name": "synthetic"}, "seed": seed, "scarcity": {"fraction": fraction}}
        )
    )
    report = {
        "stage": "baseline",
        "method": model,
        "seed": seed,
        "metrics": {
            "vali": {"ndcg@5": test},
            "test": {"ndcg@5": test, "outlier_ndcg@5": math.nan, "n_outlier_groups": 0},
            "outliers": {"method": "histogram"},
        },
    }
    (folder / "report.json").write_text(json.dumps(report).replace("NaN", "null"))
    (folder / "DONE").write_text("")


def test_report_says_why_there_is_no_outlier_chart(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    for fraction in (0.1, 0.5):
        for seed in (0, 1):
            _scan_run(root / f"gbdt/{fraction}/{seed}", "gbdt", fraction, seed, 0.4 + seed / 100)
    report = run(["report", f"runs_root={root}"])
    section = report["sections"][0]
    assert "no test QG was flagged" in section["outlier_note"]
    assert "Outlier" not in section["crossover_text"]
    out = capsys.readouterr().out
    assert "Outlier-NDCG@5: no test QG was flagged" in out
    html = (root / "report" / "dashboard.html").read_text()
    assert "<b>Outlier-NDCG@5</b>: no test QG was flagged" in html
    assert "caption>test Outlier-NDCG" not in html


def test_crossover_sentence_names_both_sides_when_the_curve_crosses_back() -> None:
    info = {
        "status": "never",
        "wins": [(2.0, False), (10.0, True), (50.0, True)],
        "first_loss": 2.0,
        "last_win": None,
    }
    text = crossover_text({"outlier": info}, 5)
    assert "does not beat" not in text
    assert "leads the best other group at 10%, 50% labeled QGs and trails it at 2%" in text
    plain = {"status": "crossover", "wins": [(2.0, True), (50.0, False)]}
    text = crossover_text({"test": plain | {"last_win": 2.0, "first_loss": 50.0}}, 5)
    assert "leads the best other group up to 2% labeled QGs and trails it from 50%" in text


def _query_normalised_folder(root: Path) -> Path:
    """A LETOR 4.0-shaped ``Fold1/`` (46 features, each min-max scaled within its query)."""
    rng = np.random.default_rng(0)
    for split, first_qid in (("train", 0), ("vali", 100), ("test", 200)):
        lines = []
        for qid in range(first_qid, first_qid + 30):
            x = rng.normal(size=(10, 46))
            x = (x - x.min(0)) / (x.max(0) - x.min(0))
            for label, row in zip(rng.integers(0, 3, size=10), x, strict=True):
                lines.append(
                    f"{label} qid:{qid} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(row))
                )
        (root / "Fold1").mkdir(exist_ok=True)
        (root / "Fold1" / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize("preset", ["mq2007", "mq2008"])
def test_letor4_presets_flag_outliers_on_query_normalised_features(
    tmp_path: Path, preset: str, capsys
) -> None:
    folder = _query_normalised_folder(tmp_path)
    run(["data-info", f"data={preset}", f"data.path={folder}", "data.outliers.method=histogram"])
    assert "no test QG was flagged" in capsys.readouterr().out
    run(["data-info", f"data={preset}", f"data.path={folder}"])
    out = capsys.readouterr().out
    assert "outlier test QGs (knn): 1 (3.33% of test QGs)" in out
