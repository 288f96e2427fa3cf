"""Binary cache of parsed LETOR files, reloaded memory-mapped.

A text file is parsed once into ``features.npy`` (float32 ``[N, d]``), ``labels.npy``,
``offsets.npy`` (``[Q + 1]``), ``qids.npy`` and ``meta.json`` in a folder of its own. The folder
is keyed on the source's absolute path; ``meta.json`` records the source's size and modification
time (and those of its ``.query`` file), so an edited source is parsed again. The folder is
written under a temporary name and renamed into place, so a crash never leaves a half-written
cache behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from scarce_ltr.core.files import file_error
from scarce_ltr.data.letor import query_file_for, read_letor
from scarce_ltr.data.ranking_split import RankingSplit

# Bump when the parser's output changes so old caches are rebuilt.
PARSER_VERSION = 2  # 2: values beyond float32 and repeated feature indices refused
_ARRAYS = ("features", "labels", "offsets", "qids")


def default_cache_root() -> Path:
    env = os.environ.get("LTR_CACHE_DIR")
    return Path(env) if env else Path.cwd() / ".cache" / "letor"  # run.sh: the checkout's


def _stamp(source: Path) -> dict:
    stat = source.stat()
    stamp = {
        "source": str(source),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "parser_version": PARSER_VERSION,
    }
    query = query_file_for(source)
    if query.is_file():
        qstat = query.stat()
        stamp["query_size"] = qstat.st_size
        stamp["query_mtime_ns"] = qstat.st_mtime_ns
    return stamp


def cache_dir_for(source: Path, cache_root: Path) -> Path:
    key = hashlib.sha1(str(source).encode()).hexdigest()[:16]
    return cache_root / f"{source.name}-{key}"


def load_split(path: str | Path, *, name: str, cache_root: Path | None = None) -> RankingSplit:
    """The parsed split of a LETOR file, from the cache when it is up to date."""
    source = Path(path).resolve()
    root = cache_root or default_cache_root()
    target = cache_dir_for(source, root)
    stamp = _stamp(source) if source.is_file() else None
    if stamp is not None and _is_current(target, stamp):
        return _open(target, name)
    split = read_letor(path, name=name)  # raises a clear error for a missing or bad file
    assert stamp is not None
    try:
        _write(split, target, stamp)
    except OSError as exc:
        raise file_error(exc, "write the parsed-data cache (LTR_CACHE_DIR) in", target) from None
    return _open(target, name)


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
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for key in _ARRAYS:
            np.save(tmp / f"{key}.npy", np.ascontiguousarray(getattr(split, key)))
        meta = {"stamp": stamp, "n_items": split.n_items, "n_features": split.n_features}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if target.exists():
            stale = target.with_name(f".{target.name}.stale-{os.getpid()}")
            os.replace(target, stale)
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
