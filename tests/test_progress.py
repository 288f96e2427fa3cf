"""Progress lines for files, the ETA, and the block that ends every training run."""

from __future__ import annotations

import io
import json
from pathlib import Path

from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.progress import LineProgress, duration, eta, final_block


def test_duration_and_eta() -> None:
    assert duration(4.25) == "4.2s" and duration(75.2) == "1m15s" and duration(4000) == "1h06m"
    assert eta(10.0, 2, 6) == 20.0  # 5 s a step, 4 steps left
    assert duration(eta(1.0, 0, 5)) == "?"


def test_line_progress_is_rate_limited_and_keeps_first_and_last() -> None:
    out = io.StringIO()
    bar = LineProgress(total=50, desc="finetune full", unit="epoch", every=1e9, file=out)
    for epoch in range(50):
        bar.set_postfix(vali=f"{epoch / 100:.2f}")
        bar.update(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("finetune full: epoch 1/50, vali 0.00 [")
    assert lines[1].startswith("finetune full: epoch 50/50, vali 0.49 [") and "ETA 0.0s" in lines[1]


def test_line_progress_every_zero_writes_each_step_with_eta() -> None:
    out = io.StringIO()
    bar = LineProgress(total=3, desc="gbdt", unit="fit", initial=1, every=0, file=out)
    bar.update(1)
    bar.update(1)
    lines = out.getvalue().splitlines()
    assert [line.split(" [")[0] for line in lines] == ["gbdt: fit 2/3", "gbdt: fit 3/3"]
    assert all("elapsed, ETA" in line for line in lines)


def test_final_block_names_folder_choice_metrics_and_seconds() -> None:
    report = {
        "stage": "finetune",
        "model": "simclr-rank+full",
        "dataset": "synthetic",
        "label_setting": "frac=0.02",
        "seed": 1,
        "best_epoch": 37,
        "epochs_trained": 60,
        "learning_rate": 2e-4,
        "metrics": {
            "vali": {"ndcg@5": 0.61234, "ndcg@10": 0.7},
            "test": {
                "ndcg@5": 0.5811,
                "ndcg@10": 0.64,
                "outlier_ndcg@5": 0.25,
                "outlier_ndcg@10": float("nan"),
                "n_outlier_groups": 3,
            },
            "outliers": {"method": "histogram"},
        },
    }
    block = final_block(report, Path("/runs/x"), 12.34)
    assert (
        block.splitlines()[0]
        == "== finetune simclr-rank+full finished (synthetic, frac=0.02, seed 1) =="
    )
    assert "run folder : /runs/x" in block and "chosen     : epoch 37 of 60, lr 0.0002" in block
    assert "vali NDCG" in block and "0.6123" in block and "0.5811" in block
    assert "Outlier-NDCG (n=3)" in block and "0.2500" in block and "n/a" in block
    assert block.splitlines()[-1] == "seconds    : 12.3"
    report["metrics"]["test"]["n_outlier_groups"] = 0
    assert "no outlier test QG flagged (data.outliers.method=histogram)" in final_block(
        report, Path("/runs/x"), 1.0
    )


def test_a_finished_baseline_ends_with_its_block(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "gbdt"
    run(
        [
            "baseline",
            "gbdt",
            *tiny_data(),
            "gbdt.max_rounds=10",
            "gbdt.num_threads=1",
            "logger=none",
            f"run_dir={folder}",
        ]
    )
    out = capsys.readouterr().out.strip().splitlines()
    report = json.loads((folder / "report.json").read_text())
    block = "\n".join(out[-8:])
    assert out[-1].startswith("seconds    : ")
    assert f"run folder : {folder}" in block
    assert f"rounds={report['selected']['rounds']}" in block
    test_line = next(line for line in out if line.startswith("test NDCG"))
    assert f"{report['metrics']['test']['ndcg@5']:.4f}" in test_line
    # The chosen model's per-round vali curve (W&B's round/vali_ndcg@5, the dashboard's curve).
    curve = report["rounds_vali_ndcg@5"]
    rounds = report["selected"]["rounds"]
    assert len(curve) >= rounds and all(0 <= v <= 1 for v in curve)
    assert curve.index(max(curve)) == rounds - 1  # the round kept is the curve's first best
