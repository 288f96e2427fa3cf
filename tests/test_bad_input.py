"""Bad input of every class ends in one line naming the file, line or key, and exit code 2;
questionable input follows the README's policy; every piece of advice about a run folder works.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import letor_folder, tiny_data, tiny_pretraining

from scarce_ltr import cli
from scarce_ltr.core import files
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_bytes
from scarce_ltr.core.locks import FolderLock
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.transforms import fit_transform
from scarce_ltr.pretrain.train import CRASH_ENV


def _main(monkeypatch, capsys, args: list[str]) -> tuple[int, str]:
    """``./run.sh <args>`` in this process: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["scarce-ltr", *args])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    return stop.value.code, capsys.readouterr().err


GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=5", "logger=none"]


def _case(tmp: Path, name: str) -> tuple[list[str], str]:
    """The command of one bad-input class and the pattern its one error line must match."""
    data = ["data=letor", f"data.path={tmp / 'data'}"]
    line = {
        "overflow": ("train", 3, "1 qid:1 1:0.5 2:1e300 3:1"),
        "duplicate index": ("train", 2, "1 qid:1 1:0.5 1:0.7 3:1"),
        "nan value": ("vali", 5, "0 qid:2 1:nan"),
        "label above the grades": ("train", 1, "1000 qid:1 1:1"),
        "negative label": ("vali", 2, "-1 qid:1 1:1"),
        "qid out of range": ("test", 1, "0 qid:99999999999999999999 1:1"),
        "feature index too large": ("train", 4, "0 qid:1 3000000000:1"),
        "malformed token": ("train", 6, "0 qid:2 1:1 two"),
    }
    if name in line:
        split, number, text = line[name]
        letor_folder(tmp / "data", {split: {number: text}})
        pattern = {
            "overflow": r"train.txt:3: value of feature 2 is 1e300, beyond the float32 range",
            "duplicate index": r"train.txt:2: feature 1 is given twice \(0.5 and 0.7\)",
            "nan value": r"vali.txt:5: value of feature 1 is 'nan' \(expected a finite",
            "label above the grades": r"train.txt:1: label 1000 is outside the relevance grades",
            "negative label": r"vali.txt:2: label -1 is outside the relevance grades 0..30",
            "qid out of range": r"test.txt:1: qid 99999999999999999999 is out of range",
            "feature index too large": r"train.txt:4: feature index 3000000000 .* above",
            "malformed token": r"train.txt:6: bad feature 'two'",
        }[name]
        command = {"overflow": "pretrain", "duplicate index": "finetune"}.get(name, "baseline")
        args = {
            "pretrain": ["pretrain", "simclr-rank", "logger=none"],
            "finetune": ["finetune", "full", "pretrained=none", "logger=none"],
            "baseline": ["baseline", "gbdt", *GBDT],
        }[command]
        return [*args, *data, f"run_dir={tmp / 'run'}"], pattern
    letor_folder(tmp / "data")
    (tmp / "a-file").write_text("")
    gbdt = ["baseline", "gbdt", *GBDT, *data]
    if name == "epochs=0":
        return [*gbdt, "epochs=0"], r"epochs=0: epochs must be >= 1"
    if name == "empty labeled set":
        return [*gbdt, "scarcity.binary_tau=50"], r"labeled train QGs and none has a relevant"
    if name == "unknown key":
        return [*gbdt, "gbdt.leaves=3"], r"unknown config key 'gbdt.leaves'"
    if name == "run_dir is a file":
        return [*gbdt, f"run_dir={tmp / 'a-file'}"], r"cannot create the folder .*a-file: "
    if name == "run_dir below a file":
        return [*gbdt, f"run_dir={tmp / 'a-file' / 'run'}"], r"a-file/run: Not a directory"
    if name == "sweep folder is a file":
        return ["sweep", "quick", f"run_dir={tmp / 'a-file'}"], r"cannot create the folder"
    if name == "pretrained= of another kind":
        other = tmp / "gbdt-run"
        other.mkdir()
        (other / "report.json").write_text(json.dumps({"stage": "baseline", "model": "gbdt"}))
        args = ["finetune", "full", f"pretrained={other}", "logger=none", *data]
        return args, r"gbdt-run is a baseline run \(model gbdt\), not a pretraining run"
    if name == "corrupt encoder.pt":
        other = tmp / "pretrained"
        other.mkdir()
        (other / "encoder.pt").write_bytes(b"half a file")
        args = ["finetune", "full", f"pretrained={other}", "logger=none", *data]
        return args, r"encoder.pt: not a readable .* delete it and run the same ./run.sh pretrain"
    if name == "data.path without a file format":  # the default data set is generated
        args = ["finetune", "full", "pretrained=none", f"data.path={tmp / 'data'}"]
        return args, r"data.path=.*data: the synthetic data set .* reads no files; .*data=letor"
    if name == "missing split file":
        (tmp / "data" / "vali.txt").unlink()
        return ["data-info", *data], r"missing files"
    raise AssertionError(name)


CASES = [
    "overflow",
    "duplicate index",
    "nan value",
    "label above the grades",
    "negative label",
    "qid out of range",
    "feature index too large",
    "malformed token",
    "epochs=0",
    "empty labeled set",
    "unknown key",
    "run_dir is a file",
    "run_dir below a file",
    "sweep folder is a file",
    "pretrained= of another kind",
    "corrupt encoder.pt",
    "missing split file",
    "data.path without a file format",
]


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_naming_the_place(name, tmp_path, monkeypatch, capsys) -> None:
    args, pattern = _case(tmp_path, name)
    code, err = _main(monkeypatch, capsys, args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    errors = [ln for ln in lines if ln.startswith("error: ")]
    if name == "missing split file":  # the one message that lists the files, one per line
        lines = lines[: lines.index(errors[0]) + 1]
        assert "vali[.txt|.txt.gz]" in err
    assert len(errors) == 1 and errors[0] == lines[-1], err
    assert re.search(pattern, errors[0]), errors[0]


def test_a_second_process_on_a_run_folder_is_told_the_holder(tmp_path, monkeypatch, capsys):
    letor_folder(tmp_path / "data")
    folder = tmp_path / "run"
    args = ["baseline", "gbdt", *GBDT, "data=letor", f"data.path={tmp_path / 'data'}"]
    with FolderLock(folder):  # another open file: flock refuses it like another process
        code, err = _main(monkeypatch, capsys, [*args, f"run_dir={folder}"])
    assert code == 2 and f"another process (PID {os.getpid()}) is running this" in err
    # A lock file left by a dead process is taken over; stale temp files are removed.
    (folder / ".lock").write_text("999999999\n")
    (folder / ".report.json.x1y2.tmp").write_text("half")
    code, err = _main(monkeypatch, capsys, [*args, f"run_dir={folder}"])
    assert code == 0, err
    assert not list(folder.glob(".*.tmp")) and "removed" in err


def test_unequal_feature_counts_are_padded_with_a_warning(tmp_path, monkeypatch, capsys):
    data = letor_folder(tmp_path / "data", {"vali": {1: "0 qid:1 1:1 5:2"}})
    code, err = _main(monkeypatch, capsys, ["data-info", "data=letor", f"data.path={data}"])
    assert code == 0
    assert f"{data / 'vali.txt'}: 5" in err and "padded with zero features to 5" in err
    code, err = _main(
        monkeypatch, capsys, ["data-info", "data=letor", f"data.path={data}", "data.n_features=5"]
    )
    assert code == 0 and "padded" not in err  # a declared width needs no warning


def test_a_full_disk_or_read_only_folder_is_one_line(tmp_path, monkeypatch) -> None:
    for code, reason in ((errno.ENOSPC, "No space left"), (errno.EROFS, "Read-only")):

        def refuse(*_args, code=code, reason=reason):
            raise OSError(code, reason)

        monkeypatch.setattr(files.os, "replace", refuse)
        with pytest.raises(UserError, match=rf"cannot write {tmp_path / 'x.json'}: {reason}"):
            atomic_write_bytes(tmp_path / "x.json", b"{}")
        assert not list(tmp_path.glob(".*")), "the temp file was left behind"


def test_transforms_of_finite_input_are_finite() -> None:
    big = float(np.finfo(np.float32).max)
    features = np.array(
        [[big, 1e30, 5.0, -big], [-big, 1e30, 5.0, 0.0], [big, 1e30 + 1e24, 5.0, 1.0]],
        dtype=np.float32,
    )
    train = RankingSplit(features, np.zeros(3, np.float32), np.array([0, 3]), np.array([1]))
    # A near-constant train column and a vali value far outside it overflow float32 unless
    # the result saturates.
    vali_features = np.array([[big, -big, -big, big]], dtype=np.float32)
    vali = RankingSplit(vali_features, np.zeros(1, np.float32), np.array([0, 1]), np.array([1]))
    one = RankingSplit(features[:1], np.zeros(1, np.float32), np.array([0, 1]), np.array([1]))
    for kind in ("none", "standardize", "log1p", "log1p-standardize", "qg-standardize"):
        for fit_on in (train, one):  # one item: every column constant
            transform = fit_transform(kind, fit_on)
            for split in (train, vali, one):
                out = transform(split).features
                assert out.dtype == np.float32 and np.isfinite(out).all(), (kind, split)


def test_the_advice_for_a_corrupt_encoder_works(tmp_path: Path) -> None:
    folder = tmp_path / "pretrain"
    args = ["pretrain", "simclr-rank", *tiny_pretraining(), "epochs=2", f"run_dir={folder}"]
    cli.run(args)
    encoder = (folder / "encoder.pt").read_bytes()
    (folder / "encoder.pt").write_bytes(encoder[: len(encoder) // 2])
    finetune = ["finetune", "lp", f"pretrained={folder}", *tiny_data(), "logger=none", "epochs=1"]
    with pytest.raises(UserError, match="delete it and run the same ./run.sh pretrain") as error:
        cli.run([*finetune, f"run_dir={tmp_path / 'ft'}"])
    assert "encoder.pt" in str(error.value)
    (folder / "encoder.pt").unlink()  # the advice
    cli.run(args)  # DONE lists encoder.pt: the run is not finished, and finishes again
    assert (folder / "encoder.pt").read_bytes() == encoder
    cli.run([*finetune, f"run_dir={tmp_path / 'ft'}"])
    assert (tmp_path / "ft" / "DONE").is_file()
    # A moved tree (pretraining and finetuning together) resumes: the finetuning run's source
    # moved with it, its settings are otherwise equal.
    model = torch.load(tmp_path / "ft" / "model.pt", weights_only=True)["state_dict"]
    shutil.move(tmp_path / "pretrain", tmp_path / "moved-pretrain")
    shutil.move(tmp_path / "ft", tmp_path / "moved-ft")
    (tmp_path / "moved-ft" / "model.pt").unlink()  # so that the run has work to do
    moved = [f"pretrained={tmp_path / 'moved-pretrain'}", *finetune[3:]]
    cli.run(["finetune", "lp", *moved, f"run_dir={tmp_path / 'moved-ft'}"])
    again = torch.load(tmp_path / "moved-ft" / "model.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(model[k], again[k]) for k in model)


def test_the_advice_for_a_corrupt_model_works(tmp_path: Path) -> None:
    folder = tmp_path / "ft"
    small = ["encoder.width=8", "encoder.hidden=16", "encoder.n_blocks=1", f"run_dir={folder}"]
    args = ["finetune", "full", "pretrained=none", *tiny_data(), "logger=none", "epochs=2", *small]
    cli.run(args)
    model = torch.load(folder / "model.pt", weights_only=True)["state_dict"]
    (folder / "model.pt").write_bytes(b"truncated")
    from scarce_ltr.finetune.model import load_model

    with pytest.raises(UserError, match="delete it and run the same ./run.sh finetune"):
        load_model(folder)
    (folder / "model.pt").unlink()
    cli.run(args)
    again = torch.load(folder / "model.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(model[k], again[k]) for k in model)


def test_a_moved_run_folder_resumes(tmp_path: Path, monkeypatch) -> None:
    args = ["pretrain", "simclr-rank", *tiny_pretraining(), "epochs=3", "item_budget=2000"]
    cli.run([*args, f"run_dir={tmp_path / 'straight'}"])
    monkeypatch.setenv(CRASH_ENV, "2")  # one batch per epoch: a crash in epoch 2
    with pytest.raises(RuntimeError):
        cli.run([*args, f"run_dir={tmp_path / 'first'}"])
    monkeypatch.delenv(CRASH_ENV)
    shutil.move(tmp_path / "first", tmp_path / "moved")
    cli.run([*args, f"run_dir={tmp_path / 'moved'}"])
    straight = torch.load(tmp_path / "straight" / "encoder.pt", weights_only=True)["state_dict"]
    moved = torch.load(tmp_path / "moved" / "encoder.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(straight[k], moved[k]) for k in straight)


def test_a_sweep_with_a_failed_cell_exits_non_zero(tmp_path, monkeypatch, capsys) -> None:
    args = ["sweep", "quick", "models=[gbdt]", "fractions=[1.0]", "seeds=[0]", "workers=1",
            "logger=none", "report=false", "overrides.per_model.gbdt=[gbdt.bogus=1]",
            f"run_dir={tmp_path / 'sweep'}"]  # fmt: skip
    code, err = _main(monkeypatch, capsys, args)
    assert code == 1 and "1 of 1 cells of the sweep did not finish" in err
    code, err = _main(monkeypatch, capsys, args)
    assert code == 1 and "resuming; 0 of 1 jobs finished before" in err


def test_a_waiting_process_gets_the_lock_when_the_holder_ends(tmp_path, capsys) -> None:
    import threading

    holder = FolderLock(tmp_path / "run")
    holder.acquire()
    threading.Timer(0.5, holder.release).start()
    with FolderLock(tmp_path / "run", wait=30) as waiter:  # a sweep's job waits like this
        assert (waiter.path).read_text().strip() == str(os.getpid())
    assert f"waiting for PID {os.getpid()}" in capsys.readouterr().err
