"""Kill runs at random moments; the rerun must end with the artefacts of an uninterrupted run.

A run's files change only at its writes, and every write passes two fault points
(`scarce_ltr.core.files.fault_point`): its temp file half written, and the file in place. A
SIGKILL at any other moment leaves the same files as one at the next point, so killing at
points drawn at random covers the states a real kill can leave. Each test runs the command once
without a kill (the reference, which also counts the points), then a chain of runs each killed
at a drawn point, then a last run, and compares what the last run leaves with the reference.
``LTR_FAULT_SEED`` picks the draw (default 0); a soak test loops over seeds.
"""

from __future__ import annotations

import json
import os
import random
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import fork_or_skip, tiny_data, tiny_pretraining

import scarce_ltr.baselines.run
import scarce_ltr.finetune.train
import scarce_ltr.pretrain.train
import scarce_ltr.sweeps.sweep  # noqa: F401  (the stages are imported once, before any fork)
from scarce_ltr import cli
from scarce_ltr.core.files import FAULT_AT_ENV, FAULT_COUNTER_ENV, FAULT_KILL_ENV, TEMP_SUFFIX

# Children forked mid-run: CUDA cannot start again in a fork, so they run on the CPU.
pytestmark = pytest.mark.cpu

KILLS = 3  # kill moments per chain
FEW_ROUNDS = ["gbdt.num_threads=1", "gbdt.max_rounds=15", "gbdt.early_stopping_rounds=5"]
# One grid point: a run takes about a second.
GBDT = [*FEW_ROUNDS, "gbdt.grid=full", "gbdt.num_leaves=[7]", "gbdt.min_data_in_leaf=[5]",
        "gbdt.feature_fraction=[1.0]"]  # fmt: skip


def _cli(args: list[str], tmp_path: Path, *, kill_at: int | None = None, group=False) -> tuple:
    """Run the command line in a forked child (torch is imported once, here); ``(return code,
    fault points passed)``, the code negative for a signal as in `subprocess`."""
    counter = tmp_path / f"counter-{random.random()}"
    env = {FAULT_COUNTER_ENV: str(counter), FAULT_AT_ENV: str(kill_at or 10**9)}
    if group:
        env[FAULT_KILL_ENV] = "group"
    pid = fork_or_skip()
    if pid == 0:  # the child: a process group of its own, so a group kill spares pytest
        code = 1
        try:
            os.setpgid(0, 0)
            os.environ.pop(FAULT_KILL_ENV, None)
            os.environ.update(env)
            result = cli.run(args)
            code = getattr(result, "exit_code", 0)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    points = int(counter.read_text() or 0) if counter.is_file() else 0
    if kill_at is None:
        assert code == 0, f"exit code {code}"
    return code, points


def _chain(
    args: list[str], reference: Path, crashed: Path, tmp_path: Path, *, group=False, kills=KILLS
):
    """Reference run, then runs killed at drawn points, then a last run to the end."""
    _, total = _cli([*args, f"run_dir={reference}"], tmp_path, group=group)
    assert total >= 6, f"only {total} fault points: the writes no longer pass them"
    rng = random.Random(int(os.environ.get("LTR_FAULT_SEED", "0")))
    left = total
    for _ in range(kills):
        moment = rng.randint(1, left)
        code, _ = _cli([*args, f"run_dir={crashed}"], tmp_path, kill_at=moment, group=group)
        if code == 0:  # the rest of the run passes fewer points than drawn: it finished
            break
        assert code == -9, f"exit code {code}"
        _check_done_marker(crashed)
        left = max(left - moment + 2, 1)  # roughly what is left to redo
    _cli([*args, f"run_dir={crashed}"], tmp_path, group=group)
    leftovers = [p for p in crashed.rglob(f".*{TEMP_SUFFIX}")]
    assert not leftovers, f"temp files of interrupted writes were not removed: {leftovers}"


def _check_done_marker(folder: Path) -> None:
    """A DONE marker is never there without every file it lists (sweep: in every run)."""
    for done in folder.rglob("DONE"):
        listed = json.loads(done.read_text() or "{}").get("files", [])
        assert all((done.parent / name).exists() for name in listed), done


def _tensors(path: Path, key: str) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)[key]


def _same_tensors(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def _same_scores(a: Path, b: Path) -> None:
    with np.load(a / "scores.npz") as x, np.load(b / "scores.npz") as y:
        assert sorted(x.files) == sorted(y.files)
        for name in x.files:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)


def _metrics(folder: Path) -> str:
    """The report's metrics as text (NaN, for no outlier QG, equals itself there)."""
    return json.dumps(json.loads((folder / "report.json").read_text())["metrics"], sort_keys=True)


def test_pretraining_killed_anywhere_ends_as_if_never_killed(tmp_path: Path) -> None:
    args = ["pretrain", "simclr-rank", *tiny_pretraining(), "epochs=3", "item_budget=300"]
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    _chain(args, reference, crashed, tmp_path)
    _same_tensors(_tensors(reference / "encoder.pt", "state_dict"),
                  _tensors(crashed / "encoder.pt", "state_dict"))  # fmt: skip
    curve = [
        json.loads((f / "report.json").read_text())["loss_curve"] for f in (reference, crashed)
    ]
    assert curve[0] == curve[1]


def test_finetuning_killed_anywhere_ends_as_if_never_killed(tmp_path: Path) -> None:
    args = ["finetune", "full", "pretrained=none", *tiny_data(), "logger=none", "epochs=4",
            "encoder.width=8", "encoder.hidden=16", "encoder.n_blocks=1"]  # fmt: skip
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    _chain(args, reference, crashed, tmp_path)
    _same_tensors(_tensors(reference / "model.pt", "state_dict"),
                  _tensors(crashed / "model.pt", "state_dict"))  # fmt: skip
    _same_scores(reference, crashed)
    assert _metrics(reference) == _metrics(crashed)


def test_gbdt_killed_anywhere_ends_as_if_never_killed(tmp_path: Path) -> None:
    args = ["baseline", "gbdt", *tiny_data(), "logger=none", *GBDT]
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    _chain(args, reference, crashed, tmp_path)
    assert (reference / "model.txt").read_text() == (crashed / "model.txt").read_text()
    _same_scores(reference, crashed)
    assert _metrics(reference) == _metrics(crashed)


def test_sweep_killed_anywhere_loses_and_repeats_no_cell(tmp_path: Path) -> None:
    common = "[" + ",".join([*tiny_data(), *FEW_ROUNDS]) + "]"  # (no list inside a list)
    args = ["sweep", "quick", "models=[gbdt]", "fractions=[0.5,1.0]", "seeds=[0]", "workers=1",
            "logger=none", "report=false", f"overrides.common={common}",
            "overrides.pretrain=[]", "overrides.finetune=[]"]  # fmt: skip
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    _chain(args, reference, crashed, tmp_path, group=True, kills=2)  # jobs are processes: slow
    cells = {}
    for folder in (reference, crashed):
        manifest = json.loads((folder / "manifest.json").read_text())
        cells[folder] = {c["id"]: c for c in manifest["cells"]}
        assert all(c["status"] == "done" for c in manifest["cells"])
    assert cells[reference].keys() == cells[crashed].keys() and len(cells[crashed]) == 2
    for cell_id, cell in cells[crashed].items():
        run_dir, ref_dir = Path(cell["run_dir"]), Path(cells[reference][cell_id]["run_dir"])
        assert (run_dir / "model.txt").read_text() == (ref_dir / "model.txt").read_text()
        assert _metrics(run_dir) == _metrics(ref_dir)
        # Each cell's log shows its runs: a cell never ran again after it finished.
        log = (run_dir / "log.txt").read_text()
        assert log.count("$ ") >= 1 and "finished before" not in log
