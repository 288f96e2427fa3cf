"""The sweep models ``stack:<model>,...`` and ``topk:<model>,...``: planned like an ensemble,
run with rank-normalised scores and cross-fitted weights (or a cross-fitted k), the same numbers
on a second run, and the report's section on choosing among the sweep's models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tiny import tiny_data

from scarce_ltr.cli import run

GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=15", "gbdt.early_stopping_rounds=5"]
TINY = "[" + ",".join([*tiny_data(n_features=16), "data.synthetic.n_vali_groups=15", *GBDT]) + "]"
STACK = "stack:gbdt,gbdt-pca"
TOPK = "topk:gbdt,gbdt-pca"


def _sweep(folder: Path, *extra: str) -> list[dict]:
    return run(
        ["sweep", "quick", f'models=[gbdt,gbdt-pca,"{STACK}","{TOPK}"]', "fractions=[1.0]",
         "seeds=[0]", "workers=1", "logger=none", "report=false", f"overrides.common={TINY}",
         "overrides.pretrain=[]", "overrides.finetune=[]", f"run_dir={folder}", *extra]
    )  # fmt: skip


def test_a_sweep_plans_and_runs_a_stack_deterministically(tmp_path, capsys) -> None:
    # A sweep-wide ensemble override cannot turn the stack into another mix: its options win.
    cells = _sweep(tmp_path / "a", "overrides.ensemble=[normalize=zscore]")
    assert [c["status"] for c in cells] == ["done"] * 4
    stack = next(c for c in cells if c["model"] == STACK)
    assert stack["group"] == "hybrid" and stack["stage"] == "ensemble"
    report = json.loads((Path(stack["run_dir"]) / "report.json").read_text())
    assert report["method"] == STACK and report["normalize"] == "rank"
    assert report["weighting"] == "crossfit" and report["crossfit"]["folds"] == 5
    members = [c["run_dir"] for c in cells if c["model"] not in (STACK, TOPK)]
    assert report["runs"] == members  # the same cell's member runs
    topk = next(c for c in cells if c["model"] == TOPK)
    topk_report = json.loads((Path(topk["run_dir"]) / "report.json").read_text())
    assert topk["group"] == "hybrid" and topk_report["runs"] == members
    assert topk_report["normalize"] == "rank" and topk_report["weighting"] == "topk"
    assert topk_report["topk"]["folds"] == 5 and topk_report["topk"]["k"] in (1, 2)
    # Run again (the members are kept, the stack's folder removed): the same numbers.
    shutil.rmtree(stack["run_dir"])
    _sweep(tmp_path / "a", "overrides.ensemble=[normalize=zscore]")
    again = json.loads((Path(stack["run_dir"]) / "report.json").read_text())
    for key in ("weights", "crossfit", "tried"):
        assert again[key] == report[key]
    assert again["metrics"]["vali"] == report["metrics"]["vali"]
    assert again["metrics"]["test"] == report["metrics"]["test"]
    # The report compares the vali argmax with the robust rule over the sweep's models.
    capsys.readouterr()
    run(["report", str(tmp_path / "a"), "outlier_figure=false"])
    out = capsys.readouterr().out
    assert "choice on small validation sets" in out
    choice_csv = (tmp_path / "a" / "report" / "choice.csv").read_text().splitlines()
    assert choice_csv[0].startswith("dataset,setting,n_units") and len(choice_csv) == 2
