"""The second outlier detector, ``knn``: the query groups (QGs) farthest from a reference split.

An item's score is its mean L2 distance to its ``k`` nearest reference items (faiss); a QG's
score is its worst item's; the top ``target_share`` QGs are outliers. Pass features in the
transformed space the models see, since raw LTR features differ in scale by orders of magnitude
and would let a few features dominate the distance.
"""

from __future__ import annotations

import math

import faiss
import numpy as np

from scarce_ltr.data.outliers.histogram import row_chunks  # the histograms' memory bound
from scarce_ltr.data.ranking_split import RankingSplit


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` view the same memory with the same layout (not just equal)."""
    if a is b:
        return True
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return False
    return (
        a.shape == b.shape
        and a.strides == b.strides
        and a.dtype == b.dtype
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def knn_outlier_groups(
    reference: np.ndarray,
    split: RankingSplit,
    *,
    target_share: float = 0.01,
    k: int = 10,
    max_reference: int = 200_000,
    seed: int = 0,
) -> np.ndarray:
    """``[n_groups]`` bool: the QGs of ``split`` farthest from ``reference`` ``[n, d]``.

    An item's score is its mean L2 distance to its ``k`` nearest reference items (exact search,
    faiss ``IndexFlatL2``); a QG's score is its highest item score. The ``ceil(target_share *
    n_groups)`` (at least 1) highest-scoring non-empty QGs are outliers; ties go to the earlier
    QG. A reference of more than ``max_reference`` rows is subsampled without replacement.

    If ``split.features`` is the very array ``reference`` (same memory, not merely equal), each
    item's own row is removed from its neighbours: ``k + 1`` are searched and the one with the
    item's row index is dropped (or the farthest, when the item's row is not in the subsample).
    Matching by row index, not by zero distance, keeps exact duplicates as real neighbours.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if reference.ndim != 2 or reference.shape[1] != split.n_features:
        raise ValueError(
            f"reference has shape {reference.shape}, but {split.name} has "
            f"{split.n_features} features"
        )
    self_search = _same_array(reference, split.features)
    rows = np.arange(reference.shape[0])
    if reference.shape[0] > max_reference:
        rows = np.sort(np.random.default_rng(seed).choice(rows, size=max_reference, replace=False))
        base = np.ascontiguousarray(np.asarray(reference)[rows], dtype=np.float32)
    else:
        base = np.ascontiguousarray(reference, dtype=np.float32)
    k_used = min(k, base.shape[0] - int(self_search))
    if k_used < 1:
        raise ValueError(f"reference has {base.shape[0]} rows: too few for a neighbour search")
    index = faiss.IndexFlatL2(base.shape[1])
    index.add(base)
    scores = np.empty(split.n_items, dtype=np.float64)
    for start, stop in row_chunks(split.n_items, max(split.n_features, 64)):
        queries = np.ascontiguousarray(split.features[start:stop], dtype=np.float32)
        squared, neighbours = index.search(queries, k_used + int(self_search))
        distances = np.sqrt(np.maximum(squared, 0.0))
        if self_search:
            own = rows[neighbours] == np.arange(start, stop)[:, None]
            own[~own.any(axis=1), -1] = True
            distances = distances[~own].reshape(stop - start, k_used)
        scores[start:stop] = distances.mean(axis=1)
    return _top_groups(split, scores, target_share=target_share)


def _top_groups(split: RankingSplit, item_scores: np.ndarray, *, target_share: float) -> np.ndarray:
    """``[n_groups]`` bool: the top ``target_share`` non-empty QGs by their highest item score."""
    nonempty = split.group_sizes > 0
    group_scores = np.full(split.n_groups, -np.inf)
    if nonempty.any():
        group_scores[nonempty] = np.maximum.reduceat(item_scores, split.offsets[:-1][nonempty])
    # The small slack keeps e.g. 0.07 * 100 = 7.000000000000001 from rounding up to 8.
    n_out = min(max(1, math.ceil(target_share * split.n_groups - 1e-9)), int(nonempty.sum()))
    mask = np.zeros(split.n_groups, dtype=bool)
    mask[np.argsort(-group_scores, kind="stable")[:n_out]] = True
    return mask
