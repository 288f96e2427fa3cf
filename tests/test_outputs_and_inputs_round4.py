"""Issue 62's fourth round, items 2, 5, 8 and 9: ``out=`` writes only a regular file of its own;
``select`` never chooses silently over a hole; CR-only line endings; the misleading messages
(an unwritable cache, a FIFO as data, the estimators' save()/work_dir=, a YAML key given
twice). Each test failed before its fix."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import numpy as np
import pytest
from fake_sweep import run_cell, write_manifest
from tiny import letor_folder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import TEMP_SUFFIX, atomic_write_text
from scarce_ltr.data.letor import read_letor

DATA = [*tiny_data(), "logger=none"]
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=10", "gbdt.early_stopping_rounds=5"]
LINES = ["2 qid:1 1:0.5 12:1", "0 qid:1 1:0.2 3:0.1", "1 qid:2 1:0.3 12:0.5", "0 qid:2 2:0.4"]


@pytest.fixture(scope="module")
def gbdt(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("round4") / "gbdt"
    run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={folder}"])
    return folder


def letor_file(path: Path) -> Path:
    path.write_text("\n".join(LINES) + "\n")
    return path


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ---- item 2: out= writes only a regular file of its own ------------------------------------


def _special_targets(folder: Path) -> dict[str, Path]:
    """A FIFO, a socket, a link to a file of the user's and (where this process may make one)
    a character device like /dev/null, each where ``out=`` points."""
    fifo = folder / "fifo.csv"
    os.mkfifo(fifo)
    sock = folder / "sock.csv"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.close()
    mine = folder / "mine.csv"
    mine.write_text("my own file\n")
    link = folder / "link.csv"
    link.symlink_to(mine)
    targets = {"a named pipe": fifo, "a socket": sock, "a symbolic link": link}
    device = folder / "device.csv"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        targets["a character device"] = device
    except (PermissionError, OSError):
        pass  # not root: the other kinds stand for it
    return targets


def _kinds(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IFMT(os.lstat(p).st_mode) for p in folder.iterdir()}


def test_predict_and_export_refuse_a_target_that_is_no_regular_file(gbdt, tmp_path) -> None:
    """Before: a FIFO, a socket or a device became a plain file (as root, /dev/full did), and
    a link was replaced by the predictions (its file kept, the link gone)."""
    source = letor_file(tmp_path / "test.txt")
    where = tmp_path / "out"
    where.mkdir()
    targets = _special_targets(where)
    before = _kinds(where)
    for kind, target in targets.items():
        for args in (
            ["predict", str(gbdt), f"data.path={source}", f"out={target}"],
            ["export", str(gbdt), "format=lightgbm", f"out={target}"],
        ):
            with pytest.raises(UserError) as caught:
                run(args)
            message = _one_line(caught)
            assert str(target) in message and kind in message, message
            assert "left as it was" in message and TEMP_SUFFIX not in message
    assert _kinds(where) == before  # each still what it was, no temp file beside
    assert (where / "mine.csv").read_text() == "my own file\n"


def test_any_atomic_write_refuses_a_fifo(tmp_path) -> None:
    """select's best.json, report's files: every atomic write checks its target."""
    fifo = tmp_path / "best.json"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match=r"best.json: it is a named pipe \(FIFO\)"):
        atomic_write_text(fifo, "{}")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(tmp_path) == ["best.json"]


def test_predict_out_of_another_suffix_is_no_folder(gbdt, tmp_path, capsys) -> None:
    """Before: ``out=scores.txt`` made a folder scores.txt/ holding test.csv, silently."""
    source = letor_file(tmp_path / "test.txt")
    for name in ("scores.txt", "scores.tsv", "scores.json"):
        with pytest.raises(UserError, match=rf"out=.*{re.escape(name)}: .*give out=") as caught:
            run(["predict", str(gbdt), f"data.path={source}", f"out={tmp_path / name}"])
        assert "is neither" in _one_line(caught)
        assert not (tmp_path / name).exists()
    # A file without a suffix where out= names it: not taken as a folder to make.
    plain = tmp_path / "notes"
    plain.write_text("mine\n")
    with pytest.raises(UserError, match=r"notes is a file.*give out=") as caught:
        run(["predict", str(gbdt), f"data.path={source}", f"out={plain}"])
    assert "remove" not in _one_line(caught) and plain.read_text() == "mine\n"
    # A folder: given with a trailing /, one that exists, or a new name without a suffix (said).
    capsys.readouterr()
    run(["predict", str(gbdt), f"data.path={source}", f"out={tmp_path / 'by.slash'}/"])
    assert (tmp_path / "by.slash" / "test.csv").is_file()
    run(["predict", str(gbdt), f"data.path={source}", f"out={tmp_path / 'new'}"])
    assert (tmp_path / "new" / "test.csv").is_file()
    assert f"out={tmp_path / 'new'} names a folder" in capsys.readouterr().err


def test_out_inside_a_runs_own_files_is_refused_without_advice_to_delete(gbdt, tmp_path) -> None:
    """Before: ``out=<run>/report.json`` said "a file of that name is in the way; remove it",
    and ``export out=<run>/report.json`` replaced the run's report by a model."""
    source = letor_file(tmp_path / "test.txt")
    before = {p.name: p.read_bytes() for p in gbdt.iterdir() if p.is_file()}
    outs = [gbdt / "report.json", gbdt / "DONE", gbdt / "config.yaml", gbdt / "model.txt",
            gbdt / "report.json" / "p.csv", gbdt / "scores.npz"]  # fmt: skip
    for out in outs:
        for args in (
            ["predict", str(gbdt), f"data.path={source}", f"out={out}"],
            ["export", str(gbdt), "format=lightgbm", f"out={out}"],
        ):
            with pytest.raises(UserError, match=rf"of the run {re.escape(str(gbdt))}") as caught:
                run(args)
            message = _one_line(caught)
            assert not re.search(r"remove|delete", message), message
    assert {p.name: p.read_bytes() for p in gbdt.iterdir() if p.is_file()} == before
    # Its predictions/ and export/ folders are the commands' own (their defaults).
    run(["predict", str(gbdt), f"data.path={source}", f"out={gbdt / 'predictions' / 'a.csv'}"])
    run(["export", str(gbdt), "format=lightgbm", f"out={gbdt / 'export' / 'm.txt'}"])


# ---- item 5: select never chooses silently over a hole --------------------------------------


def _sweep(root: Path) -> Path:
    folder = root / "sweeps" / "holes"
    cells = []
    models = (("gbdt", "gbdt", (0.5, 0.4)), ("resnet", "no-pretrain-dl", (0.6, 0.3)))
    for model, group, values in models:
        for seed in range(3):
            metrics = {"vali": {"ndcg@5": values[0] + seed / 100}, "test": {"ndcg@5": values[1]}}
            cells.append(run_cell(folder, "synthetic", model, dataset="synthetic", stage="baseline",
                                  group=group, seed=seed, metrics=metrics))  # fmt: skip
    return write_manifest(folder, cells)


def test_select_names_missing_and_damaged_cells_and_stops(tmp_path, capsys) -> None:
    """Before: a cell folder deleted and a report.json cut short were left out silently, and
    the choice was made over what remained."""
    from scarce_ltr.sweeps.select import SelectConfig, main

    root = tmp_path / "runs"
    folder = _sweep(root)
    cells = json.loads((folder / "manifest.json").read_text())["cells"]
    gone, damaged = Path(cells[3]["run_dir"]), Path(cells[4]["run_dir"])
    shutil.rmtree(gone)
    (damaged / "report.json").write_text('{"metrics": {"te')
    with pytest.raises(UserError) as caught:
        main(SelectConfig(sweep="holes", runs_root=str(root)))
    message = _one_line(caught)
    assert cells[3]["id"] in message and cells[4]["id"] in message
    assert "allow_missing=true" in message and not (folder / "report" / "best.json").exists()
    best = main(SelectConfig(sweep="holes", runs_root=str(root), allow_missing=True))
    err = capsys.readouterr().err
    assert "left out 2 cell(s)" in err and cells[3]["id"] in err and cells[4]["id"] in err
    assert sorted(c["id"] for c in best["left_out"]) == sorted([cells[3]["id"], cells[4]["id"]])
    (choice,) = best["choices"]
    assert choice["model"] == "resnet" and choice["n_seeds"] == 1


def test_select_allow_missing_from_the_command_line(tmp_path, monkeypatch) -> None:
    root = tmp_path / "runs"
    folder = _sweep(root)
    cells = json.loads((folder / "manifest.json").read_text())["cells"]
    shutil.rmtree(Path(cells[0]["run_dir"]))
    monkeypatch.setenv("LTR_RUNS_DIR", str(root))
    with pytest.raises(UserError, match=r"allow_missing=true"):
        run(["select", "holes"])
    best = run(["select", "holes", "allow_missing=true"])
    assert [c["id"] for c in best["left_out"]] == [cells[0]["id"]]


# ---- item 8: CR-only line endings ------------------------------------------------------------


def test_cr_only_line_endings_are_refused_naming_the_file(tmp_path) -> None:
    """Before: old Mac line ends (CR only) made one line of the file: a comment on the first
    line swallowed the rest, and predict scored one item."""
    mac = tmp_path / "mac.txt"
    mac.write_bytes(b"2 qid:1 1:0.5 # first doc\r0 qid:1 1:0.2\r1 qid:2 1:0.3\r")
    with pytest.raises(UserError, match=r"mac.txt:1: .*carriage return.*\(CR\)") as caught:
        read_letor(mac)
    assert "line endings" in _one_line(caught)
    crlf = tmp_path / "dos.txt"  # Windows' CRLF is read as before
    crlf.write_bytes(b"2 qid:1 1:0.5 # first doc\r\n0 qid:1 1:0.2\r\n1 qid:2 1:0.3\r\n")
    assert read_letor(crlf).n_items == 3
    later = tmp_path / "later.txt"  # a lone CR in a later line of a LF file: that line named
    later.write_bytes(b"2 qid:1 1:0.5\n0 qid:1 1:0.2\n1 qid:2 1:0.3\r0 qid:2 1:0.1\n")
    with pytest.raises(UserError, match=r"later.txt:3: "):
        read_letor(later)


def test_predict_refuses_a_cr_only_file(gbdt, tmp_path) -> None:
    mac = tmp_path / "mac.txt"
    mac.write_bytes(("\r".join(line + " # doc" for line in LINES) + "\r").encode())
    with pytest.raises(UserError, match=r"mac.txt:1: .*carriage return"):
        run(["predict", str(gbdt), f"data.path={mac}", f"out={tmp_path / 'p.csv'}"])
    assert not (tmp_path / "p.csv").exists()


# ---- item 9: the misleading ones --------------------------------------------------------------


def test_an_unwritable_cache_names_ltr_cache_dir_and_the_reason(tmp_path, monkeypatch) -> None:
    """Before: ``... (give run_dir=<a folder you may write to>)``: the cache is no run's."""
    from scarce_ltr.core import files

    data = letor_folder(tmp_path / "data")

    def refused(target):
        raise PermissionError(errno.EACCES, "Permission denied", str(target))

    monkeypatch.setattr(files, "temp_folder_beside", refused)
    monkeypatch.setattr("scarce_ltr.data.cache.temp_folder_beside", refused)
    with pytest.raises(UserError) as caught:
        run(["data-info", "data=letor", f"data.path={data}"])
    message = _one_line(caught)
    assert "LTR_CACHE_DIR" in message and "Permission denied" in message
    assert "give LTR_CACHE_DIR=<" in message and "run_dir" not in message


def test_an_unwritable_table_cache_names_ltr_cache_dir(tmp_path, monkeypatch) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path / "t"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split in ("train", "vali", "test"):
        columns = {"qid": np.repeat(np.arange(4), 3), "f0": rng.normal(size=12),
                   "label": np.tile([0, 1, 2], 4)}  # fmt: skip
        pq.write_table(pa.table(columns), folder / f"{split}.parquet")

    def refused(target):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr("scarce_ltr.data.arrays.temp_folder_beside", refused)
    with pytest.raises(UserError) as caught:
        run(["data-info", "data=table", f"data.path={folder}"])
    message = _one_line(caught)
    assert "LTR_CACHE_DIR" in message and "No space left on device" in message
    assert "run_dir" not in message


def test_a_fifo_as_a_data_file_is_named_as_such(gbdt, tmp_path) -> None:
    """Before: ``missing files: .../test[.txt|.txt.gz]`` and ``no such file or folder``."""
    data = letor_folder(tmp_path / "data")
    (data / "test.txt").unlink()
    os.mkfifo(data / "test.txt")
    with pytest.raises(UserError) as caught:
        run(["data-info", "data=letor", f"data.path={data}"])
    message = _one_line(caught)
    assert "test.txt" in message and "named pipe (FIFO)" in message and "missing" not in message
    with pytest.raises(UserError, match=r"test.txt.* named pipe \(FIFO\)") as caught:
        run(["predict", str(gbdt), f"data.path={data / 'test.txt'}", f"out={tmp_path / 'p.csv'}"])
    assert "no such" not in _one_line(caught)


FAST = {"n_estimators": 5, "n_jobs": 1, "num_leaves": 7, "verbose": False}


@pytest.fixture(scope="module")
def fitted():
    from scarce_ltr.api import TreeRanker

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 4)), rng.integers(0, 3, 60).astype(float)
    return TreeRanker("gbdt", **FAST).fit(x, y, np.repeat(np.arange(10), 6))


def test_save_names_the_users_path_and_leaves_no_temp_folder(fitted, tmp_path, monkeypatch) -> None:
    """Before: ``[Errno 1] Operation not permitted: '/sys/.x.lz4nnw65.tmp'``, a temp name."""
    from scarce_ltr.api import saving

    target = tmp_path / "saved"

    def full(ranker, folder):  # the bundle's files written into the temp folder beside target
        raise OSError(errno.ENOSPC, "No space left on device", str(folder))

    monkeypatch.setattr(saving, "write_bundle", full)
    with pytest.raises(OSError, match="No space left on device") as caught:
        fitted.save(target)
    message = str(caught.value)
    assert f"save the ranker to {target}" in message and TEMP_SUFFIX not in message
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    (tmp_path / "afile").write_text("")
    with pytest.raises(OSError) as caught:
        fitted.save(tmp_path / "afile" / "sub")
    assert str(tmp_path / "afile" / "sub") in str(caught.value)
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]


def test_work_dir_errors_name_the_work_dir(tmp_path, monkeypatch) -> None:
    from scarce_ltr.api import TreeRanker

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 4)), rng.integers(0, 3, 60).astype(float)
    qid = np.repeat(np.arange(10), 6)
    work = tmp_path / "work"
    real = tempfile.mkdtemp

    def refused(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == work:
            raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/fit-abcd1234")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    with pytest.raises(OSError, match="Permission denied") as caught:
        TreeRanker("gbdt", work_dir=work, **FAST).fit(x, y, qid)
    message = str(caught.value)
    assert f"work_dir={work}" in message and "fit-abcd1234" not in message
    assert list(work.iterdir()) == []
    (tmp_path / "afile").write_text("")
    with pytest.raises(OSError) as caught:
        TreeRanker("gbdt", work_dir=tmp_path / "afile", **FAST).fit(x, y, qid)
    assert f"work_dir={tmp_path / 'afile'}" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("seed: 1\nlogger: none\nseed: 2\n", 3, "seed"),
        ("gbdt:\n  max_rounds: 3\n  max_rounds: 5\n", 3, "gbdt.max_rounds"),
        ("gbdt:\n  max_rounds: 3\nseed: 0\ngbdt:\n  num_threads: 1\n", 4, "gbdt"),
    ],
)
def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path, text, line, key) -> None:
    """Before: YAML's safe_load kept the last value silently (5 rounds, or gbdt's first block
    dropped whole)."""
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        run(["data-info", "--config", str(path)])
    message = _one_line(caught)
    assert message.startswith(f"{path}:{line}: ") and f"'{key}'" in message
    assert "twice" in message
