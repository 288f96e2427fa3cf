"""The files a data config reads, each with its fingerprint (`scarce_ltr.core.run_inputs`).

A split's file is fingerprinted with its LETOR ``.query`` file beside it (``<split>.query``); a
split's folder (``data=arrays``, a table of Parquet parts) with every file under it
(``<split>/<file>``). The fingerprint is the size and the SHA-256 the parse cache keys on
(`scarce_ltr.data.cache.content_hash`, computed once per process for a file that stays as it is).
"""

from __future__ import annotations

from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_inputs import Inputs
from scarce_ltr.data.cache import content_hash
from scarce_ltr.data.datasets import SPLITS, DataConfig, check_files, split_file
from scarce_ltr.data.letor.groups import query_file_for


def data_inputs(cfg: DataConfig) -> Inputs | None:
    """``{role: {"path", "size", "sha256"}}`` of every file ``cfg`` reads: ``{}`` for the
    synthetic data (no file), None when a file cannot be found or read now (not known)."""
    if cfg.name == "synthetic":
        return {}
    try:
        check_files(cfg)
        found = {s: split_file(cfg, s) for s in SPLITS if cfg.splits[s]}
    except UserError:
        return None
    files: Inputs = {}
    for split, path in found.items():
        if path is None:
            return None
        for role, file in _split_files(split, path, letor=cfg.format == "letor"):
            try:
                files[role] = fingerprint(file)
            except OSError:
                return None
    return files


def fingerprint(path: Path) -> dict:
    return {
        "path": str(Path(path).absolute()),
        "size": path.stat().st_size,
        "sha256": content_hash(path),
    }


def _split_files(split: str, path: Path, *, letor: bool) -> list[tuple[str, Path]]:
    """``(role, file)`` of each file a split's ``path`` stands for."""
    if not path.is_dir():
        query = query_file_for(path)
        return [(split, path), *([(f"{split}.query", query)] if letor and query.is_file() else [])]
    inside = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    return [(f"{split}/{p.relative_to(path).as_posix()}", p) for p in inside]
