"""What ``predict`` writes, whatever it reads (LETOR text or a table): per item its QG's qid, its
position in the QG, its score and its rank, in a file written atomically beside which a killed
predict's temp files do not pile up."""

from __future__ import annotations

import glob
import sys
from pathlib import Path

import numpy as np

from scarce_ltr.core.files import remove_stale_temps

CSV_HEADER = "qid,position,score,rank\n"


def positions_and_ranks(offsets: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[n_items]`` each item's 0-based position in its QG (``offsets``: ``[n_groups + 1]``)
    and its 1-based rank by score, descending, ties in input order (a stable sort, as NDCG)."""
    sizes = np.diff(offsets)
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    position = np.arange(len(scores)) - np.repeat(offsets[:-1], sizes)
    by_score = np.lexsort((position, -scores, group_of))
    rank = np.empty(len(scores), dtype=np.int64)
    rank[by_score] = position + 1
    return position, rank


def remove_orphans(target: Path) -> None:
    """Remove the temp files of ``target`` that a killed predict left (a predict writing it
    now holds its temp file's lock: that one stays); other files' temps are not ours."""
    if target.parent.is_dir():
        name = glob.escape(target.name)
        for stale in remove_stale_temps(target.parent, name=name, below=False, key="out"):
            print(f"removed {stale} (left by an interrupted predict)", file=sys.stderr)
