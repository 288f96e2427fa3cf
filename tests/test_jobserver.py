"""The sweep's job server: each job a forked child with its own environment, folder and log."""

from __future__ import annotations

import os

import pytest
from tiny import tiny_data

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import FAULT_AT_ENV, FAULT_COUNTER_ENV
from scarce_ltr.sweeps.jobserver import JobServer

GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=15", "gbdt.grid=full", "gbdt.num_leaves=[7]",
        "gbdt.min_data_in_leaf=[5]", "gbdt.feature_fraction=[1.0]"]  # fmt: skip


@pytest.fixture
def server():
    server = JobServer({k: v for k, v in os.environ.items() if k != "LTR_RUNS_DIR"})
    yield server
    server.close()


def test_jobs_get_their_exit_code_log_environment_and_folder(server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "LTR_RUNS_DIR": str(tmp_path / "runs")}
    log = tmp_path / "job.log"
    assert server.run(["baseline", "--help"], log=log, env=env) == 0
    assert "usage: ./run.sh baseline" in log.read_text()
    assert server.run(["baseline", "no-such-model"], log=log, env=env) == 2
    assert "error:" in log.read_text().split("usage:")[-1]

    # A job killed by a signal: a negative code as subprocess gives, and the server goes on.
    args = ["baseline", "gbdt", *tiny_data(), "logger=none", *GBDT]
    killed = {**env, FAULT_AT_ENV: "1", FAULT_COUNTER_ENV: str(tmp_path / "counter")}
    assert server.run(args, log=tmp_path / "killed.log", env=killed) == -9
    assert server.run(args, log=tmp_path / "done.log", env=env) == 0
    # The run landed where the job's environment (not the server's) put it, and its output
    # went to the job's log.
    run_dir = tmp_path / "runs" / "synthetic" / "baseline" / "gbdt" / "frac=1" / "seed=0"
    assert (run_dir / "DONE").is_file()
    assert str(run_dir) in (tmp_path / "done.log").read_text()


def test_a_dead_server_fails_the_job_with_a_message_and_restarts(server, tmp_path):
    log = tmp_path / "job.log"
    assert server.run(["baseline", "--help"], log=log, env=dict(os.environ)) == 0
    server._process.kill()  # the OOM killer, say
    with pytest.raises(UserError, match="job server stopped"):
        server.run(["baseline", "--help"], log=log, env=dict(os.environ))
    assert server.run(["baseline", "--help"], log=log, env=dict(os.environ)) == 0
