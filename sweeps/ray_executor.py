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

import importlib.util
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import open_no_follow
from scarce_ltr.core.ray_cluster import _probe as _probe  # a node's check, for tests
from scarce_ltr.core.ray_cluster import check_shared_folder, connect, endpoint
from scarce_ltr.core.ray_cluster import first_line as _first_line
from scarce_ltr.core.ray_cluster import probe_address as probe_address  # ray.address's check
from scarce_ltr.sweeps.executor_kind import ExecutorKind
from scarce_ltr.sweeps.jobs import Job
from scarce_ltr.sweeps.jobserver import JobServer, die_with

NAME = "ray"
INSTALL = 'executor=ray needs Ray: pip install "scarce-ltr[cluster]" (./run.sh installs it)'
STAGES = ("pretrain", "finetune", "baseline", "combine", "ensemble", "default")
TASK_OPTIONS = ("num_cpus", "num_gpus", "memory")  # other keys are custom resources
# The driver's variables a job gets on any node (the node's own environment gives the rest).
FORWARDED = ("LTR_", "WANDB_", "PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG")


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
        connect(cfg.address)  # core.ray_cluster: ray.address's rules
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

    def stop_jobs(self) -> None:
        self.cancel()

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


def build(options: RayConfig, *, workers: int, folder: Path, stages: set[str]) -> RayExecutor:
    return RayExecutor(options, folder, stages=stages)


KIND = ExecutorKind(NAME, RayConfig, section="ray", build=build, preflight=check_installed)


if __name__ == "__main__":  # <parent PID> <command ...>: the command, ended with its parent
    die_with(int(sys.argv[1]), signal.SIGTERM)
    os.execv(sys.argv[2], sys.argv[2:])
