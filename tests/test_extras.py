"""The optional parts (pyproject.toml's extras): the core runs without them, and a feature whose
extra is missing stops with one line naming it (`scarce_ltr.core.extras`). Also: the OpenMP wait
policy the package sets on import, and a finished run's checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tiny import tiny_data, tiny_pretraining

from scarce_ltr.core import tracking
from scarce_ltr.core.extras import EXTRAS, MissingExtra, require
from scarce_ltr.trees.backends import TREE_BACKENDS

ROOT = Path(__file__).resolve().parents[1]
# `EXTRAS`' modules and each tree backend's, which its module declares (`core.extras.Extra`)
OPTIONAL = (*EXTRAS, *(b.extra.module for b in TREE_BACKENDS.values() if b.extra is not None))


def _one_line(text: str, extra: str) -> None:
    lines = [line for line in text.splitlines() if "scarce-ltr[" in line]
    assert len(lines) == 1, text
    assert f'pip install "scarce-ltr[{extra}]"' in lines[0]


@pytest.mark.parametrize(
    "module, extra",
    [("onnxruntime", "export"), ("matplotlib", "report"), ("optuna", "trees"),
     ("pyarrow", "parquet"), ("ray", "cluster"), ("wandb", "wandb")],
)  # fmt: skip
def test_require_names_the_extra(module, extra, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtra) as caught:
        require(module, "the feature")
    message = str(caught.value)
    assert message.startswith(f"the feature needs {EXTRAS[module][0]}, which is not installed")
    _one_line(message, extra)


def test_a_backend_and_a_search_name_the_trees_extra(monkeypatch):
    from scarce_ltr.finetune.search import _optuna
    from scarce_ltr.trees.catboost import EXTRA
    from scarce_ltr.trees.tuning import require_backend

    monkeypatch.setitem(sys.modules, "catboost", None)
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(MissingExtra, match=r"the catboost backend needs catboost") as caught:
        require_backend(EXTRA)
    _one_line(str(caught.value), "trees")
    with pytest.raises(MissingExtra, match=r"search.n_trials needs optuna") as caught:
        _optuna()
    _one_line(str(caught.value), "trees")


def test_scoring_an_onnx_file_names_the_export_extra(monkeypatch, tmp_path):
    from scarce_ltr.serving.export import load_exported

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingExtra, match="scoring an ONNX file needs onnxruntime") as caught:
        load_exported("onnx", tmp_path / "model.onnx")
    _one_line(str(caught.value), "export")


def test_logger_wandb_without_wandb_is_one_line_once(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setattr(tracking, "_SAID", set())
    for _ in range(2):  # a job server runs many stages in one process: said once
        tracker = tracking.start_tracker("wandb", run_dir=tmp_path, name="x", config={})
        assert not tracker.enabled
    err = capsys.readouterr().err
    _one_line(err, "wandb")
    assert err.startswith("warning: logger=wandb needs wandb, which is not installed")


def test_offline_note_says_where_and_how(tmp_path):
    assert tracking.offline_note(tmp_path) is None
    for run in ("a/seed=0", "b/seed=1"):
        (tmp_path / run / "wandb" / "offline-run-20261128_000000-abcd").mkdir(parents=True)
    (tmp_path / "c" / "offline-run-x").mkdir(parents=True)  # not wandb's folder
    note = tracking.offline_note(tmp_path)
    assert note is not None and "\n" not in note
    assert note.startswith(f"W&B: 2 offline run(s) under {tmp_path}")
    assert "wandb sync" in note and "logger=none" in note and "WANDB_MODE=disabled" in note


# The core path with every optional package made unimportable, in a process of its own (a test
# process has imported them): pretraining, finetuning, LightGBM, the bundles' predict; then the
# commands that need an extra, each stopping with its one line.
CORE_SCRIPT = """
import sys
for name in {optional!r}:
    sys.modules[name] = None
import numpy as np
import scarce_ltr
from scarce_ltr.cli import run
from scarce_ltr.core.extras import MissingExtra

tmp = {tmp!r}
run(["pretrain", "simclr-rank", *{pre!r}, "epochs=1", "logger=wandb", f"run_dir={{tmp}}/pre"])
run(["finetune", "full", *{data!r}, f"pretrained={{tmp}}/pre", "epochs=1", f"run_dir={{tmp}}/ft"])
run(["baseline", "gbdt", *{data!r}, "gbdt.max_rounds=5", f"run_dir={{tmp}}/gbdt"])
for run_dir in ("ft", "gbdt"):
    scores = scarce_ltr.load_ranker(f"{{tmp}}/{{run_dir}}").predict(np.ones((3, 12)))
    assert scores.shape == (3,), scores
# A sweep with logger=wandb ends with the offline runs' line (one planted in its folder), and
# without its report's extra with that extra's line instead of the report.
__import__("os").environ["WANDB_MODE"] = "disabled"  # the jobs' own processes have wandb
(__import__("pathlib").Path(tmp) / "sweep" / "old" / "wandb" / "offline-run-1").mkdir(parents=True)
sweep = ["sweep", "quick", "models=[gbdt]", "fractions=[1.0]", "seeds=[0]", "workers=1",
         "overrides.common=[" + ",".join([*{data!r}, "gbdt.max_rounds=5"]) + "]",
         "overrides.pretrain=[]", "overrides.finetune=[]", f"run_dir={{tmp}}/sweep"]
assert run(sweep).exit_code == 0
for args in (["export", f"{{tmp}}/ft", "format=onnx"], ["report", f"out={{tmp}}/report"],
             ["baseline", "xgboost", *{data!r}, f"run_dir={{tmp}}/xgb"]):
    try:
        run(args)
    except MissingExtra as exc:
        print("missing:", exc)
    else:
        raise AssertionError(args)
print("loaded:", sorted(n for n in {optional!r} if sys.modules.get(n) is not None))
"""


def test_the_core_runs_without_the_extras(tmp_path):
    script = CORE_SCRIPT.format(
        optional=OPTIONAL, tmp=str(tmp_path), pre=tiny_pretraining(), data=tiny_data()
    )
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    env["LTR_RUNS_DIR"] = str(tmp_path / "runs")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    missing = [ln for ln in done.stdout.splitlines() if ln.startswith("missing:")]
    assert missing == [
        'missing: export format=onnx needs onnx, which is not installed: pip install '
        '"scarce-ltr[export]"',
        'missing: ./run.sh report needs matplotlib, which is not installed: pip install '
        '"scarce-ltr[report]"',
        'missing: the xgboost backend needs xgboost-cpu, which is not installed: pip install '
        '"scarce-ltr[trees]"',
    ]  # fmt: skip
    assert "loaded: []" in done.stdout
    assert f"W&B: 1 offline run(s) under {tmp_path / 'sweep'}" in done.stdout
    assert (
        "warning: the sweep's report needs matplotlib, which is not installed: pip install "
        f'"scarce-ltr[report]"; then ./run.sh report {tmp_path / "sweep"}'
    ) in done.stderr
    # logger=wandb without wandb: one line (once per process), and the run goes on untracked.
    assert (
        done.stderr.count('needs wandb, which is not installed: pip install "scarce-ltr[wandb]"')
        == 1
    )
    assert (tmp_path / "pre" / "DONE").is_file() and not (tmp_path / "pre" / "wandb").exists()


def test_the_package_sets_a_passive_omp_wait_policy_before_torch():
    code = (
        "import os, sys; import scarce_ltr; "
        "print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["passive", "False"], out.stderr
    env["OMP_WAIT_POLICY"] = "active"  # the user's value wins
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["active", "False"], out.stderr


def test_a_finished_run_drops_its_checkpoints_unless_kept(tmp_path):
    from scarce_ltr.cli import run

    args = ["pretrain", "simsiam", *tiny_pretraining(), "epochs=1"]
    run([*args, f"run_dir={tmp_path / 'dropped'}"])
    run([*args, f"run_dir={tmp_path / 'kept'}", "keep_checkpoints=true"])
    dropped, kept = tmp_path / "dropped", tmp_path / "kept"
    assert not (dropped / "checkpoint.pt").exists() and (kept / "checkpoint.pt").is_file()
    for folder in (dropped, kept):
        assert (folder / "encoder.pt").is_file() and (folder / "report.json").is_file()
        assert "checkpoint.pt" not in json.loads((folder / "DONE").read_text())["files"]
    # Still finished: skipped, with or without the key (it is free to change).
    first = json.loads((dropped / "report.json").read_text())
    again = run([*args, f"run_dir={dropped}", "keep_checkpoints=true"])
    assert again is not None and again["seconds"] == first["seconds"]


def test_a_finetune_grid_drops_its_points_checkpoints(tmp_path):
    from scarce_ltr.cli import run

    run(["pretrain", "simsiam", *tiny_pretraining(), "epochs=1", f"run_dir={tmp_path / 'pre'}"])
    ft = tmp_path / "ft"
    run(["finetune", "full", *tiny_data(), f"pretrained={tmp_path / 'pre'}", "epochs=1",
         "lrs=[1e-3,1e-2]", "logger=none", f"run_dir={ft}"])  # fmt: skip
    assert len(list(ft.glob("grid/*/result.json"))) == 2
    assert not list(ft.rglob("checkpoint.pt"))
    assert (ft / "bundle").is_dir() and (ft / "DONE").is_file()


def test_a_deleted_wandb_folder_leaves_the_run_finished(tmp_path):
    from scarce_ltr.core.runs import is_done, mark_done

    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "wandb").mkdir()
    mark_done(tmp_path)
    (tmp_path / "wandb").rmdir()  # synced and cleaned up
    assert is_done(tmp_path)
    # a marker of an earlier version listed it
    (tmp_path / "DONE").write_text(json.dumps({"files": ["report.json", "wandb"]}))
    assert is_done(tmp_path)


def test_a_sweep_passes_keep_checkpoints_to_its_jobs(tmp_path, capsys):
    from scarce_ltr.cli import run

    base = ["sweep", "quick", "models=[gbdt]", "fractions=[1.0]", "seeds=[0]", "--dry-run",
            f"run_dir={tmp_path}"]  # fmt: skip
    run(base)
    assert "keep_checkpoints" not in capsys.readouterr().out
    run([*base, "keep_checkpoints=true"])
    assert "keep_checkpoints=true" in capsys.readouterr().out
