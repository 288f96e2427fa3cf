"""Sweep jobs in processes forked from a server that has imported torch and the stages once.

A fresh Python process per job spent 3-4 s of CPU importing torch, ``torch._dynamo`` (which
building an Adam optimizer imports) and the stages: more than many of the quick sweep's jobs
take to train. Each sweep worker therefore keeps one `JobServer`: a process that imports those
modules once and then forks a child per job. The child is an ordinary command-line run of its
own: the job's environment and working folder, its output appended to the job's log, its exit
code the command's (negative for a signal, as in `subprocess`), and a crash kills the child
alone. The server runs no torch operation, so no thread pool is forked; it ignores Ctrl-C (its
children get it, as the jobs did before) and exits when the sweep closes its input. SIGTERM to
the server is Ctrl-C for its running job alone (`JobServer.interrupt`): a sweep stopped with
SIGTERM, which its jobs do not see, stops them so (the job saves and stops as on Ctrl-C).

The protocol is one JSON line per job on the server's stdin and one line, the exit code, back on
its stdout.

Under Ray (`scarce_ltr.sweeps.ray_executor`) the server lives in a Ray worker process and is made
with ``die_with_parent``: the server, and a job it forked, get SIGKILL from the kernel when their
parent dies, so a task Ray cancels or a worker that dies leaves no job running on the node.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
from pathlib import Path

from scarce_ltr.core.errors import UserError

PR_SET_PDEATHSIG = 1  # <sys/prctl.h>
# Imported once by the server (a module that fails to import is left to the job to report).
PRELOAD = (
    "torch",
    "torch._dynamo",
    "scarce_ltr.cli",
    "scarce_ltr.pretrain.train",
    "scarce_ltr.finetune.train",
    "scarce_ltr.baselines.run",
    "scarce_ltr.ensembles.ensemble",
)


class JobServer:
    """One server process (started at the first job, with ``env``); ``run`` one job at a time."""

    def __init__(self, env: dict[str, str], *, die_with_parent: bool = False) -> None:
        self.env = env
        self.die_with_parent = die_with_parent
        self._process: subprocess.Popen | None = None

    def run(
        self, args: list[str], *, log: Path, env: dict[str, str], cwd: str | None = None
    ) -> int:
        """``scarce-ltr args`` in a forked child, output appended to ``log``; its exit code.
        The job runs in ``cwd`` (default: this process's working folder)."""
        if self._process is None or self._process.poll() is not None:
            # (The server sets its own death signal: no preexec_fn in a threaded parent.)
            parent = [str(os.getpid())] if self.die_with_parent else []
            self._process = subprocess.Popen(
                [sys.executable, "-m", "scarce_ltr.sweeps.jobserver", *parent],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=self.env,
                text=True,
            )
        request = {"args": args, "log": str(log), "env": env, "cwd": cwd or os.getcwd()}
        if self.die_with_parent:
            request["die_with_server"] = True
        assert self._process.stdin is not None and self._process.stdout is not None
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            answer = self._process.stdout.readline()
        except OSError:
            answer = ""
        if not answer.strip():
            code = self._process.wait()
            self._process = None
            raise UserError(f"the sweep's job server stopped (exit code {code}) during this job")
        return int(answer)

    def interrupt(self) -> None:
        """Ctrl-C for the running job, if any (the server forwards SIGTERM to it as SIGINT)."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)

    def close(self) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            self._process.wait()
            self._process = None


def serve(parent: int | None = None) -> None:
    """The server: preload, then fork one child per request line until stdin closes; with a
    ``parent`` PID, it dies with that process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job = 0  # the running job's PID, 0 between jobs

    def interrupt_job(signum, frame) -> None:
        if job:
            try:
                os.kill(job, signal.SIGINT)
            except ProcessLookupError:  # it ended and was reaped just now
                pass

    signal.signal(signal.SIGTERM, interrupt_job)
    if parent is not None:
        die_with(parent)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    server = os.getpid()
    for line in sys.stdin:
        request = json.loads(line)
        job = pid = os.fork()
        if pid == 0:
            if request.get("die_with_server"):
                die_with(server)
            _become_job(request)
            # `python -m scarce_ltr`, which ends with sys.exit: the child then leaves this loop
            # and ends as any Python process does (atexit handlers, threads joined, flushes).
            runpy.run_module("scarce_ltr", run_name="__main__", alter_sys=True)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        job = 0
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(code, flush=True)


def die_with(parent: int, sig: int = signal.SIGKILL) -> None:
    """In a child: signal ``sig`` when ``parent`` dies (Linux; elsewhere nothing), and at once
    when it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call above
        os.kill(os.getpid(), sig)


def _become_job(request: dict) -> None:
    """In the child: the job's Ctrl-C, environment, folder, arguments, and output to its log."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    # Never through a link (the sweep refused one before; this is the job's own open).
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["scarce-ltr", *request["args"]]


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else None)
