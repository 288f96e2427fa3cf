"""``executor=ray``: a sweep's jobs as Ray tasks, on a cluster or on a Ray started for the sweep.

Each job is one Ray task that runs the command the local executor runs: a job server in the Ray
worker (sweeps/jobserver.py) forks ``python -m scarce_ltr <stage> ...`` with its output appended
to the run folder's ``log.txt``, so a job's result does not depend on where it ran. The planning,
ordering, manifest (written by this driver only), skipping and report are the sweep's own.

- ``ray.address``: empty for a Ray started on this machine for the sweep, ``auto`` for the
  cluster this machine is part of, ``ray://host:10001`` (Ray Client) or ``host:6379``.
- ``ray.resources.<stage>``: a task's resources per job stage (``pretrain``, ``finetune``,
  ``baseline``, ``combine``, ``ensemble``, or ``default`` for the others): ``num_cpus`` (default
  1; the job's ``OMP_NUM_THREADS``), ``num_gpus``, ``memory`` (bytes) and custom resources.
  A pretraining job given ``num_gpus`` N >= 2 runs under ``torchrun --standalone
  --nproc_per_node=N`` on its node (DDP, one rank per GPU), the command README's "Scaling out"
  gives for several GPUs.
- Shared storage: the sweep's folder must be one path every node sees (NFS, a shared disk, a
  mounted bucket). Before any job, a task on each node reads a file the driver wrote there and
  writes one back; a node that cannot stops the sweep with one message.
- Faults: a task whose worker or node dies is retried elsewhere (``ray.max_retries``) and its job
  resumes from its checkpoint, taking over the run folder's lock; a job that exits with an error
  is not retried (``retry_exceptions=False``): its cell is failed, as under the local executor.
  Ctrl-C cancels the tasks: their job servers and jobs die with the Ray workers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import open_no_follow
from scarce_ltr.sweeps.executor_kind import ExecutorKind
from scarce_ltr.sweeps.jobs import Job
from scarce_ltr.sweeps.jobserver import JobServer, die_with

NAME = "ray"
INSTALL = 'executor=ray needs Ray: pip install "scarce-ltr[cluster]" (./run.sh installs it)'
STAGES = ("pretrain", "finetune", "baseline", "combine", "ensemble", "default")
TASK_OPTIONS = ("num_cpus", "num_gpus", "memory")  # other keys are custom resources
# The driver's variables a job gets on any node (the node's own environment gives the rest).
FORWARDED = ("LTR_", "WANDB_", "PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG")
PROBE_SECONDS = 120
INIT_ENV, INIT_SECONDS = "LTR_RAY_INIT_SECONDS", 120.0  # the most ray.init may take (`_deadline`)
PROBE_CONNECT_SECONDS = 10.0  # a head that accepts no TCP connection within this is unreachable


@dataclass(frozen=True)
class RayConfig:
    address: str = ""  # "" (a Ray started for the sweep) | auto | ray://host:10001 | host:port
    # Per job stage, e.g. {pretrain: {num_gpus: 1, num_cpus: 4}, baseline: {num_cpus: 2}}.
    resources: dict[str, dict[str, float]] = field(default_factory=dict)
    max_retries: int = 3  # retries of a task whose worker or node died (not of a failing job)

    def __post_init__(self) -> None:
        if self.address and self.address != "auto":
            endpoint(self.address)  # a malformed host:port is a config error
        if self.max_retries < 0:
            raise ValueError("ray.max_retries must be >= 0")
        for stage, resources in self.resources.items():
            if stage not in STAGES:
                raise ValueError(f"ray.resources.{stage}: not a job stage ({', '.join(STAGES)})")
            for key, value in resources.items():
                if value < 0:
                    raise ValueError(f"ray.resources.{stage}.{key} must be >= 0")

    def task_options(self, stage: str) -> dict:
        """``ray.remote`` options of a job of ``stage``: one CPU unless told."""
        wanted = {"num_cpus": 1.0, **self.resources.get("default", {})}
        wanted.update(self.resources.get(stage, {}))
        options = {k: v for k, v in wanted.items() if k in TASK_OPTIONS}
        custom = {k: v for k, v in wanted.items() if k not in TASK_OPTIONS}
        if "memory" in options:
            options["memory"] = int(options["memory"])
        return {**options, "resources": custom} if custom else options

    def ranks(self, stage: str) -> int:
        """DDP processes of a job: one per GPU of a pretraining given two or more."""
        gpus = self.task_options(stage).get("num_gpus", 0)
        return int(gpus) if stage == "pretrain" and gpus >= 2 else 1


Options = RayConfig  # the ray.* keys of a sweep's config (`SweepConfig.ray`)


def check_installed() -> None:
    if importlib.util.find_spec("ray") is None:
        raise UserError(INSTALL)


class RayExecutor:
    """Connects to (or starts) Ray, checks the shared folder on every node; ``run`` blocks on
    one task (the sweep calls it from ``workers`` threads)."""

    def __init__(self, cfg: RayConfig, folder: Path, *, stages: set[str]) -> None:
        check_installed()
        import ray

        self.cfg = cfg
        self.cancelled = False
        self._lock = threading.Lock()
        self._running: set = set()
        quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
        if cfg.address and cfg.address != "auto":
            probe_address(cfg.address)  # Ray itself retries an unreachable head for minutes
        try:
            if cfg.address:
                with _deadline(f"ray.address={cfg.address}"):
                    ray.init(address=cfg.address, **quiet)
            else:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                # "local": a new Ray, never one found running here (RAY_ADDRESS included)
                ray.init(address="local", include_dashboard=False, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"ray.address={cfg.address}" if cfg.address else "a local Ray"
            raise UserError(f"{where}: Ray did not start or answer ({exc})") from None
        self._task = ray.remote(max_retries=cfg.max_retries, retry_exceptions=False)(_run_on_node)
        try:
            check_shared_folder(folder)
            _warn_unplaceable(cfg, stages)
        except BaseException:
            ray.shutdown()
            raise

    def run(self, job: Job, args: list[str], *, log: Path, env: dict[str, str]) -> int:
        import ray

        options = self.cfg.task_options(job.stage)
        ranks = self.cfg.ranks(job.stage)
        threads = max(1, int(options.get("num_cpus", 1)) // ranks)
        sweep_env = {
            **{k: v for k, v in os.environ.items() if k.startswith(FORWARDED)},
            "OMP_WAIT_POLICY": "passive",
            "OMP_NUM_THREADS": str(threads),
        }
        with self._lock:
            if self.cancelled:
                raise UserError("not run: the sweep was cancelled (Ctrl-C)")
            ref = self._task.options(**options, name=job.key).remote(
                args, os.path.abspath(log), {**sweep_env, **env}, sweep_env, os.getcwd(), ranks
            )
            self._running.add(ref)
        try:
            return ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            raise UserError("cancelled (Ctrl-C on the sweep)") from None
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, UserError | OSError):
                raise UserError(f"on its Ray node: {cause}") from None
            raise UserError(f"its Ray task failed: {_first_line(exc)}") from None
        finally:
            with self._lock:
                self._running.discard(ref)

    def cancel(self) -> None:
        import ray

        with self._lock:
            self.cancelled = True
            running = list(self._running)
        for ref in running:
            ray.cancel(ref, force=True)  # kills the worker; its job server and job die with it

    def close(self) -> None:
        import ray

        ray.shutdown()


# One job server per Ray worker process and per sweep environment, kept between its tasks.
_SERVERS: dict[tuple, JobServer] = {}


def _run_on_node(
    args: list[str],
    log: str,
    env: dict[str, str],
    server_env: dict[str, str],
    cwd: str,
    ranks: int = 1,
) -> int:
    """The Ray task: the job's command forked from this worker's job server (or, for a DDP
    pretraining, run under torchrun); its exit code."""
    import ray

    # A task Ray retried shows each of its runs; never through a link (`open_no_follow`).
    with open(open_no_follow(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "log"), "a") as out:
        ddp = f" (torchrun, {ranks} ranks)" if ranks > 1 else ""
        out.write(f"ray: on node {ray.util.get_node_ip_address()} pid {os.getpid()}{ddp}\n")
    job_env = {**os.environ, **env}  # this task's own (CUDA_VISIBLE_DEVICES) under the sweep's
    folder = cwd if os.path.isdir(cwd) else None
    if ranks > 1:
        return _torchrun(args, log=log, env=job_env, cwd=folder, ranks=ranks)
    key = tuple(sorted(server_env.items()))
    if key not in _SERVERS:
        _SERVERS[key] = JobServer({**os.environ, **server_env}, die_with_parent=True)
    return _SERVERS[key].run(args, log=Path(log), env=job_env, cwd=folder)


def _torchrun(args: list[str], *, log: str, env: dict, cwd: str | None, ranks: int) -> int:
    """``torchrun --standalone --nproc_per_node=ranks -m scarce_ltr args``, output to ``log``;
    torchrun gets SIGTERM (and stops its ranks) when this Ray worker dies."""
    command = [sys.executable, "-m", "scarce_ltr.sweeps.ray_executor", str(os.getpid()),
               sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={ranks}", "-m", "scarce_ltr", *args]  # fmt: skip
    with open(open_no_follow(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "log"), "ab") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, cwd=cwd
        )
    try:
        return process.wait()
    except BaseException:  # cancelled: torchrun stops its ranks on SIGTERM
        process.terminate()
        process.wait()
        raise


def check_shared_folder(folder: Path) -> None:
    """Stop unless every alive node reads a file this driver wrote in ``folder`` and writes one
    this driver reads."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    folder = folder.resolve()
    token = secrets.token_hex(8)
    mine = folder / f".storage-check-{token}"
    mine.write_text(token)
    probe = ray.remote(_probe)
    nodes = [n for n in ray.nodes() if n["Alive"]]
    refs = [
        probe.options(
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
        ).remote(str(folder), token, n["NodeID"])
        for n in nodes
    ]
    try:
        for node, ref in zip(nodes, refs, strict=True):
            try:
                why = ray.get(ref, timeout=PROBE_SECONDS)
            except ray.exceptions.GetTimeoutError:
                why = f"no answer in {PROBE_SECONDS} s"
            except ray.exceptions.RayError as exc:
                why = _first_line(exc)
            theirs = folder / f".storage-check-{token}-{node['NodeID']}"
            if why is None and not theirs.is_file():
                why = f"a file it wrote there is not in this machine's {folder}"
            if why is not None:
                raise UserError(
                    f"the sweep's folder {folder} is not shared with Ray node "
                    f"{node['NodeManagerAddress']} ({why}): executor=ray needs one folder every "
                    "node sees at the same path (NFS, a shared disk, a mounted bucket); give "
                    "the sweep such a folder with run_dir= or LTR_RUNS_DIR"
                )
    finally:
        for path in folder.glob(f".storage-check-{token}*"):
            path.unlink(missing_ok=True)


def _probe(folder: str, token: str, node: str) -> str | None:
    """On a node: None when it reads the driver's file and writes its own, else why not."""
    path = Path(folder)
    try:
        if (path / f".storage-check-{token}").read_text() != token:
            return f"{path}: another folder than the driver's"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    try:
        (path / f".storage-check-{token}-{node}").write_text(token)
    except OSError as exc:
        return f"cannot write in {path}: {exc.strerror or exc}"
    return None


def _warn_unplaceable(cfg: RayConfig, stages: set[str]) -> None:
    """A stage whose task fits no node now waits for one to join (an autoscaler may add it)."""
    import sys

    import ray

    nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
    for stage in sorted(stages):
        options = cfg.task_options(stage)
        wanted = {
            "CPU": options.get("num_cpus", 0),
            "GPU": options.get("num_gpus", 0),
            "memory": options.get("memory", 0),
            **options.get("resources", {}),
        }
        if not any(all(n.get(k, 0) >= v for k, v in wanted.items() if v) for n in nodes):
            asked = ", ".join(f"{k}={v:g}" for k, v in wanted.items() if v)
            print(
                f"warning: no node of the Ray cluster has {asked} for a {stage} job "
                f"(ray.resources.{stage}); those jobs wait until one joins",
                file=sys.stderr,
            )


@contextlib.contextmanager
def _deadline(where: str) -> Iterator[None]:
    """End the process in one line when the block (``ray.init``) has not returned within
    ``$LTR_RAY_INIT_SECONDS`` (default 120): a port that accepts connections but is no Ray head
    makes Ray retry without end, and nothing else can stop a call blocked inside Ray. It runs
    before any job, so nothing but the sweep's lock (dropped by the kernel) is held."""
    seconds = float(os.environ.get(INIT_ENV) or INIT_SECONDS)
    done = threading.Event()

    def watch() -> None:
        if not done.wait(seconds):
            print(
                f"error: {where}: Ray did not answer within {seconds:g} s (is it the port a Ray "
                "head printed, ray start --head?)",
                file=sys.stderr,
                flush=True,
            )
            os._exit(2)

    threading.Thread(target=watch, name="ray-init-deadline", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def endpoint(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; `ValueError` (a config error
    naming ``ray.address``) for anything else, a port outside 1..65535 included."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"ray.address={address!r}: expected host:port, ray://host:port (a port in "
            "1..65535), auto, or empty for a Ray started for the sweep"
        )
    return host, int(port)


def probe_address(address: str, seconds: float = PROBE_CONNECT_SECONDS) -> None:
    """Stop in one line, within ``seconds``, when nothing accepts a connection at ``address``
    (``ray.init`` would retry for minutes)."""
    host, port = endpoint(address)
    try:
        with socket.create_connection((host, port), timeout=seconds):
            pass
    except OSError as exc:
        why = (
            exc.strerror or type(exc).__name__
            if not isinstance(exc, TimeoutError)
            else (f"no answer within {seconds:g} s")
        )
        raise UserError(
            f"ray.address={address}: nothing answers at {host}:{port} ({why}); start the head "
            "there (ray start --head) or give the address it printed"
        ) from None


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:500] if lines else type(exc).__name__


def build(options: RayConfig, *, workers: int, folder: Path, stages: set[str]) -> RayExecutor:
    return RayExecutor(options, folder, stages=stages)


KIND = ExecutorKind(NAME, RayConfig, section="ray", build=build, preflight=check_installed)


if __name__ == "__main__":  # <parent PID> <command ...>: the command, ended with its parent
    die_with(int(sys.argv[1]), signal.SIGTERM)
    os.execv(sys.argv[2], sys.argv[2:])
