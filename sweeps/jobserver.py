"""Sweep jobs in processes forked from a server that has imported torch and the stages once.

A fresh Python process per job spent 3-4 s of CPU importing torch, ``torch._dynamo`` (which
building an Adam optimizer imports) and the stages: more than many of the quick sweep's jobs
take to train. Each sweep worker therefore keeps one `JobServer`: a process that imports those
modules once and then forks a child per job. The child is an ordinary command-line run of its
own: the job's environment and working folder, its output appended to the job's log, its exit
code the command's (negative for a signal, as in `subprocess`), and a crash kills the child
alone. The server runs no torch operation, so no thread pool is forked; it ignores Ctrl-C (its
children get it, as the jobs did before) and exits when the sweep closes its input.

The protocol is one JSON line per job on the server's stdin and one line, the exit code, back on
its stdout.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
from pathlib import Path

from scarce_ltr.core.errors import UserError

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

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._process: subprocess.Popen | None = None

    def run(self, args: list[str], *, log: Path, env: dict[str, str]) -> int:
        """``scarce-ltr args`` in a forked child, output appended to ``log``; its exit code."""
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "scarce_ltr.sweeps.jobserver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=self.env,
                text=True,
            )
        request = {"args": args, "log": str(log), "env": env, "cwd": os.getcwd()}
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

    def close(self) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            self._process.wait()
            self._process = None


def serve() -> None:
    """The server: preload, then fork one child per request line until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _become_job(request)
            # `python -m scarce_ltr`, which ends with sys.exit: the child then leaves this loop
            # and ends as any Python process does (atexit handlers, threads joined, flushes).
            runpy.run_module("scarce_ltr", run_name="__main__", alter_sys=True)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(code, flush=True)


def _become_job(request: dict) -> None:
    """In the child: the job's Ctrl-C, environment, folder, arguments, and output to its log."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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
    serve()
