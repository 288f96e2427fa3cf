"""One process per run folder (and per sweep): an exclusive lock on ``<folder>/.lock``.

The lock is an ``flock`` on a file that holds the holder's PID. The kernel releases it when the
holder dies, however it dies (SIGKILL included), so a lock left by a dead process is simply taken
over; the PID in the file is only there to name the holder in the message a second process gets.
A second process stops at once with that message, or waits for the holder when ``wait`` seconds
are given (a sweep's jobs wait for a job left running by an earlier, killed sweep). Under
``torchrun`` rank 0 holds the lock for all ranks of the job.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path
from types import TracebackType

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import make_folder, open_no_follow

LOCK_FILE = ".lock"
WAIT_ENV = "LTR_LOCK_WAIT"  # seconds a second process waits for the holder (default: 0)
_POLL_SECONDS = 0.2


class FolderLock:
    """``with FolderLock(folder, what="run"):`` holds the folder for this process."""

    def __init__(self, folder: Path | str, *, what: str = "run", wait: float | None = None):
        self.folder = Path(folder)
        self.what = what
        self.wait = float(os.environ.get(WAIT_ENV) or 0) if wait is None else wait
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.folder / LOCK_FILE

    def acquire(self) -> None:
        make_folder(self.folder)
        if not is_rank_zero():  # the ranks of one DDP job share the folder; rank 0 holds it
            return
        # Never through a link: it would truncate the file it points at (a user's own).
        fd = open_no_follow(self.path, os.O_RDWR | os.O_CREAT, "lock")
        deadline = time.monotonic() + self.wait
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(fd)
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise UserError(
                        f"{self.folder}: another process (PID {holder}) is running this "
                        f"{self.what}; wait for it to end or stop it (kill {holder}), then run "
                        "the same command again"
                    ) from None
                if not told:
                    print(f"waiting for PID {holder}, which holds {self.folder}", file=sys.stderr)
                    told = True
                time.sleep(_POLL_SECONDS)
        # The lock is ours: a PID left in the file by a dead holder is replaced.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def is_rank_zero() -> bool:
    """Not one of the other ranks of a ``torchrun`` job (``RANK`` unset or 0)."""
    return os.environ.get("RANK", "0") in ("", "0")


def _holder(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return text if text.isdigit() else "unknown"
