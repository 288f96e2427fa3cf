"""Runs notice changed data (issue 62, item 3): a run records the fingerprint of every data file
it read (``inputs.json``: size and SHA-256, the parse cache's key); a finished run, or a resume,
whose data changed since is refused in one line naming the file, never skipped over other data
nor trained on after the edit. A run of a version before (no ``inputs.json``) is accepted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tiny import letor_folder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_inputs import INPUTS
from scarce_ltr.core.runs import Run

GBDT = ["baseline", "gbdt", "gbdt.num_threads=1", "gbdt.max_rounds=5", "logger=none"]


def _command(data: Path, folder: Path) -> list[str]:
    return [*GBDT, "data=letor", f"data.path={data}", f"run_dir={folder}"]


def _edit_keeping_size_and_time(path: Path) -> None:
    """Change one label (0 -> 1, 1 -> 0) and put the size and modification time back, as
    ``cp -p``, ``touch -r`` or ``rsync -t`` do."""
    stat = path.stat()
    text = path.read_text()
    edited = ("1" if text[0] == "0" else "0") + text[1:]
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size


def test_a_finished_run_over_edited_data_is_refused_naming_the_file(tmp_path, capsys) -> None:
    data, folder = letor_folder(tmp_path / "data"), tmp_path / "run"
    run(_command(data, folder))
    assert run(_command(data, folder)) is None  # the same data: skipped
    assert "skipped" in capsys.readouterr().err

    _edit_keeping_size_and_time(data / "vali.txt")
    with pytest.raises(UserError) as error:
        run(_command(data, folder))
    message = str(error.value)
    assert "\n" not in message and f"{data / 'vali.txt'}" in message
    assert "changed since the run read it" in message and "run_dir=<another folder>" in message
    assert (folder / "DONE").is_file()  # refused, not rerun
    recorded = json.loads((folder / INPUTS).read_text())["files"]
    assert set(recorded) == {"train", "vali", "test"}
    assert recorded["vali"]["path"] == str(data / "vali.txt")


def test_a_resume_after_an_edit_is_refused_before_it_trains(tmp_path, monkeypatch) -> None:
    data, folder = letor_folder(tmp_path / "data"), tmp_path / "run"

    class Stopped(Exception):
        pass

    def stop(self, body, **kwargs):
        raise Stopped

    with monkeypatch.context() as patch:  # stopped after training, before report and DONE
        patch.setattr(Run, "finish", stop)
        with pytest.raises(Stopped):
            run(_command(data, folder))
    assert not (folder / "DONE").exists() and (folder / INPUTS).is_file()
    (data / "train.txt.query").write_text("4\n4\n4\n4\n")  # a file the run did not read
    with pytest.raises(UserError, match=r"train.txt.query: a file the run did not read"):
        run(_command(data, folder))
    (data / "train.txt.query").unlink()
    (data / "train.txt").write_text((data / "train.txt").read_text().replace("qid:4", "qid:5"))
    trained = []
    monkeypatch.setattr("scarce_ltr.trees.tree_run.prepare_data", lambda *a, **k: trained.append(1))
    with pytest.raises(UserError, match=r"data/train.txt: changed since the run read it"):
        run(_command(data, folder))
    assert not trained and not (folder / "DONE").exists()


def test_data_fixed_before_the_run_got_going_is_no_change(tmp_path) -> None:
    """The advice of a data error (relabel the file) is followed by running again: a run that
    stopped before it trained protects no fingerprint."""
    data = letor_folder(tmp_path / "data", {"train": {1: "1000 qid:1 1:1"}})
    folder = tmp_path / "run"
    with pytest.raises(UserError, match=r"train.txt:1: label 1000 is outside"):
        run(_command(data, folder))
    letor_folder(data)
    run(_command(data, folder))
    assert (folder / "DONE").is_file()


def test_a_run_without_a_fingerprint_is_accepted_as_it_is(tmp_path, capsys) -> None:
    """A run finished by a version before fingerprints: unknown, accepted (never taken for
    changed), and nothing is written into it."""
    data, folder = letor_folder(tmp_path / "data"), tmp_path / "run"
    run(_command(data, folder))
    (folder / INPUTS).unlink()
    _edit_keeping_size_and_time(data / "train.txt")
    assert run(_command(data, folder)) is None
    assert "skipped" in capsys.readouterr().err and not (folder / INPUTS).exists()


def test_synthetic_data_has_no_file_to_fingerprint(tmp_path) -> None:
    folder = tmp_path / "run"
    run([*GBDT, *tiny_data(), f"run_dir={folder}"])
    assert (folder / "DONE").is_file() and not (folder / INPUTS).exists()
    assert run([*GBDT, *tiny_data(), f"run_dir={folder}"]) is None


def test_a_run_over_a_source_run_run_again_is_refused_naming_it(tmp_path, capsys) -> None:
    """The finished runs a run is built from (here an ensemble's members; an encoder, a teacher
    likewise) are fingerprinted by their report.json: a member deleted and run again is named,
    never skipped over as the run it mixed."""
    members = [tmp_path / "a", tmp_path / "b"]
    for i, folder in enumerate(members):
        run([*GBDT, *tiny_data(), f"seed={i}", f"run_dir={folder}"])
    mix = ["ensemble", *tiny_data(), "logger=none", f"runs=[{members[0]},{members[1]}]"]
    run([*mix, f"run_dir={tmp_path / 'mix'}"])
    recorded = json.loads((tmp_path / "mix" / INPUTS).read_text())
    assert set(recorded["sources"]) == {"runs[0]", "runs[1]"} and recorded["files"] == {}
    assert run([*mix, f"run_dir={tmp_path / 'mix'}"]) is None  # the same members: skipped

    (members[1] / "DONE").unlink()  # b runs again
    run([*GBDT, *tiny_data(), "seed=1", f"run_dir={members[1]}"])
    with pytest.raises(UserError, match=rf"runs\[1\]={members[1]} was run again since"):
        run([*mix, f"run_dir={tmp_path / 'mix'}"])
