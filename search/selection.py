"""The one rule every choice on validation follows: the highest score wins, the first of ties,
and NaN (nothing could be scored) ranks below every real score.

Only validation scores come in: nothing about test can move a choice. A caller with a tie rule
of its own lists its candidates in that order, and the first of ties is its choice (the report's
group member, `reports.stats.choose_best`: more seeds first, then by name).
"""

from __future__ import annotations

import math

import numpy as np


def nan_low(score: float) -> float:
    """A vali score to compare: NaN ranks below every real score."""
    return -math.inf if math.isnan(score) else score


def select_best(vali_scores: list[float]) -> int:
    """Index of the highest validation score; the first on ties; NaN never wins unless all are.

    >>> select_best([0.41, float("nan"), 0.43, 0.43])
    2
    """
    if not vali_scores:
        raise ValueError("nothing to select from")
    values = np.array(vali_scores, dtype=np.float64)
    values[np.isnan(values)] = -np.inf
    return int(np.argmax(values))  # argmax returns the first maximum
