"""Files written atomically: a temp file in the same folder, then a rename.

A process killed while writing leaves the previous file intact (or none), never half of one.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


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
