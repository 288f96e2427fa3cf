"""``predict`` and ``export`` say what they do: bad labels, two inputs for one CSV, a narrower
file, temp files of a killed run, write errors and file modes (issue 25, items 4, 7 and 9)."""

from __future__ import annotations

import errno
import gzip
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core import files
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import TEMP_SUFFIX, file_error, remove_stale_temps, write_json
from scarce_ltr.data.datasets import MAX_LABEL
from scarce_ltr.serving.ranker import load_ranker

DATA = [*tiny_data(), "logger=none"]
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=10", "gbdt.early_stopping_rounds=5"]
# Three QGs of 12-feature items, a comment and a blank line: the 4th data item is on line 6.
LINES = [
    "# made by hand",
    "2 qid:1 1:0.5 12:1",
    "0 qid:1 1:0.2 3:0.1",
    "",
    "1 qid:2 1:0.3 12:0.5",
    "{label} qid:2 1:0.1 2:0.4",
    "0 qid:3 1:0.9 12:0.2",
]


@pytest.fixture(scope="module")
def gbdt(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("robust") / "gbdt"
    run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={folder}"])
    return folder


def letor_file(path: Path, label: str = "1") -> Path:
    path.write_text("\n".join(LINES).format(label=label) + "\n")
    return path


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("label", ["-1", str(MAX_LABEL + 1), "1e9"])
def test_a_label_outside_the_grades_stops_predict_before_any_csv(gbdt, tmp_path, label) -> None:
    source = letor_file(tmp_path / "bad.txt", label)
    out = tmp_path / "out"
    message = f"bad.txt:6: label {float(label):g} is outside the relevance grades 0..{MAX_LABEL}"
    with pytest.raises(UserError, match=re.escape(message)):
        run(["predict", str(gbdt), f"data.path={source}", f"out={out}"])
    assert not out.exists() or not list(out.iterdir())  # no CSV, no temp file


def test_a_bad_label_in_a_later_piece_names_its_line(gbdt, tmp_path, monkeypatch) -> None:
    from scarce_ltr.data.letor import blocks

    monkeypatch.setattr(blocks, "CHUNK_BYTES", 64)  # a piece per block of a line or two
    source = tmp_path / "long.txt"
    body = [f"{i % 3} qid:{i // 4} 1:{i}.5 2:0.25" for i in range(40)]
    body[33] = "-1 qid:8 1:3.5"
    source.write_text("\n".join(body) + "\n")
    with pytest.raises(UserError, match="long.txt:34: label -1 is outside"):
        run(["predict", str(gbdt), f"data.path={source}", f"out={tmp_path / 'long.csv'}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.txt"]


def test_a_label_above_max_grade_leaves_no_csv(gbdt, tmp_path) -> None:
    source = letor_file(tmp_path / "test.txt", "3")
    with pytest.raises(UserError, match="max_grade"):
        run(["predict", str(gbdt), f"data.path={source}", f"out={tmp_path / 'p.csv'}",
             "max_grade=2"])  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.txt"]


def test_two_inputs_for_one_csv_are_refused(gbdt, tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    letor_file(data / "test.txt")
    (data / "test.txt.gz").write_bytes(gzip.compress((data / "test.txt").read_bytes()))
    letor_file(data / "vali.txt")
    out = tmp_path / "out"
    both = f"{data / 'test.txt'} and {data / 'test.txt.gz'} would both be written to"
    with pytest.raises(UserError, match=f"{both} {out / 'test.csv'}"):
        run(["predict", str(gbdt), f"data.path={data}", f"out={out}"])
    assert not out.exists()
    # A file name for the several CSVs of a folder is refused too (not a folder named x.csv).
    (data / "test.txt.gz").unlink()
    with pytest.raises(UserError, match=r"out=.*one\.csv names one file.*2 files"):
        run(["predict", str(gbdt), f"data.path={data}", f"out={tmp_path / 'one.csv'}"])
    assert not (tmp_path / "one.csv").exists()


def test_a_narrower_file_gets_the_training_warning(gbdt, tmp_path, capsys) -> None:
    narrow = tmp_path / "narrow.txt"
    narrow.write_text("1 qid:1 1:0.5 3:1\n0 qid:1 1:0.2 5:0.1\n")
    run(["predict", str(gbdt), f"data.path={narrow}", f"out={tmp_path / 'n.csv'}"])
    err = capsys.readouterr().err
    assert f"warning: {narrow}: the highest feature indices differ (the file: 5, the model" in err
    assert "the narrower file is padded with zero features to 12" in err
    run(["predict", str(gbdt), f"data.path={letor_file(tmp_path / 'full.txt')}",
         f"out={tmp_path / 'f.csv'}"])  # fmt: skip
    assert "warning" not in capsys.readouterr().err


KILLED = """
import os, signal, sys
from scarce_ltr.cli import run
from scarce_ltr.serving.ranker import BundledRanker
BundledRanker.score_split = lambda self, split: os.kill(os.getpid(), signal.SIGKILL)
run(sys.argv[1:])
"""


def test_temps_of_a_killed_predict_go_and_live_ones_stay(gbdt, tmp_path, capsys) -> None:
    import fcntl

    source = letor_file(tmp_path / "test.txt")
    out = tmp_path / "out"
    args = ["predict", str(gbdt), f"data.path={source}", f"out={out}"]
    killed = subprocess.run([sys.executable, "-c", KILLED, *args], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    orphans = hidden(out)
    assert len(orphans) == 1 and orphans[0].startswith(".test.csv.")
    assert not (out / "test.csv").exists()
    # A temp file another predict is writing right now (its writer holds the lock) stays.
    live = out / f".test.csv.live0000{TEMP_SUFFIX}"
    with open(live, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        run(args)
        assert hidden(out) == [live.name]
    assert f"removed {out / orphans[0]} (left by an interrupted predict)" in capsys.readouterr().err
    assert (out / "test.csv").read_text().startswith("qid,position,score,rank\n")
    # Temp files of other files, and those below the folder, are not this predict's to remove.
    (out / "sub").mkdir()
    others = [out / f".vali.csv.abcdefgh{TEMP_SUFFIX}", out / f".notes.txt.abcdefgh{TEMP_SUFFIX}",
              out / "sub" / f".test.csv.abcdefgh{TEMP_SUFFIX}"]  # fmt: skip
    for path in others:
        path.write_text("")
    run(args)
    assert all(path.exists() for path in others) and not live.exists()


def test_remove_stale_temps_keeps_a_locked_temp(tmp_path) -> None:
    import fcntl

    orphan = tmp_path / f".a.json.orphan00{TEMP_SUFFIX}"
    live = tmp_path / f".b.json.live0000{TEMP_SUFFIX}"
    orphan.write_text("half")
    with open(live, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert remove_stale_temps(tmp_path) == [orphan]
        assert live.exists()
    assert remove_stale_temps(tmp_path) == [live]


def _fail(code: int, name: str):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), name)

    return fail


def test_write_errors_name_the_target_and_out(gbdt, tmp_path, monkeypatch) -> None:
    source = letor_file(tmp_path / "test.txt")
    out = tmp_path / "out"
    temp = str(out / f".test.csv.abcdefgh{TEMP_SUFFIX}")
    monkeypatch.setattr(files.os, "fsync", _fail(errno.ENOSPC, temp))
    with pytest.raises(UserError) as caught:
        run(["predict", str(gbdt), f"data.path={source}", f"out={out}"])
    message = str(caught.value)
    assert message.startswith(f"cannot write {out / 'test.csv'}: No space left on device")
    assert "give out=<" in message and "run_dir" not in message and TEMP_SUFFIX not in message
    assert hidden(out) == []
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "mkstemp", _fail(errno.EROFS, temp))
    message = (f"cannot write {out / 'test.csv'}: Read-only file system (the file system is "
               "read-only; give out=<a writable folder>)")  # fmt: skip
    with pytest.raises(UserError, match=f"^{re.escape(message)}$"):
        run(["predict", str(gbdt), f"data.path={source}", f"out={out}"])


def test_export_errors_name_the_target_and_out(gbdt, tmp_path, monkeypatch) -> None:
    from scarce_ltr.serving import export

    target = tmp_path / "raw.txt"
    args = ["export", str(gbdt), "format=lightgbm", f"out={target}"]
    temp = str(tmp_path / f".raw.txt.abcdefgh{TEMP_SUFFIX}")
    monkeypatch.setattr(tempfile, "mkstemp", _fail(errno.EACCES, temp))
    with pytest.raises(UserError, match=rf"^cannot write {target}: Permission denied "
                       r"\(give out=<a folder you may write to>\)$"):  # fmt: skip
        run(args)
    monkeypatch.undo()
    monkeypatch.setitem(export.EXPORTERS, "lightgbm", _fail(errno.ENOSPC, temp))
    with pytest.raises(UserError, match=rf"^cannot write {target}: No space left on device "
                       r"\(free some space, or give out=<folder on another disk>\)$"):  # fmt: skip
        run(args)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(UserError, match=rf"out={folder} is a folder; give a file: "
                       rf"out={folder / 'model.raw.txt'}"):  # fmt: skip
        run(["export", str(gbdt), "format=lightgbm", f"out={folder}"])
    assert list(folder.iterdir()) == []


def test_an_orphaned_export_temp_is_removed(gbdt, tmp_path, capsys) -> None:
    target = tmp_path / "raw.txt"
    orphan = tmp_path / f".raw.txt.abcdefgh{TEMP_SUFFIX}"
    orphan.write_text("half a model")
    run(["export", str(gbdt), "format=lightgbm", f"out={target}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.txt"]
    assert f"removed {orphan}" in capsys.readouterr().err


def test_file_error_names_the_commands_key() -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    assert "give run_dir=<folder on another disk>" in str(file_error(full, "write", "x"))
    assert "give out=<folder on another disk>" in str(file_error(full, "write", "x", key="out"))


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_respect_the_umask(gbdt, tmp_path, umask, mode) -> None:
    old = os.umask(umask)
    try:
        source = letor_file(tmp_path / "test.txt")
        run(["predict", str(gbdt), f"data.path={source}", f"out={tmp_path / 'p.csv'}"])
        run(["export", str(gbdt), "format=lightgbm", f"out={tmp_path / 'raw.txt'}"])
        write_json(tmp_path / "a.json", {"a": 1})
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert modes == {"test.txt": mode, "p.csv": mode, "raw.txt": mode, "a.json": mode}
    old = os.umask(umask)
    try:
        assert files.current_umask() == umask and os.umask(umask) == umask  # read, unchanged
    finally:
        os.umask(old)


def test_a_runs_folders_and_bundle_respect_the_umask(tmp_path) -> None:
    """The bundle is built in a temp folder and renamed into place: it gets mkdir's mode, not
    mkdtemp's 0o700, so a teammate can predict with the run."""
    old = os.umask(0o022)
    try:
        run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={tmp_path / 'run'}"])
    finally:
        os.umask(old)
    modes = {
        str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode)
        for p in (tmp_path / "run").rglob("*")
        if p.name != ".lock"
    }
    bundle = os.path.join("run", "bundle")
    assert modes[bundle] == 0o755 and modes[os.path.join(bundle, "bundle.json")] == 0o644
    assert set(modes.values()) == {0o755, 0o644}, modes


def test_the_csv_of_a_padded_file_scores_as_the_wide_one(gbdt, tmp_path) -> None:
    """A narrower file is padded: it scores as if its absent features were there as zeros."""
    narrow = tmp_path / "narrow.txt"
    narrow.write_text("1 qid:1 1:0.5 3:1\n0 qid:1 1:0.2 5:0.1\n")
    wide = tmp_path / "wide.txt"
    wide.write_text("1 qid:1 1:0.5 3:1 12:0\n0 qid:1 1:0.2 5:0.1 12:0\n")
    for path in (narrow, wide):
        run(["predict", str(gbdt), f"data.path={path}", f"out={tmp_path / (path.stem + '.csv')}"])
    rows = [
        np.loadtxt(tmp_path / f"{p.stem}.csv", delimiter=",", skiprows=1) for p in (narrow, wide)
    ]
    np.testing.assert_array_equal(*rows)
    features = np.zeros((2, 12), dtype=np.float32)
    features[0, [0, 2]], features[1, [0, 4]] = (0.5, 1), (0.2, 0.1)
    np.testing.assert_array_equal(rows[0][:, 2], load_ranker(gbdt).predict(features))


def test_a_damaged_bundle_or_an_unreadable_file_is_one_message(gbdt, tmp_path, monkeypatch):
    import shutil

    from scarce_ltr.data.letor import stream

    copy = tmp_path / "copy"
    shutil.copytree(gbdt / "bundle", copy)
    source = letor_file(tmp_path / "test.txt")
    args = ["predict", str(copy), f"data.path={source}", f"out={tmp_path / 'p.csv'}"]
    (copy / "model.txt").write_text("not a model\n")
    with pytest.raises(UserError, match=f"^{re.escape(str(copy / 'model.txt'))}: not a LightGBM"):
        run(args)
    (copy / "model.txt").unlink()
    with pytest.raises(UserError, match="model.txt: not a readable model file"):
        run(args)
    shutil.copy(gbdt / "bundle" / "model.txt", copy / "model.txt")
    monkeypatch.setattr(stream, "open", _fail(errno.EACCES, str(source)), raising=False)
    with pytest.raises(UserError, match=f"^{re.escape(str(source))}: cannot be read"):
        run(args)
    assert not (tmp_path / "p.csv").exists()
