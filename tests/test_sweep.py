"""The sweep runner: cells, failures recorded, interruption and resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from processes import processes
from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.scarcity import ScarcityConfig
from scarce_ltr.reports import results

ROOT = Path(__file__).resolve().parents[1]
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=15", "gbdt.early_stopping_rounds=5"]
TINY = "[" + ",".join([*tiny_data(n_features=16), *GBDT]) + "]"


def sweep_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "sweep",
        "quick",
        "models=[gbdt,gbdt-pca]",
        "fractions=[0.2,1.0]",
        "seeds=[0]",
        "workers=1",
        "logger=none",
        "report=false",
        f"overrides.common={TINY}",
        "overrides.pretrain=[]",
        "overrides.finetune=[]",
        f"run_dir={tmp_path / 'sweep'}",
        *extra,
    ]


def manifest(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "sweep" / "manifest.json").read_text())


def test_dry_run_lists_cells_and_runs_nothing(tmp_path: Path, capsys) -> None:
    cells = run(sweep_args(tmp_path, "--dry-run"))
    out = capsys.readouterr().out
    assert len(cells) == 4 and "4 cells, 4 jobs" in out
    assert not (tmp_path / "sweep").exists()


def test_pretrained_models_share_one_pretraining_per_seed(tmp_path: Path, capsys) -> None:
    args = sweep_args(tmp_path, "--dry-run")
    args[2] = "models=[simclr-rank+full,simclr-rank+lp,gbdt]"
    run(args)
    out = capsys.readouterr().out
    assert out.count("] pretrain simclr-rank") == 1
    assert "6 cells, 7 jobs" in out


def test_scratch_models_finetune_a_fresh_encoder_and_pretrain_nothing(
    tmp_path: Path, capsys
) -> None:
    """``scratch+full``: the recipe of ``<method>+full`` on pretrained=none, pretraining's
    control; it waits for no pretraining and files under no-pretrain-dl."""
    args = sweep_args(tmp_path, "--dry-run")
    args[2] = "models=[scratch+full,simclr-rank+full]"
    cells = run(args)
    out = capsys.readouterr().out
    assert "4 cells, 5 jobs" in out and out.count("] pretrain simclr-rank") == 1
    scratch = [line for line in out.splitlines() if "/scratch+full/" in line]
    assert len(scratch) == 2 and all("finetune full" in line for line in scratch)
    assert all(" pretrained=none " in line for line in scratch)
    groups = {c["model"]: c["group"] for c in cells}
    assert groups == {"scratch+full": "no-pretrain-dl", "simclr-rank+full": "pretrained-dl"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("models=[gbdt,lambdamart]", "unknown sweep model 'lambdamart'"),
        ("models=[scratch+nope]", "unknown finetuning strategy 'nope'"),
        ("models=[scratch+combine]", "a combination names two or more pretraining methods"),
        ("models=[nope+full]", "unknown pretraining method 'nope'"),
        ("modles=[gbdt]", "unknown config key 'modles'"),
        ("datasets=[mslr-web30k]", "mslr-web30k"),
        ("datasets=[nope]", "unknown data set 'nope'"),
        ('models=[gbdt,"ensemble:gbdt,resnet"]', "member 'resnet' is not a .* model of this"),
        ('models=[gbdt,"ensemble:gbdt,gbdt"]', "a member appears twice"),
        ('models=[gbdt,"ensemble:gbdt"]', r"ensemble:<model>,<model>\[,...\]"),
    ],
)
def test_bad_sweeps_stop_before_any_cell(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        run([*sweep_args(tmp_path), override])
    assert not (tmp_path / "sweep").exists()


def test_failing_cell_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    cells = run([*sweep_args(tmp_path), "overrides.per_model.gbdt-pca=[gbdt.bogus=1]"])
    status = {c["id"]: c["status"] for c in cells}
    assert sorted(status.values()) == ["done", "done", "failed", "failed"]
    failed = [c for c in manifest(tmp_path)["cells"] if c["status"] == "failed"]
    assert all("gbdt.bogus" in c["error"] for c in failed)
    done = [c for c in cells if c["status"] == "done"]
    assert all((Path(c["run_dir"]) / "report.json").is_file() for c in done)


def test_ensembles_run_after_their_members_on_the_same_cells(tmp_path: Path) -> None:
    ensemble = "ensemble:gbdt-pca,gbdt"
    cells = run([*sweep_args(tmp_path), f'models=["{ensemble}",gbdt,gbdt-pca]'])
    assert len(cells) == 6 and all(c["status"] == "done" for c in cells)
    for cell in (c for c in cells if c["model"] == ensemble):
        assert cell["group"] == "gbdt"  # every member a GBDT: a GBDT seed-style ensemble
        report = json.loads((Path(cell["run_dir"]) / "report.json").read_text())
        assert report["method"] == ensemble
        setting = f"{cell['setting']}/seed={cell['seed']}"
        members = [str(tmp_path / "sweep" / "synthetic" / "baseline" / m / setting)
                   for m in ("gbdt-pca", "gbdt")]  # fmt: skip
        assert report["runs"] == members
        assert report["label_setting"] == cell["setting"]


def test_seed_ensembles_average_other_seeds_on_the_cells_labels(tmp_path: Path) -> None:
    args = ['models=["seed-ensemble:gbdt"]', "fractions=[0.2]", "seeds=[3]", "seed_ensemble_size=2"]
    cells = run([*sweep_args(tmp_path), *args])
    assert [(c["status"], c["group"], c["setting"]) for c in cells] == [
        ("done", "gbdt", "frac=0.2")
    ]
    report = json.loads((Path(cells[0]["run_dir"]) / "report.json").read_text())
    assert report["label_setting"] == "frac=0.2,labels=3" and report["weighting"] == "uniform"
    members = [Path(run) for run in report["runs"]]
    # The first is the plain run of seed 3; the other fixes seed 3's labels in a folder whose
    # name, frac=0.2,labels=3, has a comma.
    assert [m.parent.name for m in members] == ["frac=0.2", "frac=0.2,labels=3"]
    assert [m.name for m in members] == ["seed=3", "seed=1003"]
    settings = [json.loads((m / "report.json").read_text())["label_setting"] for m in members]
    assert settings == ["frac=0.2", "frac=0.2,labels=3"]
    for member in members:  # the labeled QGs of seed 3, whatever the member's seed
        config = OmegaConf.load(member / "config.yaml")
        assert ScarcityConfig(**config.scarcity).label_seed(config.seed) == 3
    assert report["weights"] == {str(m): 0.5 for m in members}
    with pytest.raises(UserError, match="seed-ensemble:<one model>"):
        run([*sweep_args(tmp_path), 'models=["seed-ensemble:ensemble:gbdt,gbdt-pca"]'])


def test_ensemble_of_a_failed_member_is_skipped(tmp_path: Path) -> None:
    models = 'models=[gbdt,gbdt-pca,"ensemble:gbdt,gbdt-pca"]'
    cells = run([*sweep_args(tmp_path), models, "overrides.per_model.gbdt-pca=[gbdt.bogus=1]"])
    ensembles = [c for c in cells if c["model"].startswith("ensemble:")]
    assert [c["status"] for c in ensembles] == ["skipped", "skipped"]
    assert all("gbdt-pca" in c["error"] for c in ensembles)


def test_interrupted_sweep_resumes_without_redoing_cells(tmp_path: Path) -> None:
    env = dict(os.environ)
    command = [sys.executable, "-m", "scarce_ltr", *sweep_args(tmp_path)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    manifest_path = tmp_path / "sweep" / "manifest.json"
    deadline = time.time() + 120
    while time.time() < deadline:
        if manifest_path.is_file() and any(
            c["status"] == "done" for c in json.loads(manifest_path.read_text())["cells"]
        ):
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    first = {c["id"]: c for c in manifest(tmp_path)["cells"]}
    finished = [c for c in first.values() if c["status"] == "done"]
    assert finished, "no cell finished before the interruption"
    logs_before = {c["id"]: (Path(c["run_dir"]) / "log.txt").read_text() for c in finished}

    cells = run(sweep_args(tmp_path))
    assert all(c["status"] == "done" for c in cells)
    for cell_id, log in logs_before.items():
        run_dir = Path(first[cell_id]["run_dir"])
        assert (run_dir / "log.txt").read_text() == log, f"{cell_id} was run again"
    assert len(cells) == len(first) == 4


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")
def test_a_sweep_stopped_with_sigterm_stops_its_jobs(tmp_path: Path) -> None:
    """``kill <sweep>`` (SIGTERM, which its jobs never see) stops the running job as Ctrl-C
    would, instead of leaving it running orphaned; the sweep exits as on Ctrl-C and the
    manifest says no cell is done."""
    long_job = ["models=[simclr-rank+lp]", "overrides.pretrain=[epochs=100000,encoder.width=8]"]
    long_job += [f"overrides.common=[{','.join(tiny_data())}]"]  # no gbdt.* keys: no tree here
    command = [sys.executable, "-m", "scarce_ltr", *sweep_args(tmp_path, *long_job)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline, jobs = time.time() + 120, set()
    while not jobs and time.time() < deadline and process.poll() is None:
        procs = processes()
        servers = {
            pid
            for pid, (parent, _, command) in procs.items()
            if parent == process.pid and "scarce_ltr.sweeps.jobserver" in command
        }
        jobs = {pid for pid, (parent, _, _) in procs.items() if parent in servers}
        time.sleep(0.2)
    assert jobs, "no job started"
    time.sleep(2)  # into its epochs
    assert process.poll() is None and jobs <= processes().keys(), "the job ended on its own"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 130
    deadline = time.time() + 30
    while time.time() < deadline and jobs & processes().keys():
        time.sleep(0.2)
    assert not jobs & processes().keys(), "a job ran on after the sweep was stopped"
    assert all(cell["status"] != "done" for cell in manifest(tmp_path)["cells"])
    pretraining = tmp_path / "sweep/synthetic/pretrain/simclr-rank/seed=0"
    assert "interrupted" in (pretraining / "log.txt").read_text()


def test_a_rerun_with_other_models_keeps_the_earlier_cells_in_the_manifest(tmp_path: Path) -> None:
    """``./run.sh sweep <name> models=[...]`` into a folder that ran other models adds its cells
    to the manifest (and so to the report) instead of hiding the earlier ones; a cell whose run
    folder was deleted is dropped."""
    run([*sweep_args(tmp_path), "models=[gbdt]"])
    cells = run([*sweep_args(tmp_path), "models=[gbdt-pca]"])
    assert {c["model"] for c in cells} == {"gbdt-pca"}  # this run's own cells
    listed = manifest(tmp_path)["cells"]
    assert sorted(c["model"] for c in listed) == ["gbdt", "gbdt", "gbdt-pca", "gbdt-pca"]
    assert all(c["status"] == "done" for c in listed)
    rows = results.rows_from_manifest(tmp_path / "sweep" / "manifest.json", [5])
    assert {r["model"] for r in rows if r["test_ndcg@5"] is not None} == {"gbdt", "gbdt-pca"}
    dropped = next(c for c in listed if c["model"] == "gbdt")
    shutil.rmtree(dropped["run_dir"])
    run([*sweep_args(tmp_path), "models=[gbdt-pca]"])
    assert [c["id"] for c in manifest(tmp_path)["cells"] if c["model"] == "gbdt"] == [
        c["id"] for c in listed if c["model"] == "gbdt" and c["id"] != dropped["id"]
    ]


def test_the_sweep_and_its_report_print_what_a_unit_costs(tmp_path: Path, capsys) -> None:
    run([*sweep_args(tmp_path)])
    out = capsys.readouterr().out
    rows = results.rows_from_manifest(tmp_path / "sweep" / "manifest.json", [5])
    assert len(rows) == 4 and all(r["status"] == "done" for r in rows)
    assert all(r["cpu_seconds"] > 0 for r in rows)  # each run's report.json records its own
    tail = out[out.index("sweep quick:") :]
    assert "What a unit costs" in tail
    for model in ("gbdt", "gbdt-pca"):
        cells = [r for r in rows if r["model"] == model]
        mean = sum(r["cpu_seconds"] for r in cells) / 2
        assert any(ln.split()[:3] == [model, "2", f"{mean:.1f}"] for ln in tail.splitlines())
    # one line a setting (the unit the report pairs over), its (fold, seed) unit's cells summed
    settings = sorted({r["setting"] for r in rows})
    assert len(settings) == 2
    dataset = rows[0]["dataset"]
    expected = [
        f"unit of {dataset} {setting}, every done cell of it: 1 unit(s), CPU s mean "
        f"{sum(r['cpu_seconds'] for r in rows if r['setting'] == setting):.1f}"
        for setting in settings
    ]
    assert all(line in tail for line in expected)
    run(["report", str(tmp_path / "sweep")])
    printed = capsys.readouterr().out
    assert all(line in printed for line in expected)


def test_cost_text_means_per_model_and_sums_per_unit() -> None:
    from scarce_ltr.reports.report_text import cost_text

    def row(model, fold, seed, cpu, status="done"):
        return {"model": model, "dataset": "d", "fold": fold, "seed": seed, "status": status,
                "cpu_seconds": cpu, "seconds": 2 * cpu}  # fmt: skip

    rows = [row("a", 1, 0, 10.0), row("a", 2, 0, 20.0), row("b", 1, 0, 4.0),
            row("b", 2, 0, float("nan")), row("b", 1, 1, 99.0, status="failed")]  # fmt: skip
    lines = cost_text(rows).splitlines()
    assert lines[2].split() == ["a", "2", "15.0", "30.0"]
    assert lines[3].split() == ["b", "1", "4.0", "8.0"]
    assert "2 unit(s), CPU s mean 17.0 (min 14.0, max 20.0); all units 34.0" in lines[4]
    assert cost_text([row("a", 1, 0, float("nan"))]) == ""
    # two label fractions: a unit is one (fold, seed) of one setting, not their sum
    two = [
        {**row("a", 1, 0, 10.0), "setting": "frac=0.1"},
        {**row("a", 1, 0, 30.0), "setting": "frac=0.5"},
    ]
    tail = cost_text(two).splitlines()[-2:]
    assert "unit of d frac=0.1, every done cell of it: 1 unit(s), CPU s mean 10.0" in tail[0]
    assert "unit of d frac=0.5, every done cell of it: 1 unit(s), CPU s mean 30.0" in tail[1]
