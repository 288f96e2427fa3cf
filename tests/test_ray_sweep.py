"""``executor=ray``: a sweep on a real two-node Ray cluster on the loopback address.

The cluster runs inside a network namespace of its own (``unshare -n``, only a loopback there):
a Ray head listens on every interface whatever ``--node-ip-address`` says, so on the machine's
own network a test cluster would be open to the network. `test_the_cluster_tests_run_in_a_
network_namespace_of_their_own` runs this module again inside one; the cluster tests skip
outside it, and everywhere, with the reason, where ``unshare -n`` is not allowed.

The head and a worker node are started here (one CPU each, a small object store, no dashboard)
in a temp folder of this module's own, and every process they started is killed at the end by
PID. A sweep's jobs on Ray end with the metrics the local executor gives; a worker node killed
mid-job leaves the sweep complete with every cell once and the same metrics; a failing job is a
failed cell, run once; a pretraining given two GPUs runs as two DDP ranks under torchrun.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from processes import processes
from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError

pytest.importorskip("ray", reason='Ray is not installed (pip install "scarce-ltr[cluster]")')

RAY = Path(sys.executable).parent / "ray"
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=40", "gbdt.early_stopping_rounds=40"]
TINY = "[" + ",".join([*tiny_data(n_features=16), *GBDT]) + "]"
NODE = [
    "--node-ip-address=127.0.0.1",
    "--num-cpus=1",
    "--object-store-memory=100000000",
    "--disable-usage-stats",
]


# A loopback cluster of the test's own: no token (Ray 2.60 turns token authentication on for a
# head when ~/.ray/auth_token exists, which a local ray.init() writes).
NO_AUTH = {"RAY_AUTH_MODE": "disabled"}


def sweep_args(folder: Path, *extra: str) -> list[str]:
    return [
        "sweep",
        "quick",
        "models=[gbdt,gbdt-pca]",
        "fractions=[0.5,1.0]",
        "seeds=[0]",
        "workers=2",
        "logger=none",
        "report=false",
        f"overrides.common={TINY}",
        "overrides.pretrain=[]",
        "overrides.finetune=[]",
        f"run_dir={folder}",
        *extra,
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_processes(temp_dir: str, procs: dict | None = None) -> set[int]:
    """A node's processes: those naming its temp folder, their process groups and descendants
    (in ``procs``, a snapshot of `processes.processes`, by default a new one)."""
    procs = processes() if procs is None else procs
    pids = {pid for pid, (_, _, cmd) in procs.items() if temp_dir in cmd}
    groups = {procs[pid][1] for pid in pids} - {os.getpgid(0)}  # never this test's own group
    pids |= {pid for pid, (_, pgid, _) in procs.items() if pgid in groups}
    while True:
        children = {pid for pid, (ppid, _, _) in procs.items() if ppid in pids} - pids
        if not children:
            return pids
        pids |= children


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Cluster:
    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="ltr-ray-", dir="/tmp")  # socket paths: keep short
        self.head_dir, self.worker_dir = f"{self.root}/h", f"{self.root}/w"
        self.address = f"127.0.0.1:{_free_port()}"
        # Node deaths are seen in about a second (the default: half a minute).
        self.env = {
            **os.environ,
            **NO_AUTH,
            "RAY_health_check_period_ms": "300",
            "RAY_health_check_failure_threshold": "3",
            "RAY_health_check_timeout_ms": "300",
        }

    def start(self) -> None:
        self._ray(
            "start",
            "--head",
            f"--port={self.address.split(':')[1]}",
            *NODE,
            f"--temp-dir={self.head_dir}",
            "--include-dashboard=false",
            f"--dashboard-port={_free_port()}",
            f"--ray-client-server-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}",
        )
        self.start_worker()

    def start_worker(self) -> None:
        self._ray(
            "start",
            f"--address={self.address}",
            *NODE,
            f"--temp-dir={self.worker_dir}",
            f"--dashboard-agent-listen-port={_free_port()}",
            "--num-gpus=2",  # Ray hands them out; without CUDA the job's DDP ranks use the CPU
        )

    def _ray(self, *args: str) -> None:
        # A session of its own: the node's processes are a process group apart from pytest's.
        subprocess.run(
            [str(RAY), *args], env=self.env, check=True, capture_output=True, start_new_session=True
        )

    def kill_worker(self) -> None:
        _kill(_node_processes(self.worker_dir))

    def stop(self) -> None:
        for _ in range(3):  # a process forked while the first round killed
            _kill(_node_processes(self.head_dir) | _node_processes(self.worker_dir))
            time.sleep(0.5)
        left = _node_processes(self.head_dir) | _node_processes(self.worker_dir)
        shutil.rmtree(self.root, ignore_errors=True)
        assert not left, f"Ray processes left running: {sorted(left)}"


NETNS_ENV = "LTR_TEST_IN_NETNS"  # set inside the namespace this module runs itself in
INSIDE = os.environ.get(NETNS_ENV) == "1"


def _netns_refusal() -> str | None:
    """Why no network namespace can be made here (None: one can)."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"no {tool} command"
    try:
        done = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


def test_the_cluster_tests_run_in_a_network_namespace_of_their_own():
    if INSIDE:
        pytest.skip("already inside the namespace")
    refusal = _netns_refusal()
    if refusal is not None:
        pytest.skip(f"unshare -n is not allowed here ({refusal}): the Ray cluster tests need a "
                    "network namespace of their own")  # fmt: skip
    rerun_inside_netns(Path(__file__), timeout=1800)


def rerun_inside_netns(module: Path, *, timeout: int) -> None:
    """Run the test ``module`` again inside a network namespace of its own (``unshare -n``):
    only the loopback exists in there; it is brought up, then the module runs with
    ``NETNS_ENV`` set, where its one namespace test skips and everything else must pass."""
    script = (f'ip link set lo up && exec env {NETNS_ENV}=1 "$0" -m pytest "$1" -o addopts= '
              "-n 0 -q -p no:cacheprovider")  # fmt: skip
    command = ["unshare", "-n", "sh", "-c", script, sys.executable, str(module)]
    done = subprocess.run(command, cwd=module.parent.parent, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert "1 skipped" in summary and "passed" in summary, summary  # only that test skips there


@pytest.fixture(scope="module")
def cluster():
    if not INSIDE:
        pytest.skip("a Ray cluster runs only inside a network namespace of its own (see "
                    "test_the_cluster_tests_run_in_a_network_namespace_of_their_own)")  # fmt: skip
    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The same sweep by the local executor: each cell's metrics."""
    folder = tmp_path_factory.mktemp("local") / "sweep"
    cells = run(sweep_args(folder))
    assert all(c["status"] == "done" for c in cells)
    return _metrics(folder)


def _metrics(folder: Path) -> dict[str, str]:
    manifest = json.loads((folder / "manifest.json").read_text())
    metrics = {}
    for cell in manifest["cells"]:
        assert cell["status"] == "done", cell
        report = json.loads((Path(cell["run_dir"]) / "report.json").read_text())
        metrics[cell["id"]] = json.dumps(report["metrics"], sort_keys=True)  # NaN equals itself
    return metrics


# `python -m scarce_ltr` with Ctrl-C raising KeyboardInterrupt, as in a terminal: a suite started
# in the background of a non-interactive shell (`bash .ci/run &`) runs with SIGINT ignored, and a
# process inherits an ignored signal across exec, so the driver would never see the test's Ctrl-C.
DRIVER = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('scarce_ltr', run_name='__main__', alter_sys=True)"
)


def _sweep(args: list[str]) -> subprocess.Popen:
    """The sweep's driver in a process of its own, as ./run.sh runs it from a terminal."""
    command = [sys.executable, "-c", DRIVER, *args]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **NO_AUTH},
    )


def test_a_sweep_on_ray_ends_with_the_local_executors_results(cluster, reference, tmp_path):
    folder = tmp_path / "sweep"
    driver = _sweep(sweep_args(folder, "executor=ray", f"ray.address={cluster.address}"))
    out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, out
    assert "sweep quick: 4 cells (4 done)" in out
    assert _metrics(folder) == reference
    for cell in json.loads((folder / "manifest.json").read_text())["cells"]:
        log = (Path(cell["run_dir"]) / "log.txt").read_text()
        assert log.count("$ ") == 1 and "-m scarce_ltr baseline gbdt" in log


def test_a_failing_job_is_failed_once_and_a_two_gpu_pretraining_runs_under_torchrun(
    cluster, tmp_path
):
    folder = tmp_path / "sweep"
    pretrain = ["epochs=2", "item_budget=200", "encoder.width=8", "encoder.hidden=16",
                "encoder.n_blocks=1", "monitor.n_items=64", "device=cpu"]  # fmt: skip
    args = sweep_args(
        folder,
        "executor=ray",
        f"ray.address={cluster.address}",
        "models=[gbdt-pca,simclr-rank+lp]",
        "fractions=[1.0]",
        "overrides.common=[" + ",".join(tiny_data()) + "]",
        "overrides.pretrain=[" + ",".join(pretrain) + "]",
        "overrides.finetune=[head_epochs=3]",
        "overrides.per_model.gbdt-pca=[gbdt.bogus=1]",
        "ray.resources.pretrain={num_gpus: 2}",  # the worker node's two (CPU ranks here)
    )
    driver = _sweep(args)
    out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 1, out
    cells = {c["model"]: c for c in json.loads((folder / "manifest.json").read_text())["cells"]}
    failed = cells["gbdt-pca"]
    assert failed["status"] == "failed" and "gbdt.bogus" in failed["error"]
    assert (Path(failed["run_dir"]) / "log.txt").read_text().count("$ ") == 1  # not retried
    assert cells["simclr-rank+lp"]["status"] == "done", out
    [pretraining] = folder.glob("synthetic/pretrain/simclr-rank/seed=0")
    assert "(torchrun, 2 ranks)" in (pretraining / "log.txt").read_text()
    assert json.loads((pretraining / "report.json").read_text())["world_size"] == 2


def test_without_ray_executor_ray_stops_with_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    with pytest.raises(UserError, match=r'pip install "scarce-ltr\[cluster\]"'):
        run(sweep_args(tmp_path / "sweep", "executor=ray"))
    assert not (tmp_path / "sweep").exists()


def test_a_node_that_does_not_see_the_folder_says_why(tmp_path):
    from scarce_ltr.sweeps.ray_executor import _probe

    (tmp_path / ".storage-check-t").write_text("t")
    assert _probe(str(tmp_path), "t", "node") is None
    assert (tmp_path / ".storage-check-t-node").read_text() == "t"
    assert "cannot read" in _probe(str(tmp_path / "elsewhere"), "t", "node")
    (tmp_path / ".storage-check-t").write_text("another sweep's")
    assert "another folder than the driver's" in _probe(str(tmp_path), "t", "node")


def test_bad_ray_settings_stop_before_any_cell(tmp_path):
    with pytest.raises(UserError, match="ray.resources.pretrian: not a job stage"):
        run(sweep_args(tmp_path / "sweep", "executor=ray", "ray.resources.pretrian={num_cpus: 2}"))
    with pytest.raises(UserError, match="executor must be one of local, ray"):
        run(sweep_args(tmp_path / "sweep", "executor=slurm"))


def _running_job(temp_dirs: list[str]) -> int | None:
    """The job server of a job running now on one of these nodes, if any."""
    procs = processes()  # one snapshot: this is polled while the nodes work, every 50 ms
    for pid in set().union(*(_node_processes(d, procs) for d in temp_dirs)):
        server = "scarce_ltr.sweeps.jobserver" in procs.get(pid, (0, 0, ""))[2]
        if server and any(ppid == pid for ppid, _, _ in procs.values()):  # a job forked
            return pid
    return None


def _wait_for_job(temp_dirs: list[str], driver: subprocess.Popen) -> int | None:
    deadline = time.time() + 120
    while time.time() < deadline and driver.poll() is None:
        if (server := _running_job(temp_dirs)) is not None:
            return server
        time.sleep(0.05)
    return None


def test_ctrl_c_on_the_driver_cancels_the_jobs(cluster, tmp_path):
    folder = tmp_path / "sweep"
    # 12 cells, not 4: on a loaded machine the poll may first see a job when the last of 4 is
    # ending, and the sweep then finishes before Ctrl-C reaches it.
    extra = ("seeds=[0,1,2]", "executor=ray")
    driver = _sweep(sweep_args(folder, *extra, f"ray.address={cluster.address}"))
    nodes = [cluster.head_dir, cluster.worker_dir]
    assert _wait_for_job(nodes, driver) is not None, "no job started"
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=60)
    assert driver.returncode != 0, out
    deadline = time.time() + 20
    while time.time() < deadline and _running_job(nodes) is not None:
        time.sleep(0.2)
    assert _running_job(nodes) is None, "a job went on running after Ctrl-C"
    cells = json.loads((folder / "manifest.json").read_text())["cells"]
    assert any(c["status"] != "done" for c in cells)


def test_a_node_killed_mid_job_loses_and_repeats_no_cell(cluster, reference, tmp_path):
    """Runs last: the worker node dies here (and is started again for nothing after it)."""
    folder = tmp_path / "sweep"
    driver = _sweep(sweep_args(folder, "executor=ray", f"ray.address={cluster.address}"))
    assert _wait_for_job([cluster.worker_dir], driver) is not None, "no job on the worker node"
    cluster.kill_worker()
    out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, out
    assert "sweep quick: 4 cells (4 done)" in out
    assert _metrics(folder) == reference  # every cell once, as if never killed
    logs = [p.read_text() for p in folder.rglob("log.txt")]
    assert [log.count("$ ") for log in logs] == [1, 1, 1, 1]
    # The killed job's task ran again on the head; every other job's ran once.
    assert sorted(log.count("ray: on node") for log in logs) == [1, 1, 1, 2]
