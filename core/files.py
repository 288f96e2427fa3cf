"""Files written atomically: a temp file in the same folder, then a rename.

A process killed while writing leaves the previous file intact (or none), never half of one;
what it leaves is a temp file ``.<name>.<random>.tmp``, which `remove_stale_temps` clears when
the next run of that folder starts. The writer holds an ``flock`` on its temp file until the
rename, and the kernel drops it however the writer dies, so `remove_stale_temps` tells an
orphaned temp file (unlocked) from one being written now (locked) and leaves the latter alone.
A file put in place has the mode ``open()`` would give it, ``0o666`` less the umask
(`current_umask`), not ``mkstemp``'s private ``0o600``. An `OSError` of a write becomes a
`UserError` naming the path put in place (never the temp file) and the operation (`file_error`).
A target that is no regular file (a symbolic link, a FIFO, a device, a socket) is refused and left
as it was (`refuse_foreign_target`): renaming onto it would replace it by a plain file.

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
import stat
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
def atomic_text_writer(path: Path, *, key: str = "run_dir") -> Iterator[io.TextIOBase]:
    """A text file written piece by piece and renamed into place when the block ends without
    an error (for output too large to hold as one string); an error leaves no file, and a
    `UserError` advising ``key=`` (the command's key for where it writes)."""
    with _atomic_file(path, "w", key) as f:
        yield f


@contextlib.contextmanager
def atomic_path(path: Path, *, key: str = "run_dir") -> Iterator[Path]:
    """A temp file's path beside ``path`` for a writer that opens files by name (an exporter);
    synced, given the umask's mode and renamed onto ``path`` when the block ends without an
    error, removed otherwise. An `OSError` becomes a `UserError` naming ``path`` and advising
    ``key=`` (the command's key for where it writes)."""
    path = Path(path)
    refuse_foreign_target(path, key=key)
    fd, tmp = _locked_temp(path, key)
    try:
        try:
            yield tmp
            os.fsync(fd)  # the data the writer left, whichever descriptor wrote it
            os.chmod(tmp, file_mode())
            os.replace(tmp, path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise file_error(exc, "write", path, key=key) from None
            raise
    finally:
        os.close(fd)  # after the rename: the lock guards the temp file to the end


@contextlib.contextmanager
def _atomic_file(path: Path, mode: str, key: str = "run_dir") -> Iterator[Any]:
    """`atomic_path`'s temp file, opened in ``mode`` and flushed before it is renamed."""
    with atomic_path(path, key=key) as tmp:
        text = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
        with open(tmp, mode, **text) as f:
            yield f


# What stands at a path, for messages: every kind of file but a regular one and a folder.
SPECIAL_KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}


def special_kind(path: Path | str, *, follow: bool = False) -> str | None:
    """What stands at ``path`` when it is neither a regular file nor a folder (`SPECIAL_KINDS`,
    a link itself unless ``follow``); None for those two, for nothing there or a path the
    system will not look at (the read or write that follows says why)."""
    try:
        mode = os.stat(path).st_mode if follow else os.lstat(path).st_mode
    except (OSError, ValueError):
        return None
    return SPECIAL_KINDS.get(stat.S_IFMT(mode))


def refuse_special_input(path: Path | str, expected: str) -> None:
    """A `UserError` when the input ``path`` (a link followed) is a FIFO, a device or a socket,
    where ``expected`` (``a LETOR file (plain or .gz)``) belongs: say what it is, not that it is
    missing. Data is hashed for the cache and read more than once; a pipe gives it once."""
    kind = special_kind(path, follow=True)
    if kind is not None:
        raise UserError(
            f"{path} is {kind}, not a file; {expected} is expected there (data is hashed, "
            "cached and read more than once): write it to a file and give that"
        )


def refuse_foreign_target(path: Path, *, key: str = "run_dir") -> None:
    """A `UserError` when an atomic write to ``path`` would replace something that is no regular
    file (a FIFO, a device, a socket, a symbolic link): the rename would put a plain file in its
    place (a link replaced, ``/dev/full`` a file for root), so it is left as it was."""
    kind = special_kind(path)
    if kind is None:
        return
    if kind == "a symbolic link":
        kind += f" to {os.readlink(path)}"
    raise UserError(
        f"cannot write {path}: it is {kind}, not a regular file; left as it was (this command "
        f"writes only regular files of its own; give {key}=<another path>)"
    )


def _locked_temp(path: Path, key: str) -> tuple[int, Path]:
    """A new temp file ``.<name>.<random>.tmp`` beside ``path`` (its folder made first), open
    and ``flock``-ed: `remove_stale_temps` leaves it alone while the descriptor is open."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise file_error(exc, "create the folder of", path, key=key) from None
    while True:
        try:
            fd, name = tempfile.mkstemp(
                prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent
            )
        except OSError as exc:
            raise file_error(exc, "write", path, key=key) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: the temp file is unguarded, as before
            return fd, Path(name)
        if os.fstat(fd).st_nlink:
            return fd, Path(name)
        # A cleaner took it for an orphan between mkstemp and flock (and removed it under the
        # lock): take another one.
        os.close(fd)


def current_umask() -> int:
    """This process's umask, read from ``/proc/self/status`` where there is one: setting it to
    read it (``os.umask``) would race with a thread creating a file meanwhile."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open()`` gives a new file, ``0o666`` less the umask (`mkstemp` gives 0o600)."""
    return 0o666 & ~current_umask()


def temp_folder_beside(target: Path) -> Path:
    """A new empty folder ``.<name>.<random>.tmp`` beside ``target``, to be filled and renamed
    onto it, with the mode ``mkdir`` gives (``0o777`` less the umask; `mkdtemp` gives 0o700, which
    would keep teammates out of a bundle or cache once it is renamed into place)."""
    target = Path(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent))
    os.chmod(tmp, 0o777 & ~current_umask())
    return tmp


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


def file_error(
    exc: OSError, operation: str, path: Path | str | None = None, *, key: str = "run_dir"
) -> UserError:
    """A one-line `UserError`: ``cannot <operation> <path>: <reason>`` and, where it helps, what
    to do (a full disk, a read-only file system, a path that is a file); the advice names
    ``key=``, the command's key for where it writes (``run_dir``, ``out``)."""
    where = exc.filename if path is None and exc.filename else path
    reason = exc.strerror or type(exc).__name__
    hints = {
        errno.ENOSPC: f"free some space, or give {key}=<folder on another disk>",
        errno.EROFS: f"the file system is read-only; give {key}=<a writable folder>",
        errno.EACCES: f"give {key}=<a folder you may write to>",
        errno.EPERM: f"give {key}=<a folder you may write to>",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EEXIST: "a file of that name is in the way; remove it or choose another path",
        errno.EISDIR: "a folder is where a file belongs; remove or rename that folder",
        errno.ENAMETOOLONG: "a name in the path is longer than the file system allows (255 bytes "
        "on most); choose a shorter path",
    }
    hint = hints.get(exc.errno or 0)
    return UserError(f"cannot {operation} {where}: {reason}" + (f" ({hint})" if hint else ""))


def open_no_follow(path: Path | str, flags: int, what: str, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC)``: a lock or log file that is a symbolic
    link is refused (opening through it would truncate or append to whatever file it points at,
    a user's own included); other errors as `file_error` puts them."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(
                f"{path}: a symbolic link where the {what} file belongs; refused (it would write "
                "to the file it points at); remove the link and run the same command again"
            ) from None
        raise file_error(exc, f"open the {what} file", Path(path)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path}: not a plain file where the {what} file belongs; remove it")
    os.set_blocking(fd, True)
    return fd


def make_folder(path: Path | str) -> Path:
    """``mkdir -p``, with a one-line `UserError` instead of an `OSError`."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise file_error(exc, "create the folder", path) from None
    return path


def remove_stale_temps(
    folder: Path | str, *, name: str | None = None, below: bool = True, key: str = "run_dir"
) -> list[Path]:
    """Remove the temp files and folders (``.*.tmp``) that interrupted atomic writes left in
    ``folder`` and below (only in ``folder`` with ``below=False``); with ``name`` (a glob such
    as ``*.csv``), only the temp files ``.<name>.<random>.tmp`` of files so named.

    A temp file whose writer is alive (it holds the file's ``flock`` until the rename) stays,
    so a command may clear the temp files of its own outputs without a folder lock; a temp
    folder (a bundle's) has no such lock: remove those only while holding the folder's lock
    (`core.locks`), as a run's start does. ``key``: as in `file_error`.
    """
    pattern = f".*{TEMP_SUFFIX}" if name is None else f".{name}.*{TEMP_SUFFIX}"
    found = Path(folder).rglob(pattern) if below else Path(folder).glob(pattern)
    removed = []
    for path in sorted(found, reverse=True):
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif not _remove_orphan(path):
                continue
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise file_error(exc, "remove the stale temp file", path, key=key) from None
        removed.append(path)
    return removed


def _remove_orphan(path: Path) -> bool:
    """Unlink the temp file ``path`` unless a live writer holds its lock (`_locked_temp`). The
    unlink happens under the lock, so a writer that locks the file just after sees it gone."""
    if path.is_symlink():
        path.unlink()
        return True
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)  # NFS emulates flock with write locks
    except FileNotFoundError:
        raise
    except OSError:  # another user's file, or no longer a file: not this process's to judge
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: its writer is alive (or locks are not to be had)
        os.close(fd)
        return False
    try:
        path.unlink()
    finally:
        os.close(fd)
    return True


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
