"""The paper's outlier rule (sections 2.1 and A.2.2): per-feature histograms of a reference split
and the gap rule that cuts off their tails.

Per feature, a 100-bin histogram over a reference split (the validation set); a run of at least
``G`` empty bins with under 1% of the reference beyond it cuts off a tail, and a test QG holding
any value in a cut-off tail is an outlier. ``G`` is tuned per data set so that the outlier share
of the test QGs is closest to a target (1%) (`choose_gap`).

Histograms use ``n_bins`` equal-width bins spanning ``[min, max]`` of each reference feature;
bin ``j`` holds ``edges[j] <= x < edges[j + 1]`` (the last bin is closed), exactly as
``np.histogram`` assigns values.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from scarce_ltr.core.sizes import check_fits
from scarce_ltr.data.ranking_split import RankingSplit

_CHUNK_ELEMENTS = 1 << 22  # features binned or searched per step: bounds memory to ~100 MB


def row_chunks(n_rows: int, n_cols: int) -> Iterable[tuple[int, int]]:
    """``(start, stop)`` row ranges of about `_CHUNK_ELEMENTS` values each: the histograms here
    and the k-NN search (`data.outliers.knn`) work one range at a time."""
    step = max(1, _CHUNK_ELEMENTS // max(n_cols, 1))
    for start in range(0, n_rows, step):
        yield start, min(start + step, n_rows)


def histogram_fits(n_bins: int, n_features: int) -> None:
    """`ValueError` naming ``data.outliers.n_bins`` when the histograms of ``n_features``
    features (edges and counts, 8 bytes each) pass this machine's memory (`core.sizes`)."""
    what = f"the outlier histograms ({n_features:,} features x {n_bins:,} bins)"
    check_fits(f"data.outliers.n_bins={n_bins}", n_features * (2 * n_bins + 1) * 8, what)


def _histogram(reference: np.ndarray, *, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature histograms of ``reference`` ``[n, d]``.

    Returns ``edges`` ``[d, n_bins + 1]`` float64 and ``counts`` ``[d, n_bins]`` int64.
    A constant feature gets a unit-width range so that its edges stay distinct.
    """
    if reference.ndim != 2 or reference.shape[0] == 0:
        raise ValueError(f"reference must be a non-empty [n, d] array, got {reference.shape}")
    if n_bins < 2:
        raise ValueError(f"n_bins must be at least 2, got {n_bins}")
    n, d = reference.shape
    histogram_fits(n_bins, d)
    lo, hi = np.full(d, np.inf), np.full(d, -np.inf)
    for start, stop in row_chunks(n, d):
        block = np.asarray(reference[start:stop], dtype=np.float64)
        if not np.isfinite(block).all():
            raise ValueError(f"reference rows {start}..{stop - 1} hold NaN or infinite values")
        lo, hi = np.minimum(lo, block.min(axis=0)), np.maximum(hi, block.max(axis=0))
    span = np.where(hi > lo, hi - lo, 1.0)
    edges = lo[:, None] + span[:, None] * (np.arange(n_bins + 1) / n_bins)
    edges[:, -1] = lo + span
    flat_edges = edges.ravel()
    count_base = np.arange(d) * n_bins
    counts = np.zeros(d * n_bins, dtype=np.int64)
    for start, stop in row_chunks(n, d):
        x = np.asarray(reference[start:stop], dtype=np.float64)
        position = x - lo  # >= 0, exactly, as x >= lo
        position *= n_bins / span
        idx = position.astype(np.int64)  # truncation is floor for non-negative values
        np.minimum(idx, n_bins - 1, out=idx)  # the maximum belongs to the last (closed) bin
        _snap_to_edges(x, position, idx, flat_edges)
        counts += np.bincount((idx + count_base).ravel(), minlength=d * n_bins)
    return edges, counts.reshape(d, n_bins)


def _snap_to_edges(
    x: np.ndarray, position: np.ndarray, idx: np.ndarray, flat_edges: np.ndarray
) -> None:
    """Fix, in place, bin indices ``idx`` ``[m, d]`` that rounding put next to their bin.

    The thresholds are bin edges, so bins must hold exactly ``edges[j] <= x < edges[j + 1]``,
    which matters for discrete features whose values sit on edges. Only values within a hair
    of an interior edge can be misplaced; checking just those avoids two gathers per value.
    """
    d, n_bins = x.shape[1], flat_edges.size // x.shape[1] - 1
    fraction = position - idx
    near = ((fraction < 1e-6) & (idx > 0)) | ((fraction > 1 - 1e-6) & (idx < n_bins - 1))
    where = np.flatnonzero(near)
    if where.size == 0:
        return
    values, bins = x.ravel()[where], idx.ravel()[where]
    base = (where % d) * (n_bins + 1)
    bins -= values < flat_edges[base + bins]
    bins += (values >= flat_edges[base + bins + 1]) & (bins < n_bins - 1)
    idx.ravel()[where] = bins


def _empty_run_lengths(empty: np.ndarray) -> np.ndarray:
    """``[d, n_bins]``: length of the run of empty bins ending at each bin (scanning rightwards)."""
    runs = np.zeros(empty.shape, dtype=np.int64)
    runs[:, 0] = empty[:, 0]
    for b in range(1, empty.shape[1]):
        runs[:, b] = (runs[:, b - 1] + 1) * empty[:, b]
    return runs


def _bounds_from_counts(
    edges: np.ndarray, counts: np.ndarray, *, gap: int, max_tail_share: float
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper thresholds ``[d]`` from histograms; see ``histogram_bounds``."""
    if gap < 1:
        raise ValueError(f"gap must be at least 1, got {gap}")
    d, n_bins = counts.shape
    n = counts[0].sum()
    empty = counts == 0
    cumulative = np.cumsum(counts, axis=1)
    max_tail = max_tail_share * n
    # A run that fails the tail test keeps failing while it grows (its tail does not change), so
    # testing only the bin where a run reaches length ``gap`` finds the first qualifying run.
    up_ok = (_empty_run_lengths(empty) == gap) & (n - cumulative < max_tail)
    down_ok = (_empty_run_lengths(empty[:, ::-1])[:, ::-1] == gap) & (
        cumulative - counts < max_tail
    )
    rows = np.arange(d)
    up_bin = np.argmax(up_ok, axis=1)  # first qualifying bin from the left
    down_bin = n_bins - 1 - np.argmax(down_ok[:, ::-1], axis=1)  # first from the right
    # Values at or above the right edge of the gap-th empty bin are outliers; one ulp down makes
    # the strict test ``x > upper`` flag exactly those (a value on the edge is in the tail).
    upper = np.nextafter(edges[rows, up_bin + 1], -np.inf)
    lower = edges[rows, down_bin]  # tail values lie strictly below the gap-th bin's left edge
    constant = counts[:, -1] == 0  # the maximum lands in the last bin unless max == min
    upper = np.where(up_ok.any(axis=1) & ~constant, upper, np.inf)
    lower = np.where(down_ok.any(axis=1) & ~constant, lower, -np.inf)
    return lower, upper


def histogram_bounds(
    reference: np.ndarray, *, gap: int, n_bins: int = 100, max_tail_share: float = 0.01
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature outlier thresholds from histograms of ``reference`` ``[n, d]`` (paper A.2.2).

    Scanning the ``n_bins`` bins of a feature left to right, stop at the first bin that completes
    a run of ``gap`` empty bins in a row and has fewer than ``max_tail_share * n`` reference
    values in the bins above it; the values above that bin (at or past its right edge) are
    outliers. A run whose tail holds too much does not stop the scan, which goes on to later
    runs. The same from right to left gives the lower tail: values below the left edge of the
    ``gap``-th empty bin counted from the right. The threshold thus sits ``gap`` bins into the
    run, not at its start: test values that fall in the first ``gap`` empty bins next to the bulk
    are not outliers. Constant features (max == min) never flag anything.

    Returns:
        ``lower`` and ``upper``, each ``[d]`` float64: a value ``x`` is an outlier iff
        ``x < lower`` or ``x > upper``; ``-inf`` / ``+inf`` where no run qualifies.
        ``upper`` is the bin edge stepped down by one ulp, so that ``x > upper`` holds exactly
        for values at or above the edge.
    """
    edges, counts = _histogram(np.asarray(reference), n_bins=n_bins)
    return _bounds_from_counts(edges, counts, gap=gap, max_tail_share=max_tail_share)


def _group_min_max(split: RankingSplit) -> tuple[np.ndarray, np.ndarray]:
    """Per-QG feature minima and maxima, each ``[n_groups, d]`` float64 (+inf / -inf if empty)."""
    qg_min = np.full((split.n_groups, split.n_features), np.inf)
    qg_max = np.full((split.n_groups, split.n_features), -np.inf)
    nonempty = split.group_sizes > 0
    if nonempty.any():
        # reduceat needs strictly increasing starts: an empty QG's start is its successor's.
        starts = split.offsets[:-1][nonempty]
        features = np.asarray(split.features)
        qg_min[nonempty] = np.minimum.reduceat(features, starts, axis=0)
        qg_max[nonempty] = np.maximum.reduceat(features, starts, axis=0)
    return qg_min, qg_max


def outlier_groups_from_bounds(
    split: RankingSplit, lower: np.ndarray, upper: np.ndarray
) -> np.ndarray:
    """``[n_groups]`` bool: QGs holding an item with some feature ``< lower`` or ``> upper``.

    ``lower`` and ``upper`` are ``[n_features]``, as from ``histogram_bounds``.
    """
    if lower.shape != (split.n_features,) or upper.shape != (split.n_features,):
        raise ValueError(
            f"bounds have shapes {lower.shape} and {upper.shape}, but {split.name} has "
            f"{split.n_features} features"
        )
    qg_min, qg_max = _group_min_max(split)
    return (qg_min < lower).any(axis=1) | (qg_max > upper).any(axis=1)


def choose_gap(
    reference: np.ndarray,
    split: RankingSplit,
    *,
    target_share: float = 0.01,
    gaps: Iterable[int] = range(1, 100),
    n_bins: int = 100,
    max_tail_share: float = 0.01,
) -> tuple[int, np.ndarray]:
    """The gap ``G`` whose outlier-QG share of ``split`` is closest to ``target_share``.

    Among equally close gaps the largest wins: it cuts off fewer tails, the conservative choice.

    The histograms are built once. Thresholds move outwards as ``G`` grows (a qualifying run of
    ``G + 1`` empty bins holds one of ``G``), so a QG flagged at some ``G`` is flagged at every
    smaller one: one binary search per feature gives, for each QG, how many of the gaps (sorted)
    flag it, and every gap's share follows from those counts.

    Returns:
        the chosen gap and its ``[n_groups]`` bool outlier mask, equal to
        ``outlier_groups_from_bounds(split, *histogram_bounds(reference, gap=G, ...))``.
    """
    gap_list = sorted({int(g) for g in gaps})
    if not gap_list or gap_list[0] < 1:
        raise ValueError(f"gaps must be a non-empty set of integers >= 1, got {gap_list}")
    if reference.ndim != 2 or reference.shape[1] != split.n_features:
        raise ValueError(
            f"reference has shape {reference.shape}, but {split.name} has "
            f"{split.n_features} features"
        )
    edges, counts = _histogram(np.asarray(reference), n_bins=n_bins)
    bounds = [
        _bounds_from_counts(edges, counts, gap=g, max_tail_share=max_tail_share) for g in gap_list
    ]
    lowers = np.stack([lower for lower, _ in bounds])  # [n_gaps, d], non-increasing over gaps
    uppers = np.stack([upper for _, upper in bounds])  # [n_gaps, d], non-decreasing over gaps
    qg_min, qg_max = _group_min_max(split)
    n_flagging = np.zeros(split.n_groups, dtype=np.int64)  # QG g is an outlier at gap j < this
    for f in range(split.n_features):
        above = np.searchsorted(uppers[:, f], qg_max[:, f], side="left")  # #{j: upper_j < max}
        below = np.searchsorted(-lowers[:, f], -qg_min[:, f], side="left")  # #{j: lower_j > min}
        np.maximum(n_flagging, np.maximum(above, below), out=n_flagging)
    n_gaps = len(gap_list)
    flagged = split.n_groups - np.cumsum(np.bincount(n_flagging, minlength=n_gaps + 1))[:n_gaps]
    distance = np.abs(flagged / max(split.n_groups, 1) - target_share)
    best = int(np.flatnonzero(distance <= distance.min() + 1e-12)[-1])
    return gap_list[best], n_flagging > best


def flagged_by_feature(
    reference: np.ndarray,
    split: RankingSplit,
    *,
    gap: int,
    n_bins: int = 100,
    max_tail_share: float = 0.01,
) -> np.ndarray:
    """``[d]``: how many QGs of ``split`` each feature's cut (`histogram_bounds`) flags."""
    options = dict(gap=gap, n_bins=n_bins, max_tail_share=max_tail_share)
    lower, upper = histogram_bounds(reference, **options)
    qg_min, qg_max = _group_min_max(split)
    return ((qg_max > upper) | (qg_min < lower)).sum(axis=0)


def feature_histogram(
    reference: np.ndarray,
    *,
    feature: int,
    gap: int,
    n_bins: int = 100,
    max_tail_share: float = 0.01,
) -> dict:
    """One feature's reference histogram and the gap rule's cut on it (paper Figure 5):
    ``{"edges" [n_bins + 1], "counts" [n_bins], "lower", "upper"}``, the bounds as in
    `histogram_bounds` (infinite where no run of ``gap`` empty bins qualifies)."""
    column = np.asarray(reference[:, feature : feature + 1], dtype=np.float64)
    edges, counts = _histogram(column, n_bins=n_bins)
    lower, upper = _bounds_from_counts(edges, counts, gap=gap, max_tail_share=max_tail_share)
    return {
        "edges": edges[0],
        "counts": counts[0],
        "lower": float(lower[0]),
        "upper": float(upper[0]),
    }
