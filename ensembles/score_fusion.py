"""Scores of several rankers made comparable within each QG, and the weight vectors to mix them.

Members' scores live on their own scales (LightGBM margins, a network's logits), and only the
order within a QG matters, so each member's scores are normalized within each QG before they
are mixed:

- ``rank``: the item's rank in its QG, ascending, ties sharing their average rank, scaled to
  [0, 1] (lowest 0, highest 1; a QG of one item gets 0.5);
- ``zscore``: ``(s - mean) / std`` over the QG's items (population std); a QG whose scores are
  all equal gets 0.

All functions are pure; ``scores`` are ``[n_items]`` and ``offsets`` ``[n_groups + 1]``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

_FLAT = 1e-12  # relative spread under which a QG's scores count as all equal


def _group_index(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.diff(np.asarray(offsets, dtype=np.int64))
    return np.repeat(np.arange(len(sizes)), sizes), sizes


def zscore_within_groups(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``[n_items]`` float64 z-scores of ``scores`` within each QG."""
    scores = np.asarray(scores, dtype=np.float64)
    group, sizes = _group_index(offsets)
    n_groups, count = len(sizes), np.maximum(sizes, 1)
    mean = np.bincount(group, weights=scores, minlength=n_groups) / count
    centred = scores - mean[group]
    std = np.sqrt(np.bincount(group, weights=centred**2, minlength=n_groups) / count)
    flat = std <= _FLAT * (np.abs(mean) + 1.0)
    safe = np.where(flat, 1.0, std)
    return np.where(flat[group], 0.0, centred / safe[group])


def rank_within_groups(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``[n_items]`` float64 average ranks within each QG, scaled to [0, 1]."""
    scores = np.asarray(scores, dtype=np.float64)
    group, sizes = _group_index(offsets)
    if len(scores) == 0:
        return np.zeros(0)
    order = np.lexsort((scores, group))  # by QG, then by score ascending
    in_group = np.arange(len(scores)) - np.asarray(offsets)[group[order]]
    sorted_scores, sorted_group = scores[order], group[order]
    starts = np.ones(len(scores), dtype=bool)  # a new run of tied scores starts here
    starts[1:] = (sorted_group[1:] != sorted_group[:-1]) | (sorted_scores[1:] != sorted_scores[:-1])
    run = np.cumsum(starts) - 1
    average = (np.bincount(run, weights=in_group) / np.bincount(run))[run]
    last = (sizes - 1)[sorted_group]
    out = np.empty(len(scores))
    out[order] = np.where(last > 0, average / np.maximum(last, 1), 0.5)
    return out


def simplex_grid(n_members: int, step: float) -> np.ndarray:
    """``[n_vectors, n_members]`` non-negative weights in multiples of ``step`` summing to 1.

    Ordered by distance to the uniform vector (nearest first), so that a tie on validation goes
    to the most even mix. Vectors with zero weights (members left out) are included.
    """
    if n_members < 1:
        raise ValueError("n_members must be >= 1")
    steps = round(1.0 / step)
    if steps < 1 or not math.isclose(steps * step, 1.0, rel_tol=1e-9):
        raise ValueError(f"step must divide 1 into equal parts, got {step}")
    vectors = []
    # Stars and bars: n_members - 1 bars among steps + n_members - 1 slots.
    for bars in itertools.combinations(range(steps + n_members - 1), n_members - 1):
        edges = (-1, *bars, steps + n_members - 1)
        vectors.append([edges[i + 1] - edges[i] - 1 for i in range(n_members)])
    grid = np.array(vectors, dtype=np.float64) / steps
    distance = ((grid - 1.0 / n_members) ** 2).sum(axis=1)
    return grid[np.argsort(distance, kind="stable")]


def grid_size(n_members: int, step: float) -> int:
    return math.comb(round(1.0 / step) + n_members - 1, n_members - 1)


def mix(normalized: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``[n_items]``: ``weights [n_members]`` times ``normalized [n_members, n_items]``."""
    return np.asarray(weights, dtype=np.float64) @ np.asarray(normalized, dtype=np.float64)


# Command-line name (normalize=<name>) -> normalization.
NORMALIZERS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "rank": rank_within_groups,
    "zscore": zscore_within_groups,
}
