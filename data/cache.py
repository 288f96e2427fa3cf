"""Binary cache of parsed LETOR files, reloaded memory-mapped.

A text file is parsed once into ``features.npy`` (float32 ``[N, d]``), ``labels.npy``,
``offsets.npy`` (``[Q + 1]``), ``qids.npy`` and ``meta.json`` in a folder of its own. The folder
is keyed on the source's absolute path; ``meta.json`` records a SHA-256 of the source's bytes
(and of its ``.query`` file), so an edited source is parsed again even when the edit kept its
size and modification time (``cp -p``, ``touch -r``, ``rsync -t``, tar). The hash is paid on
every load: 0.8 s for a 1.2 GB MSLR-shaped file on the 2-core EPYC, against 18-34 s to parse it
and 1 ms to open the cached arrays (``benchmarks/bench_cache_check.py``, BENCHMARKS.md).

Several processes may load one file at once (a sweep's first jobs): each entry is read and built
under an exclusive ``flock`` on ``.<entry>.lock`` beside it, and freshness is checked again once
the lock is held, so one process parses and the others open its result; nobody replaces a folder
between another's check and open. The lock file is removed by its holder when done (a process
that then locks an unlinked file sees that and takes the new one). A cache folder one may not
write to is still read, unlocked. The folder is written under a temporary name and renamed into
place, so a crash never leaves a half-written cache behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from scarce_ltr.core.files import file_error, temp_folder_beside
from scarce_ltr.data.letor import read_letor
from scarce_ltr.data.letor.groups import query_file_for
from scarce_ltr.data.ranking_split import RankingSplit

# Bump when the parser's output changes so old caches are rebuilt.
PARSER_VERSION = 4  # 2: values beyond float32 and repeated feature indices refused; 3: qid:1.0
# refused, BOM skipped, and the stamp is a content hash (caches keyed on mtime are rebuilt); 4: a
# lone CR (CR-only line ends) refused, where it made one line of many
_ARRAYS = ("features", "labels", "offsets", "qids")
_HASH_BLOCK = 8 << 20
_HASHED: dict[tuple, str] = {}  # `content_hash`'s, by the file's identity and times
_SETTLED_NS = 2_000_000_000


def default_cache_root() -> Path:
    env = os.environ.get("LTR_CACHE_DIR")
    return Path(env) if env else Path.cwd() / ".cache" / "letor"  # run.sh: the checkout's


def content_hash(path: Path) -> str:
    """SHA-256 of a file's bytes (compressed bytes for ``.gz``). hashlib uses the CPU's SHA
    instructions where it has them: 1.5 GB/s on the 2-core EPYC, faster there than sha1,
    blake2b or md5 (0.4-0.9 GB/s), and 30-40x the parser's speed.

    A process hashes a file once while it stays as it is (a run's data fingerprints, then its
    parse): the hash is kept under the file's inode, size, mtime and ctime, and only for a file
    last changed over `_SETTLED_NS` before hashing began. A file system stamps times from a coarse
    clock, so a file edited within one tick of its hash could keep them all (git's "racy" rule);
    an edit after that tick moves its ctime, which no tool sets back."""
    before = os.stat(path)
    key = (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns)
    if key in _HASHED:
        return _HASHED[key]
    began = time.time_ns()
    digest = hashlib.sha256()
    buffer = bytearray(_HASH_BLOCK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    after = os.stat(path)
    same = key == (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns)
    if same and before.st_ctime_ns < began - _SETTLED_NS:
        _HASHED[key] = digest.hexdigest()
    return digest.hexdigest()


def _stamp(source: Path) -> dict:
    """What the cached parse of ``source`` depends on: its bytes, its ``.query`` file's bytes
    and the parser. Taken before parsing, so an edit made during the parse leaves a stamp that
    no longer matches, and the next load parses again."""
    stamp = {
        "source": str(source),
        "size": source.stat().st_size,
        "sha256": content_hash(source),
        "parser_version": PARSER_VERSION,
    }
    query = query_file_for(source)
    if query.is_file():
        stamp["query_sha256"] = content_hash(query)
    return stamp


def cache_dir_for(source: Path, cache_root: Path) -> Path:
    key = hashlib.sha1(str(source).encode()).hexdigest()[:16]
    return cache_root / f"{source.name}-{key}"


def load_split(path: str | Path, *, name: str, cache_root: Path | None = None) -> RankingSplit:
    """The parsed split of a LETOR file, from the cache when it is up to date."""
    source = Path(path).resolve()
    root = cache_root or default_cache_root()
    target = cache_dir_for(source, root)
    # Hashing happens outside the lock: processes starting together hash in parallel.
    try:
        stamp = _stamp(source)
    except OSError:
        return read_letor(path, name=name)  # names a missing or unreadable file
    with entry_lock(target):
        if _is_current(target, stamp):
            return _open(target, name)
        split = read_letor(path, name=name)  # raises a clear error for a bad file
        try:
            _write(split, target, stamp)
        except OSError as exc:
            raise file_error(
                exc, "write the parsed-data cache (LTR_CACHE_DIR) in", target, key="LTR_CACHE_DIR"
            ) from None
        return _open(target, name)


@contextlib.contextmanager
def entry_lock(target: Path) -> Iterator[None]:
    """Hold ``.<target>.lock`` exclusively: one process at a time checks, builds or opens the
    cache entry ``target`` (any folder of the cache: other readers may use it too). Without a
    lock file to create (a read-only cache) the entry is used unlocked."""
    lock = target.with_name(f".{target.name}.lock")
    fd = _take_lock(lock)
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(lock)  # while still held: no one else holds this file
            # Unlocked explicitly: forked parse workers may still share the descriptor.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _take_lock(lock: Path) -> int | None:
    """A descriptor of ``lock`` held with ``LOCK_EX`` (waiting for the holder), or None where
    no lock can be had (a read-only cache, a file system without ``flock``)."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # never via a link
        except OSError:
            return None
        try:
            if not _lock_within(fd, 1.0):  # a cached load holds it ~1 ms; a parse, seconds
                print(f"waiting for another process parsing into {lock.parent}", file=sys.stderr)
                fcntl.flock(fd, fcntl.LOCK_EX)
            # The holder before us may have removed the file we waited on: lock the new one.
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except OSError:
            os.close(fd)
            return None
        os.close(fd)


def _lock_within(fd: int, seconds: float) -> bool:
    """Whether ``LOCK_EX`` on ``fd`` was had within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def _is_current(target: Path, stamp: dict) -> bool:
    meta = target / "meta.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("stamp") == stamp
    except (OSError, ValueError):
        return False


def _open(target: Path, name: str) -> RankingSplit:
    arrays = {key: np.load(target / f"{key}.npy", mmap_mode="r") for key in _ARRAYS}
    return RankingSplit(
        arrays["features"],
        arrays["labels"],
        np.asarray(arrays["offsets"]),
        np.asarray(arrays["qids"]),
        name,
    )


def _write(split: RankingSplit, target: Path, stamp: dict) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_folder_beside(target)  # the umask's mode, not mkdtemp's 0o700
    try:
        for key in _ARRAYS:
            np.save(tmp / f"{key}.npy", np.ascontiguousarray(getattr(split, key)))
        meta = {"stamp": stamp, "n_items": split.n_items, "n_features": split.n_features}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if target.exists():
            # Safe under the entry's lock: a process that mapped the old arrays keeps them
            # (unlinked files stay mapped), and none is between its check and its open.
            stale = target.with_name(f".{target.name}.stale-{os.getpid()}")
            os.replace(target, stale)
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
