"""``predict``, ``export``, ``select`` and ``report`` take the run or sweep folder as their first
argument, as the README writes them, on the folders the tool names itself (``frac=``, ``seed=``),
absolute or relative, under a runs root whose path holds a space and an ``=``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import tiny_data

from scarce_ltr.cli import STAGES, run
from scarce_ltr.cli_args import is_positional
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.letor import write_letor
from scarce_ltr.data.stage_config import CommonConfig

DATA = tiny_data(n_features=16)
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=15", "gbdt.early_stopping_rounds=5"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> dict[str, Path]:
    """A one-cell sweep run without ``run_dir=``: every folder is the tool's own default."""
    root = tmp_path_factory.mktemp("positional") / "team runs" / "a=b"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LTR_RUNS_DIR", str(root))
        common = "[" + ",".join([*DATA, *GBDT]) + "]"
        run(["sweep", "quick", "models=[gbdt]", "fractions=[0.2]", "seeds=[0]", "workers=1",
             "logger=none", "report=false", f"overrides.common={common}",
             "overrides.pretrain=[]", "overrides.finetune=[]"])  # fmt: skip
    sweep_folder = root / "sweeps" / "quick"
    (cell,) = json.loads((sweep_folder / "manifest.json").read_text())["cells"]
    run_folder = Path(cell["run_dir"])
    assert "frac=0.2" in run_folder.parts and "seed=0" in run_folder.parts
    assert (run_folder / "DONE").is_file()
    data = root.parent / "new.txt"
    cfg, _ = load_config(CommonConfig, DATA)
    write_letor(load_dataset(cfg.data)["test"], data, precision=9)
    return {"root": root, "sweep": sweep_folder, "run": run_folder, "data": data}


def test_predict_takes_the_tools_own_run_folder_absolute_or_relative(
    sweep, tmp_path, monkeypatch
) -> None:
    absolute = run(["predict", str(sweep["run"]), f"data.path={sweep['data']}",
                    f"out={tmp_path / 'abs.csv'}"])  # fmt: skip
    monkeypatch.chdir(sweep["root"])
    relative = sweep["run"].relative_to(sweep["root"])
    assert "=" in str(relative)
    again = run(["predict", str(relative), f"data.path={sweep['data']}",
                 f"out={tmp_path / 'rel.csv'}"])  # fmt: skip
    assert (tmp_path / "abs.csv").read_bytes() == (tmp_path / "rel.csv").read_bytes()
    (first,) = absolute.values()
    (second,) = again.values()
    assert first["metrics"]["ndcg@5"] == second["metrics"]["ndcg@5"] > 0


def test_export_takes_the_tools_own_run_folder(sweep, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(sweep["root"])
    relative = str(sweep["run"].relative_to(sweep["root"]))
    for given, name in ((str(sweep["run"]), "abs.txt"), (relative, "rel.txt")):
        run(["export", given, "format=lightgbm", f"out={tmp_path / name}"])
    assert (tmp_path / "abs.txt").read_bytes() == (tmp_path / "rel.txt").read_bytes()


def test_select_and_report_take_the_sweep_folder(sweep, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LTR_RUNS_DIR", str(sweep["root"]))
    by_folder = run(["select", str(sweep["sweep"]), f"out={tmp_path / 'best.json'}"])
    monkeypatch.chdir(sweep["root"])
    by_relative = run(["select", "sweeps/quick", f"out={tmp_path / 'best2.json'}"])
    assert by_folder["choices"] == by_relative["choices"] and by_folder["choices"]
    assert json.loads((tmp_path / "best.json").read_text())
    run(["report", str(sweep["sweep"]), f"out={tmp_path / 'report'}"])
    assert (tmp_path / "report" / "dashboard.html").is_file()


def test_the_positional_folder_and_its_key_together_are_refused(sweep, tmp_path) -> None:
    with pytest.raises(UserError, match=r"both give the run"):
        run(["predict", str(sweep["run"]), f"run={sweep['run']}", f"data.path={sweep['data']}"])


@pytest.mark.parametrize(
    ("command", "arg", "positional"),
    [
        ("predict", "runs/letor-Fold1/baseline/gbdt/frac=1/seed=0", True),
        ("predict", "/abs/path with space/frac=0.02/seed=2", True),
        ("predict", "frac=0.02/seed=0", True),  # cd'ed into the method's folder
        ("predict", "seed=0", True),  # cd'ed into the setting's folder: not a predict key
        ("predict", "1e5", True),
        ("predict", "out=x.csv", False),
        ("predict", "data.path=new.txt", False),
        ("export", "format=onnx", False),
        ("select", "select_k=3", False),
        ("report", "runs/sweeps/quick", True),
        ("report", "--dry-run", False),
    ],
)
def test_what_counts_as_the_positional_argument(command, arg, positional) -> None:
    assert is_positional(arg, STAGES[command]) is positional
