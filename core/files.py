"""Files written atomically: a temp file in the same folder, then a rename.

A process killed while writing leaves the previous file intact (or none), never half of one;
what it leaves is a temp file ``.<name>.<random>.tmp``, which `remove_stale_temps` clears when
the next run of that folder starts. An `OSError` of a write becomes a `UserError` naming the path
and the operation (`file_error`).

Fault injection (tests): with ``LTR_FAULT_AT=<n>`` and ``LTR_FAULT_COUNTER=<file>`` set, the
n-th `fault_point` counted in that file (across processes) kills the process with SIGKILL, or
its whole process group with ``LTR_FAULT_KILL=group`` (a sweep and its jobs). Every write of a
run passes two points: its temp file half written, and the file renamed into place. Between
writes nothing on disk changes, so these points reach every state a kill can leave.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from scarce_ltr.core.errors import UserError

TEMP_SUFFIX = ".tmp"  # every temp file or folder of an atomic write: .<name>.<random>.tmp
FAULT_AT_ENV = "LTR_FAULT_AT"
FAULT_COUNTER_ENV = "LTR_FAULT_COUNTER"
FAULT_KILL_ENV = "LTR_FAULT_KILL"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; `UserError` naming the path when the system
    refuses (not writable, not a folder, disk full, read-only)."""
    with _atomic_file(path, "wb") as f:
        half = len(data) // 2
        f.write(data[:half])
        fault_point()  # a kill here leaves half a temp file
        f.write(data[half:])
    fault_point()


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


@contextlib.contextmanager
def atomic_text_writer(path: Path) -> Iterator[io.TextIOBase]:
    """A text file written piece by piece and renamed into place when the block ends without
    an error (for output too large to hold as one string); an error leaves no file."""
    with _atomic_file(path, "w") as f:
        yield f


@contextlib.contextmanager
def _atomic_file(path: Path, mode: str) -> Iterator[Any]:
    """A temp file beside ``path``, flushed, synced and renamed onto it when the block ends
    without an error, removed otherwise; an `OSError` becomes a `UserError` naming ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise file_error(exc, "create the folder of", path) from None
    try:
        text = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise file_error(exc, "write", path) from None
        raise


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=jsonable) + "\n")


def jsonable(obj: Any) -> Any:
    """``json.dumps(..., default=jsonable)``: arrays and numpy numbers as lists and numbers."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def npz_bytes(**arrays: np.ndarray) -> bytes:
    """An ``.npz`` file's bytes (plain arrays, read back with ``allow_pickle=False``), for
    `atomic_write_bytes` or a bundle."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def file_error(exc: OSError, operation: str, path: Path | str | None = None) -> UserError:
    """A one-line `UserError`: ``cannot <operation> <path>: <reason>`` and, where it helps, what
    to do (a full disk, a read-only file system, a path that is a file)."""
    where = exc.filename if path is None and exc.filename else path
    reason = exc.strerror or type(exc).__name__
    hints = {
        errno.ENOSPC: "free some space, or give run_dir=<folder on another disk>",
        errno.EROFS: "the file system is read-only; give run_dir=<a writable folder>",
        errno.EACCES: "give run_dir=<a folder you may write to>",
        errno.EPERM: "give run_dir=<a folder you may write to>",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EEXIST: "a file of that name is in the way; remove it or choose another path",
    }
    hint = hints.get(exc.errno or 0)
    return UserError(f"cannot {operation} {where}: {reason}" + (f" ({hint})" if hint else ""))


def make_folder(path: Path | str) -> Path:
    """``mkdir -p``, with a one-line `UserError` instead of an `OSError`."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise file_error(exc, "create the folder", path) from None
    return path


def remove_stale_temps(folder: Path | str) -> list[Path]:
    """Remove the temp files and folders (``.*.tmp``) that interrupted atomic writes left in
    ``folder`` and below; call it only while holding the folder's lock (`core.locks`)."""
    removed = []
    for path in sorted(Path(folder).rglob(f".*{TEMP_SUFFIX}"), reverse=True):
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise file_error(exc, "remove the stale temp file", path) from None
        removed.append(path)
    return removed


def fault_point() -> None:
    """Tests only: kill this process (group) at the ``$LTR_FAULT_AT``-th point (module doc)."""
    target = os.environ.get(FAULT_AT_ENV)
    counter = os.environ.get(FAULT_COUNTER_ENV)
    if not target or not counter:
        return
    with open(counter, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # processes of a sweep count in one sequence
        f.seek(0)
        count = int(f.read().strip() or 0) + 1
        f.seek(0)
        f.truncate()
        f.write(str(count))
        f.flush()
        if count != int(target):
            return
    if os.environ.get(FAULT_KILL_ENV) == "group":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
