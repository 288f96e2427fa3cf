"""Run directories: where a run keeps its config, checkpoint, report and done-marker.

``runs/<dataset>/<stage>/<method>/<label setting>/seed=<s>/`` unless ``run_dir`` is given.
Every file is written atomically (a temp file in the same folder, then a rename), and ``DONE`` is
written last, so a finished run is skipped and an unfinished one resumes from its checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DONE = "DONE"


def default_run_dir(cfg, *, stage: str, method: str) -> Path:
    root = Path(os.environ.get("LTR_RUNS_DIR", PROJECT_ROOT / "runs"))
    return root / cfg.data.name / stage / method / cfg.scarcity.tag / f"seed={cfg.seed}"


def resolve_run_dir(cfg, *, stage: str, method: str) -> Path:
    path = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg, stage=stage, method=method)
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def is_done(run_dir: Path) -> bool:
    return (run_dir / DONE).is_file()


def mark_done(run_dir: Path) -> None:
    atomic_write_text(run_dir / DONE, "")


def git_revision() -> str | None:
    try:
        command = ["git", "rev-parse", "HEAD"]
        out = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
