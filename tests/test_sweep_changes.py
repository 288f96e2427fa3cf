"""Sweeps notice changed settings and data (issue 62, items 3 and 4): a sweep rerun into its folder
whose job for a finished cell composes other settings (a per-model override, a common key) or
reads changed data refuses that cell in one line naming the key or the file, never counts the old
run as the new settings' cell, and ``report`` rows show it failed; a ``manifest.json`` that is
not one is refused by ``sweep`` as ``report`` refuses it, never written over."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
from tiny import letor_folder, tiny_data, tiny_pretraining

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.reports import results

GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=15", "gbdt.early_stopping_rounds=5"]


def _list(items: list[str]) -> str:
    return "[" + ",".join(items) + "]"


def sweep_args(tmp_path: Path, *extra: str, common: list[str] | None = None) -> list[str]:
    common = [*tiny_data(n_features=16), *GBDT] if common is None else common
    return [
        "sweep", "quick", "models=[gbdt,gbdt-pca]", "fractions=[1.0]", "seeds=[0]", "workers=1",
        "logger=none", "report=false", f"overrides.common={_list(common)}",
        "overrides.pretrain=[]", "overrides.finetune=[]", f"run_dir={tmp_path / 'sweep'}", *extra,
    ]  # fmt: skip


def _cells(result) -> dict[str, dict]:
    return {c["model"]: c for c in result}


def _logs(tmp_path: Path) -> dict[str, str]:
    return {str(p): p.read_text() for p in (tmp_path / "sweep").rglob("log.txt")}


def test_a_changed_override_refuses_the_cells_it_changes_naming_the_key(tmp_path, capsys) -> None:
    run(sweep_args(tmp_path))
    logs = _logs(tmp_path)

    result = run([*sweep_args(tmp_path), "overrides.per_model.gbdt=[gbdt.max_rounds=9]"])
    cells = _cells(result)
    assert cells["gbdt-pca"]["status"] == "done" and result.exit_code == 1
    refused = cells["gbdt"]
    assert refused["status"] == "failed" and "\n" not in refused["error"]
    assert "gbdt.max_rounds differ" in refused["error"] and refused["run_dir"] in refused["error"]
    assert f"refused synthetic/gbdt/frac=1/seed=0: {refused['run_dir']}" in capsys.readouterr().err
    assert _logs(tmp_path) == logs  # refused, not run again
    rows = results.rows_from_manifest(tmp_path / "sweep" / "manifest.json", [5])
    shown = {r["model"]: r for r in rows}
    assert shown["gbdt"]["status"] == "failed" and math.isnan(shown["gbdt"]["test_ndcg@5"])

    common = [*tiny_data(n_features=16), *GBDT, "data.transform=standardize"]
    result = run(sweep_args(tmp_path, common=common))
    assert all(c["status"] == "failed" for c in result)
    assert all("data.transform differ" in c["error"] for c in result)
    dry = run([*sweep_args(tmp_path, common=common), "--dry-run"])
    assert len(dry) == 2 and capsys.readouterr().out.count("[ stale]") == 2

    assert all(c["status"] == "done" for c in run(sweep_args(tmp_path)))  # as it was: done
    assert _logs(tmp_path) == logs


def test_runs_finished_on_a_job_run_again_are_refused_naming_it(tmp_path) -> None:
    """A refused job's folder deleted (its advice) runs again with the new settings; the finished
    jobs that read it (an ensemble over it here; a finetuning on an encoder likewise) are then
    refused naming it, never shown as the new settings' cells."""
    models = 'models=[gbdt,gbdt-pca,"ensemble:gbdt,gbdt-pca"]'
    assert all(c["status"] == "done" for c in run([*sweep_args(tmp_path), models]))
    changed = [*sweep_args(tmp_path), models, "overrides.per_model.gbdt=[gbdt.max_rounds=9]"]
    cells = _cells(run(changed))
    assert cells["gbdt"]["status"] == "failed" and "gbdt.max_rounds" in cells["gbdt"]["error"]
    assert cells["ensemble:gbdt,gbdt-pca"]["status"] == "skipped"

    shutil.rmtree(cells["gbdt"]["run_dir"])
    cells = _cells(run(changed))
    assert cells["gbdt"]["status"] == "done" and cells["gbdt-pca"]["status"] == "done"
    mix = cells["ensemble:gbdt,gbdt-pca"]
    assert mix["status"] == "failed"
    assert f"runs[0]={cells['gbdt']['run_dir']} was run again since the run read it" in mix["error"]


def test_changed_data_refuses_the_cells_that_read_it(tmp_path) -> None:
    data = letor_folder(tmp_path / "data")
    common = ["data.path=" + json.dumps(str(data)), *GBDT]
    args = [*sweep_args(tmp_path, common=common), "datasets=[letor]", "models=[gbdt]"]
    assert [c["status"] for c in run(args)] == ["done"]
    test = data / "test.txt"
    stat = test.stat()
    test.write_text(test.read_text().replace("0 qid:1", "2 qid:1", 1))  # size and time kept
    os.utime(test, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    [cell] = run(args)
    assert cell["status"] == "failed"
    assert f"{test}: changed since the run read it" in cell["error"]


def test_a_rerun_with_other_fractions_keeps_its_pretraining(tmp_path) -> None:
    """A pretraining job's label setting only sets its probe: a sweep run again with other
    fractions reuses the encoder (no setting differs), as it always did."""
    encoder = ["encoder.width=8", "encoder.hidden=16", "encoder.n_blocks=1"]
    pretrain = _list(["epochs=1", "monitor.enabled=false", *encoder])
    common = [k for k in tiny_pretraining() if k.startswith("data.")]
    args = [*sweep_args(tmp_path, common=common), "models=[simclr-rank+lp]"]
    args += [f"overrides.pretrain={pretrain}", "overrides.finetune=[epochs=1]"]
    assert [c["status"] for c in run([*args, "fractions=[0.5]"])] == ["done"]
    folder = tmp_path / "sweep" / "synthetic" / "pretrain" / "simclr-rank" / "seed=0"
    log = (folder / "log.txt").read_text()
    assert [c["status"] for c in run([*args, "fractions=[0.2]"])] == ["done"]
    assert (folder / "log.txt").read_text() == log


@pytest.mark.parametrize("text", ["{not json", '{"cells": 3}', "[]", ""])
def test_a_manifest_that_is_not_one_is_refused_and_kept(tmp_path, text) -> None:
    path = tmp_path / "sweep" / "manifest.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(UserError) as error:
        run(sweep_args(tmp_path))
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert "not a sweep manifest" in message or "'cells' must be a list" in message
    assert path.read_text() == text and not (tmp_path / "sweep" / "synthetic").exists()
    with pytest.raises(UserError, match=r"manifest.json: (not a sweep manifest|'cells' must)"):
        run(["report", str(tmp_path / "sweep")])


def test_a_finished_job_is_composed_as_its_command_composes_it(tmp_path) -> None:
    """`sweeps.stale.compose_job` (the sweeps may not import the command line) builds every
    stage's config as ``./run.sh <stage> <name> <overrides>`` does: a drift would refuse
    finished cells whose settings never changed."""
    from scarce_ltr import cli, cli_compose
    from scarce_ltr.sweeps.cells import plan_cells
    from scarce_ltr.sweeps.stale import compose_job

    models = 'models=[gbdt,simclr-rank@z+full,"ensemble:gbdt,scratch+lp",simclr-rank+full,'
    models += "simsiam+full,simclr-rank+simsiam+combine,gbdt-ssl+simclr-rank,scratch+lp]"
    args = [
        *sweep_args(tmp_path, common=tiny_data())[2:],
        models,
        "variants.z=[augment.zero_p=0.1]",
    ]
    sweep = cli_compose.compose_named(cli.STAGES["sweep"], "quick", args).cfg
    jobs, _ = plan_cells(sweep, tmp_path / "sweep")
    assert {job.stage for job in jobs} == {
        "pretrain",
        "finetune",
        "baseline",
        "combine",
        "ensemble",
    }
    for job in jobs:
        stage = cli.STAGES["finetune" if job.stage == "combine" else job.stage]
        expected = (
            cli_compose.compose_named(stage, job.name, job.overrides)
            if stage.config_folder
            else cli_compose.compose(stage, job.overrides)
        )
        composed = compose_job(job)
        assert composed.resolved == expected.resolved, job.key
        assert composed.defaults == expected.defaults, job.key
        assert composed.cfg == expected.cfg, job.key
