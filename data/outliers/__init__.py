"""Outlier query groups (QGs) for the Outlier-NDCG metric (paper sections 2.1 and A.2.2).

Four ways to name the outlier QGs of a (test) split:

* ``histogram``: the paper's rule. Per feature, a 100-bin histogram over a reference split (the
  validation set); a run of at least ``G`` empty bins with under 1% of the reference beyond it
  cuts off a tail, and a test QG holding any value in a cut-off tail is an outlier. ``G`` is
  tuned per data set so that the outlier share of the test QGs is closest to a target (1%).
* ``knn``: a second detector. An item's score is its mean L2 distance to its ``k`` nearest
  reference items (faiss); a QG's score is its worst item's; the top ``target_share`` QGs are
  outliers. Pass features in the transformed space the models see, since raw LTR features
  differ in scale by orders of magnitude and would let a few features dominate the distance.
* ``qids``: a user's list of outlier query ids (e.g. known-bad data, as the paper's
  proprietary set).
* ``none``: no outliers.

One module per detector: ``histogram`` (`data.outliers.histogram`, also the bounds a bundle keeps
to flag new files, and Figure 5's histogram) and ``knn`` (`data.outliers.knn`); the qid list
and `detect_outlier_groups`, which the data pipeline calls, are here.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from scarce_ltr.data.outliers.histogram import (
    choose_gap,
    histogram_bounds,
    outlier_groups_from_bounds,
)
from scarce_ltr.data.outliers.knn import knn_outlier_groups
from scarce_ltr.data.ranking_split import RankingSplit

METHODS = ("histogram", "knn", "qids", "none")


def outlier_groups_from_qids(split: RankingSplit, qids: Iterable[int]) -> np.ndarray:
    """``[n_groups]`` bool: the QGs whose query id is in ``qids``; each must be in ``split``."""
    wanted = np.unique(np.asarray(list(qids), dtype=np.int64))
    missing = np.setdiff1d(wanted, split.qids)
    if missing.size:
        shown = ", ".join(str(q) for q in missing[:10]) + (" ..." if missing.size > 10 else "")
        raise ValueError(f"{missing.size} outlier qid(s) not in split {split.name!r}: {shown}")
    return np.isin(split.qids, wanted)


def detect_outlier_groups(
    *,
    method: str,
    reference: np.ndarray | None,
    split: RankingSplit,
    target_share: float = 0.01,
    gap: int | None = None,
    qids: Iterable[int] | None = None,
    n_bins: int = 100,
    max_tail_share: float = 0.01,
    k: int = 10,
    seed: int = 0,
) -> tuple[np.ndarray, dict]:
    """The outlier QGs of ``split`` by ``method`` (one of ``METHODS``), and a summary for reports.

    ``reference`` (``[n, d]``, the validation features) is needed by "histogram" and "knn";
    ``gap=None`` tunes the histogram gap with ``choose_gap``; ``qids`` is needed by "qids".

    Returns:
        ``[n_groups]`` bool mask and ``{"method", "gap", "count", "share"}`` (``gap`` is None
        except for "histogram").
    """
    if method not in METHODS:
        raise ValueError(f"unknown outlier method {method!r}; valid: {', '.join(METHODS)}")
    if not 0.0 <= target_share <= 1.0:
        raise ValueError(f"target_share must be in [0, 1], got {target_share}")
    if method in ("histogram", "knn") and reference is None:
        raise ValueError(f"outlier method {method!r} needs reference features")
    if method == "histogram" and gap is None:
        options = dict(target_share=target_share, n_bins=n_bins, max_tail_share=max_tail_share)
        gap, mask = choose_gap(reference, split, **options)
    elif method == "histogram":
        options = dict(gap=gap, n_bins=n_bins, max_tail_share=max_tail_share)
        mask = outlier_groups_from_bounds(split, *histogram_bounds(reference, **options))
    elif method == "knn":
        mask = knn_outlier_groups(reference, split, target_share=target_share, k=k, seed=seed)
    elif method == "qids":
        if qids is None:
            raise ValueError("outlier method 'qids' needs a list of outlier qids")
        mask = outlier_groups_from_qids(split, qids)
    else:
        mask = np.zeros(split.n_groups, dtype=bool)
    count = int(mask.sum())
    info = {
        "method": method,
        "gap": int(gap) if method == "histogram" else None,
        "count": count,
        "share": count / max(split.n_groups, 1),
    }
    return mask, info
