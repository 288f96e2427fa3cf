"""Ray, reached or started, for the work that runs as Ray tasks: a sweep's jobs (``executor=ray``,
``ray.address``; `scarce_ltr.sweeps.ray_executor`) and a deep search's trials
(``search.trial_executor=ray``, ``search.ray_address``; `scarce_ltr.finetune.trial_pool`).

One set of rules for both. The address: empty for a Ray started on this machine for the work
(never one found running here, ``RAY_ADDRESS`` included; every listener of it on the loopback,
`_loopback_only`), ``auto`` for the cluster this machine
is part of, ``ray://host:10001`` (Ray Client) or ``host:6379``; a malformed one is a config error
naming the key, a head that accepts no connection stops in one line within seconds
(`probe_address`), and a port that accepts but never answers as Ray ends the process in one line
after ``$LTR_RAY_INIT_SECONDS`` (`_deadline`). The folder the work writes in must be one path
every node sees: a task on each node reads a file the driver wrote there and writes one back
(`check_shared_folder`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scarce_ltr.core.errors import UserError

PROBE_SECONDS = 120
INIT_ENV, INIT_SECONDS = "LTR_RAY_INIT_SECONDS", 120.0  # the most ray.init may take (`_deadline`)
PROBE_CONNECT_SECONDS = 10.0  # a head that accepts no TCP connection within this is unreachable
LOOPBACK = "127.0.0.1"  # the one address a Ray started here listens on (`_loopback_only`)


def connect(address: str, *, key: str = "ray.address") -> None:
    """``ray.init`` at ``address`` (``key`` names it in messages), or a new local Ray when it
    is empty; `UserError` in one line when Ray does not start or answer."""
    import ray

    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address and address != "auto":
        probe_address(address, key=key)  # Ray itself retries an unreachable head for minutes
    try:
        if address:
            with _deadline(f"{key}={address}"):
                ray.init(address=address, **quiet)
        else:
            _loopback_only()
            # "local": a new Ray, never one found running here (RAY_ADDRESS included)
            ray.init(address="local", _node_ip_address=LOOPBACK, include_dashboard=False, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"{key}={address}" if address else "a local Ray"
        raise UserError(f"{where}: Ray did not start or answer ({exc})") from None


def _loopback_only() -> None:
    """Ray's settings for a Ray of this machine alone, set before it starts: every listener on
    the loopback. Its servers listen on 127.0.0.1 only where the node's address is 127.0.0.1,
    and Ray replaces a given 127.0.0.1 by the address the network reaches unless
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its single-machine mode, the default on macOS and
    Windows; read when Ray is imported, hence also set on the imported constant). The variables
    reach Ray's own processes (GCS, raylet, agents, workers)."""
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@dataclass(frozen=True)
class SharedFolder:
    """How `check_shared_folder` words a node that does not share the folder: ``what`` the
    folder is, the setting that ``needs`` it shared, and how to ``give`` one."""

    what: str = "the sweep's folder"
    needs: str = "executor=ray"
    give: str = "give the sweep such a folder with run_dir= or LTR_RUNS_DIR"


def check_shared_folder(folder: Path, words: SharedFolder = SharedFolder()) -> None:
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
                why = first_line(exc)
            theirs = folder / f".storage-check-{token}-{node['NodeID']}"
            if why is None and not theirs.is_file():
                why = f"a file it wrote there is not in this machine's {folder}"
            if why is not None:
                raise UserError(
                    f"{words.what} {folder} is not shared with Ray node "
                    f"{node['NodeManagerAddress']} ({why}): {words.needs} needs one folder every "
                    "node sees at the same path (NFS, a shared disk, a mounted bucket); "
                    f"{words.give}"
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


@contextlib.contextmanager
def _deadline(where: str) -> Iterator[None]:
    """End the process in one line when the block (``ray.init``) has not returned within
    ``$LTR_RAY_INIT_SECONDS`` (default 120): a port that accepts connections but is no Ray head
    makes Ray retry without end, and nothing else can stop a call blocked inside Ray. It runs
    before any job or trial, so nothing but the run's lock (dropped by the kernel) is held."""
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


def endpoint(
    address: str, *, key: str = "ray.address", local: str = "the sweep"
) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; `ValueError` (a config error
    naming ``key``) for anything else, a port outside 1..65535 included. ``local``: what an
    empty address starts a Ray for, in the message."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"{key}={address!r}: expected host:port, ray://host:port (a port in "
            f"1..65535), auto, or empty for a Ray started for {local}"
        )
    return host, int(port)


def probe_address(
    address: str, seconds: float = PROBE_CONNECT_SECONDS, *, key: str = "ray.address"
) -> None:
    """Stop in one line, within ``seconds``, when nothing accepts a connection at ``address``
    (``ray.init`` would retry for minutes)."""
    host, port = endpoint(address, key=key)
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
            f"{key}={address}: nothing answers at {host}:{port} ({why}); start the head "
            "there (ray start --head) or give the address it printed"
        ) from None


def first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:500] if lines else type(exc).__name__
