"""``./run.sh report`` without a sweep: two runs of one cell are never mixed silently."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scarce_ltr.cli import run
from scarce_ltr.reports import results


def _fake_run(folder: Path, *, seed: int, epochs: int | None, test: float, age: float) -> Path:
    """A finished finetuning run: config.yaml, report.json, DONE; ``age`` seconds old."""
    folder.mkdir(parents=True)
    config = {
        "data": {"name": "letor", "path": "/data/ohsumed"},
        "scarcity": {"fraction": 0.1, "val": "full"},
        "seed": seed,
        "epochs": epochs,
        "run_dir": str(folder),
        "pretrained": f"/elsewhere/{folder.name}",
    }
    (folder / "config.yaml").write_text(json.dumps(config))
    metrics = {
        "vali": {"ndcg@5": test, "n_groups_evaluated": 10},
        "test": {"ndcg@5": test, "n_groups_evaluated": 10, "n_outlier_groups": 0},
        "val_labels": "full",
        "policy": "skip",
    }
    report = {
        "stage": "finetune",
        "seed": seed,
        "strategy": "full",
        "pretrained": "/x",
        "pretraining_method": "simclr-rank",
        "metrics": metrics,
    }
    (folder / "report.json").write_text(json.dumps(report))
    (folder / "DONE").write_text("")
    stamp = os.path.getmtime(folder / "report.json") - age
    os.utime(folder / "report.json", (stamp, stamp))
    return folder


def test_the_run_with_the_common_settings_is_kept_and_both_are_named(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    # The sweep's runs (no epoch cap) for seeds 0 and 1, and an ad-hoc 4-epoch run of seed 0,
    # newer than both: the newest-wins rule would have let it stand for seed 0.
    sweep0 = _fake_run(root / "sweeps/s/seed=0", seed=0, epochs=None, test=0.2656, age=100)
    _fake_run(root / "sweeps/s/seed=1", seed=1, epochs=None, test=0.27, age=100)
    adhoc = _fake_run(root / "letor/adhoc/seed=0", seed=0, epochs=4, test=0.2865, age=0)
    notes: list[str] = []
    rows = results.rows_from_scan(root, [5], notes)
    seed0 = next(r for r in rows if r["seed"] == 0)
    assert seed0["test_ndcg@5"] == 0.2656 and seed0["run_dir"] == str(sweep0.resolve())
    assert len(rows) == 2 and len(notes) == 1
    note = notes[0]
    assert str(sweep0.resolve()) in note and str(adhoc.resolve()) in note
    assert "(kept)" in note and "(left out)" in note
    assert "epochs: None vs 4" in note and "2 run(s) of simclr-rank+full share, against 1" in note


def test_same_settings_keep_the_newer_and_say_so(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _fake_run(root / "a/seed=0", seed=0, epochs=4, test=0.1, age=100)
    newer = _fake_run(root / "b/seed=0", seed=0, epochs=4, test=0.2, age=0)
    notes: list[str] = []
    rows = results.rows_from_scan(root, [5], notes)
    assert [r["run_dir"] for r in rows] == [str(newer.resolve())]
    assert "same settings; kept the newer run" in notes[0]


def test_report_prints_and_shows_the_note(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    _fake_run(root / "sweeps/s/seed=0", seed=0, epochs=None, test=0.2656, age=100)
    _fake_run(root / "sweeps/s/seed=1", seed=1, epochs=None, test=0.27, age=100)
    _fake_run(root / "letor/adhoc/seed=0", seed=0, epochs=4, test=0.2865, age=0)
    report = run(["report", f"runs_root={root}"])
    assert len(report["notes"]) == 1
    assert "note: letor/simclr-rank+full/frac=0.1/seed=0: two runs" in capsys.readouterr().err
    html = (root / "report" / "dashboard.html").read_text()
    assert "Runs that competed for one cell" in html and "adhoc" in html
