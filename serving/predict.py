"""``./run.sh predict <run> data.path=<file or folder> [out=<file or folder>]``: score new items.

The run's bundle (`scarce_ltr.serving.ranker`) scores every item of a LETOR/SVMlight file (plain
or ``.gz``, with or without ``qid:``, ``.query`` files beside it), or of every split file of a
folder (``train``, ``vali``/``valid``, ``test``). Per file it writes a CSV, one row per item in
file order: ``qid``, ``position`` (0-based, within its QG), ``score``, ``rank`` (1 = the top of its
QG; ties keep file order, as the project's NDCG does). When the file has labels it prints NDCG@k
with the project's convention. The CSV is written atomically: an error leaves no half file.
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scarce_ltr.core.config import POLICIES
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_text
from scarce_ltr.core.metrics import evaluate_ranking
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.serving.ranker import BundledRanker, load_ranker

SPLIT_STEMS = ("train", "vali", "valid", "test")
SUFFIXES = ("", ".txt", ".txt.gz", ".gz")


@dataclass(frozen=True)
class PredictInput:
    path: str | None = None  # a LETOR file, or a folder of split files


@dataclass(frozen=True)
class PredictConfig:
    run: str | None = None  # a finished run folder (or its bundle/ folder)
    data: PredictInput = field(default_factory=PredictInput)
    out: str | None = None  # a .csv file (one input file) or a folder; default <run>/predictions
    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10])
    policy: str = "skip"  # a QG without a relevant item: skip | one | zero (NDCG convention)

    def __post_init__(self) -> None:
        if not self.run:
            raise ValueError("predict needs a run: ./run.sh predict <run folder> data.path=<file>")
        if not self.data.path:
            raise ValueError("predict needs data.path=<LETOR file or folder of split files>")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError("ks must be a non-empty list of positive integers")


def main(cfg: PredictConfig, out_dir: Path | None = None) -> dict:
    """Score every input file; ``{file: {"out": csv, "metrics": {...} or None}}``."""
    ranker = load_ranker(cfg.run)
    inputs = input_files(Path(str(cfg.data.path)))
    results = {}
    for path in inputs:
        target = output_path(cfg, ranker, path, several=len(inputs) > 1)
        split, scores = ranker.score_file(path)
        atomic_write_text(target, predictions_csv(split, scores))
        metrics = None
        if np.any(split.labels != 0):
            metrics = evaluate_ranking(
                scores, split.labels, split.offsets, ks=cfg.ks, policy=cfg.policy
            )
            shown = ", ".join(f"NDCG@{k} {metrics[f'ndcg@{k}']:.4f}" for k in cfg.ks)
            print(f"{path}: {split.n_groups} QGs, {split.n_items} items; {shown}")
        else:
            print(f"{path}: {split.n_groups} QGs, {split.n_items} items (no labels)")
        print(f"predictions: {target}", file=sys.stderr)
        results[str(path)] = {"out": str(target), "metrics": metrics}
    return results


def input_files(path: Path) -> list[Path]:
    """The file itself, or the split files of a folder."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UserError(f"data.path={path}: no such file or folder")
    found = [
        path / f"{stem}{suffix}"
        for stem in SPLIT_STEMS
        for suffix in SUFFIXES
        if (path / f"{stem}{suffix}").is_file()
    ]
    if not found:
        raise UserError(
            f"data.path={path}: a folder holds no split file ({', '.join(SPLIT_STEMS)}, "
            "as .txt, .txt.gz or without extension); give a file instead"
        )
    return found


def output_path(cfg: PredictConfig, ranker: BundledRanker, source: Path, *, several: bool) -> Path:
    name = source.name.removesuffix(".gz").removesuffix(".txt") + ".csv"
    if cfg.out and not several and cfg.out.endswith(".csv"):
        return Path(cfg.out)
    if cfg.out:
        return Path(cfg.out) / name
    run_folder = ranker.folder.parent if ranker.folder.name == "bundle" else ranker.folder
    return run_folder / "predictions" / name


def predictions_csv(split: RankingSplit, scores: np.ndarray) -> str:
    """``qid,position,score,rank`` per item, in file order."""
    sizes = np.diff(split.offsets)
    group_of = np.repeat(np.arange(split.n_groups), sizes)
    position = np.arange(split.n_items) - np.repeat(split.offsets[:-1], sizes)
    # Rank within the QG: by score, descending, ties in file order (a stable sort).
    order = np.lexsort((position, -scores, group_of))
    rank = np.empty(split.n_items, dtype=np.int64)
    rank[order] = np.arange(split.n_items) - np.repeat(split.offsets[:-1], sizes) + 1
    buffer = io.StringIO()
    buffer.write("qid,position,score,rank\n")
    qids = np.repeat(split.qids, sizes)
    for row in zip(qids.tolist(), position.tolist(), scores.tolist(), rank.tolist(), strict=True):
        buffer.write(f"{row[0]},{row[1]},{row[2]!r},{row[3]}\n")
    return buffer.getvalue()
