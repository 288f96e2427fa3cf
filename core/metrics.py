"""NDCG@k: the single numpy reference implementation.

The one convention of the project (docs/data.md, "The NDCG convention"): gain ``2**y - 1``, discount
``1 / log2(rank + 1)``, k clipped to the list length (never padded with zeros), ties in score
broken by stable input order. A query group (QG) whose ideal DCG is 0 (no label above 0, or no
item at all) has no defined NDCG; the empty-QG policy says what it counts as:

- ``skip`` (default): NaN per QG, left out of every mean (what the paper's code does);
- ``one``: 1.0, LightGBM's convention;
- ``zero``: 0.0, sklearn's and TF-Ranking's convention.

Items of one QG are contiguous rows: QG ``g`` owns rows ``offsets[g]:offsets[g + 1]``.
The torch version used in training (``core.metrics_torch``) is tested against this one; both
check their inputs (policy, k, QG selection, arrays) through ``core.metric_inputs``.

Beside NDCG, the metrics users compare with, in the same model order (ties by input order):

- MRR: ``1 / rank`` of the first relevant item; MAP: mean over the relevant items of the
  precision at their ranks (the whole list, no cutoff). Relevance is binary: label > 0.
- ERR@k (Chapelle et al., 2009): ``sum_{r <= k} R_r / r * prod_{i < r} (1 - R_i)`` with graded
  ``R = (2**y - 1) / 2**y_max``, ``y_max`` the data set's highest grade (``max_grade``).
- P@k: the share of relevant items (label > 0) among the top k, k clipped to the list length as
  NDCG's is (a QG of 3 items with 2 relevant has P@5 = 2/3).

`METRICS`, at the bottom, is the one list of them: every report key, results column, table and
printout derives from it, and a new metric is one `Metric` line there (docs/architecture.md).

A QG without a relevant item (label > 0) is exactly a QG without a defined NDCG, and the
empty-QG policy treats it alike in every metric: NaN and left out (``skip``), 1 (``one``) or 0
(``zero``). So every mean of a report runs over the same QGs, whatever the metric. Given the
outlier QGs, each metric has an ``outlier_`` twin: the same per-QG values, averaged over the
outlier QGs only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scarce_ltr.core.metric_inputs import (
    check_inputs,
    check_k,
    check_policy,
    group_mask,
    stop_scale,
)


def gains(labels: np.ndarray) -> np.ndarray:
    """``2**labels - 1`` as float64, same shape as ``labels``."""
    # exp2 is exact for integer labels, so gains match LightGBM's (1 << y) - 1 table bit for bit.
    return np.exp2(np.asarray(labels, dtype=np.float64)) - 1.0


def discounts(ranks: np.ndarray) -> np.ndarray:
    """``1 / log2(rank + 1)`` as float64 for 1-based ``ranks`` of any shape."""
    return 1.0 / np.log2(np.asarray(ranks, dtype=np.float64) + 1.0)


def mean_ndcg_at(
    scores: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    ks: Sequence[int],
    policy: str = "skip",
) -> dict[int, float]:
    """``{k: mean_ndcg(..., k=k)}`` for every k of ``ks``, the QGs sorted once for all of them
    (a curve of many scorings, e.g. after each boosting round, pays one sort a scoring)."""
    fill = check_policy(policy)
    ranked = _RankedGains.build(scores, labels, offsets)
    return {k: _nanmean(ranked.ndcg_at(check_k(k), fill)) for k in ks}


def ndcg_per_group(
    scores: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    k: int,
    policy: str = "skip",
) -> np.ndarray:
    """NDCG@k of every QG.

    Args:
        scores: ``[n_items]`` model scores, higher ranks first; NaN is refused.
        labels: ``[n_items]`` relevance labels >= 0.
        offsets: ``[n_groups + 1]`` int, QG ``g`` owns rows ``offsets[g]:offsets[g + 1]``.
        k: cutoff, clipped to each QG's length.
        policy: empty-QG policy, ``skip``, ``one`` or ``zero``.

    Returns:
        ``[n_groups]`` float64; NaN for QGs without a relevant item when ``policy="skip"``.
    """
    fill = check_policy(policy)
    k = check_k(k)
    ranked = _RankedGains.build(scores, labels, offsets)
    return ranked.ndcg_at(k, fill)


def mean_ndcg(
    scores: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    k: int,
    policy: str = "skip",
    groups: np.ndarray | Sequence[int] | None = None,
) -> float:
    """Mean NDCG@k over QGs (all of them, or those ``groups`` selects, e.g. the outlier QGs).

    Args:
        scores, labels, offsets, k, policy: as in ``ndcg_per_group``.
        groups: ``[n_groups]`` bool mask or an index array of QGs; None selects every QG.

    Returns:
        The mean over the selected QGs that have a defined value; NaN if none is left.
    """
    per_group = ndcg_per_group(scores, labels, offsets, k=k, policy=policy)
    if groups is not None:
        per_group = per_group[group_mask(groups, n_groups=len(per_group))]
    return _nanmean(per_group)


def mrr_per_group(
    scores: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, policy: str = "skip"
) -> np.ndarray:
    """``[n_groups]`` reciprocal rank of the first relevant item (label > 0).

    Example: scores ``[3, 2, 1]``, labels ``[0, 0, 2]``: the first relevant item is ranked 3rd,
    MRR ``1/3 = 0.3333``; a QG without a relevant item gets the policy's value.
    """
    fill = check_policy(policy)
    return _RankedGains.build(scores, labels, offsets).mrr(fill)


def map_per_group(
    scores: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, policy: str = "skip"
) -> np.ndarray:
    """``[n_groups]`` average precision over the whole list, relevance label > 0.

    Example: scores ``[3, 2, 1]``, labels ``[1, 0, 2]``: relevant items at ranks 1 and 3,
    AP ``(1/1 + 2/3) / 2 = 0.8333``.
    """
    fill = check_policy(policy)
    return _RankedGains.build(scores, labels, offsets).average_precision(fill)


def err_per_group(
    scores: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    k: int,
    max_grade: float | None = None,
    policy: str = "skip",
) -> np.ndarray:
    """``[n_groups]`` ERR@k with ``R = (2**y - 1) / 2**max_grade``.

    ``max_grade``: the data set's highest label (None: the highest of ``labels``). Example:
    scores ``[2, 1]``, labels ``[1, 2]``, ``max_grade=2``: ``R = [1/4, 3/4]``, ERR@2
    ``= 1/4 + (1 - 1/4) * 3/4 / 2 = 0.53125``.
    """
    fill = check_policy(policy)
    ranked = _RankedGains.build(scores, labels, offsets)
    return ranked.err_at(check_k(k), stop_scale(labels, max_grade), fill)


def precision_per_group(
    scores: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, k: int, policy: str = "skip"
) -> np.ndarray:
    """``[n_groups]`` P@k: relevant items (label > 0) among the top k, k clipped to the QG.

    Example: scores ``[3, 2, 1]``, labels ``[1, 0, 2]``: P@2 ``= 1/2``, P@5 ``= 2/3`` (3 items).
    """
    fill = check_policy(policy)
    return _RankedGains.build(scores, labels, offsets).precision_at(check_k(k), fill)


def evaluate_ranking(
    scores: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    *,
    ks: Sequence[int] = (1, 3, 5, 10),
    policy: str = "skip",
    outlier_groups: np.ndarray | None = None,
    max_grade: float | None = None,
) -> dict[str, float]:
    """Every metric of `METRICS` (NDCG@k, ERR@k and P@k for each k of ``ks``, MRR, MAP), and
    their outlier versions with ``outlier_groups``.

    Args:
        scores, labels, offsets, policy: as in ``ndcg_per_group``.
        ks: cutoffs.
        outlier_groups: ``[n_groups]`` bool mask (or index array) of the outlier QGs.
        max_grade: ERR's highest grade, the data set's (None: the highest of ``labels``).

    Returns:
        ``ndcg@k``, ``err@k`` and ``precision@k`` for each k, ``mrr``, ``map`` (`Metric.key`) and
        ``n_groups_evaluated`` (QGs that entered the means, the same for every metric); with
        ``outlier_groups`` also ``outlier_<key>`` of each (the same per-QG values, averaged over
        the outlier QGs only) and ``n_outlier_groups`` (outlier QGs that entered the outlier
        means). Means with nothing to average are NaN.
    """
    fill = check_policy(policy)
    cutoffs = [check_k(k) for k in ks]
    if not cutoffs:
        raise ValueError("ks must hold at least one cutoff")
    ranked = _RankedGains.build(scores, labels, offsets)
    scale = stop_scale(labels, max_grade)
    outlier = None
    if outlier_groups is not None:
        outlier = group_mask(outlier_groups, n_groups=ranked.n_groups)
    report: dict[str, float] = {}
    for metric in METRICS.values():
        for k in cutoffs if metric.cutoff else [None]:
            per_group = metric.per_group(ranked, k, scale, fill)
            report[metric.key(k)] = _nanmean(per_group)
            if outlier is not None:
                report[f"outlier_{metric.key(k)}"] = _nanmean(per_group[outlier])
    # Whether a QG is defined depends on neither the metric nor k: the last one speaks for all.
    evaluated = ~np.isnan(per_group)
    report["n_groups_evaluated"] = int(evaluated.sum())
    if outlier is not None:
        report["n_outlier_groups"] = int((evaluated & outlier).sum())
    return report


class _RankedGains:
    """Per-item gains in model order and in ideal order, sorted once and reused for every k.

    All arrays are ``[n_items]``: ``group`` (QG of each position), ``rank`` (1-based position
    inside its QG), ``model`` (gain of the item the scores put there), ``ideal`` (gain of the
    item a perfect ranking puts there).
    """

    def __init__(
        self,
        group: np.ndarray,
        rank: np.ndarray,
        model: np.ndarray,
        ideal: np.ndarray,
        n_groups: int,
    ) -> None:
        self.group, self.rank, self.model, self.ideal = group, rank, model, ideal
        self.n_groups = n_groups

    @classmethod
    def build(cls, scores: np.ndarray, labels: np.ndarray, offsets: np.ndarray) -> _RankedGains:
        scores, labels, offsets = check_inputs(scores, labels, offsets)
        n_groups = len(offsets) - 1
        group = np.repeat(np.arange(n_groups, dtype=np.int64), np.diff(offsets))
        rank = np.arange(len(scores), dtype=np.int64) - offsets[group] + 1
        item_gains = gains(labels)
        # lexsort is stable and group is its primary key, so sorted rows keep their QG blocks
        # (group[order] == group) and tied scores keep input order, as the convention asks.
        model = item_gains[np.lexsort((-scores, group))]
        ideal = item_gains[np.lexsort((-item_gains, group))]
        return cls(group, rank, model, ideal, n_groups)

    def ndcg_at(self, k: int, fill: float) -> np.ndarray:
        """``[n_groups]`` NDCG@k, ``fill`` where the ideal DCG is 0."""
        top = self.rank <= k
        group = self.group[top]
        weight = discounts(self.rank[top])
        dcg = np.bincount(group, weights=self.model[top] * weight, minlength=self.n_groups)
        ideal = np.bincount(group, weights=self.ideal[top] * weight, minlength=self.n_groups)
        defined = ideal > 0
        return np.where(defined, dcg / np.where(defined, ideal, 1.0), fill)

    def _defined(self) -> np.ndarray:
        """``[n_groups]`` bool: QGs with a relevant item (gain > 0 exactly when label > 0)."""
        return np.bincount(self.group, weights=self.ideal > 0, minlength=self.n_groups) > 0

    def mrr(self, fill: float) -> np.ndarray:
        """``[n_groups]`` reciprocal rank of the first relevant item, ``fill`` without one."""
        relevant = np.flatnonzero(self.model > 0)
        # Rows are sorted by QG, so the first relevant row of each QG is its best-ranked one.
        groups, first = np.unique(self.group[relevant], return_index=True)
        out = np.full(self.n_groups, fill, dtype=np.float64)
        out[groups] = 1.0 / self.rank[relevant[first]]
        return out

    def average_precision(self, fill: float) -> np.ndarray:
        """``[n_groups]`` AP over the whole list, ``fill`` without a relevant item."""
        relevant = (self.model > 0).astype(np.float64)
        hits = self._within_group_cumsum(relevant)  # relevant items up to each rank
        n_relevant = np.bincount(self.group, weights=relevant, minlength=self.n_groups)
        precision = np.bincount(
            self.group, weights=relevant * hits / self.rank, minlength=self.n_groups
        )
        defined = n_relevant > 0
        return np.where(defined, precision / np.where(defined, n_relevant, 1.0), fill)

    def err_at(self, k: int, scale: float, fill: float) -> np.ndarray:
        """``[n_groups]`` ERR@k with stop probabilities ``R = gain / scale``."""
        # The top k rows of each QG stay contiguous and keep their ranks, so the within-QG
        # sums below work on them alone.
        top = self.rank <= k
        rank = self.rank[top]
        stop = self.model[top] / scale
        # Chance to reach each rank: prod_{i < r} (1 - R_i), as an exclusive cumulative sum of
        # logs within the QG (R < 1, since every gain is below 2**max_grade).
        log_stay = np.log1p(-stop)
        reach = np.exp(_within_group_cumsum(log_stay, rank) - log_stay)
        err = np.bincount(self.group[top], weights=stop * reach / rank, minlength=self.n_groups)
        return np.where(self._defined(), err, fill)

    def precision_at(self, k: int, fill: float) -> np.ndarray:
        """``[n_groups]`` share of relevant items in the top k (k clipped to the QG's length),
        ``fill`` without a relevant item."""
        top = self.rank <= k
        group = self.group[top]
        hits = np.bincount(group, weights=self.model[top] > 0, minlength=self.n_groups)
        shown = np.bincount(group, minlength=self.n_groups)
        return np.where(self._defined(), hits / np.maximum(shown, 1), fill)

    def _within_group_cumsum(self, values: np.ndarray) -> np.ndarray:
        return _within_group_cumsum(values, self.rank)


def _within_group_cumsum(values: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` within each QG: rows of a QG are contiguous and
    ``rank`` (1-based) counts from its first row."""
    total = np.cumsum(values)
    start = np.arange(rank.size) - rank + 1  # first row of each row's QG
    return total - np.concatenate([[0.0], total])[start]


def _nanmean(values: np.ndarray) -> float:
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else float("nan")


@dataclass(frozen=True)
class Metric:
    """A metric of every report: ``per_group(ranked, k, stop_scale, fill)`` gives its ``[n_groups]``
    values (``k`` None when it takes no cutoff); higher is better for all of today's."""

    name: str  # report.json key (``ndcg@5``, ``mrr``), results.csv column (``test_ndcg@5``)
    label: str  # shown in tables and printouts (``NDCG@5``, ``MRR``)
    per_group: Callable[[_RankedGains, int | None, float, float], np.ndarray]
    cutoff: bool = True  # takes @k

    def key(self, k: int | None) -> str:
        return f"{self.name}@{k}" if self.cutoff else self.name

    def title(self, k: int | None) -> str:
        return f"{self.label}@{k}" if self.cutoff else self.label


# The metrics of every report, in report order; NDCG (the paper's) chooses and is tested.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("ndcg", "NDCG", lambda ranked, k, scale, fill: ranked.ndcg_at(k, fill)),
        Metric("err", "ERR", lambda ranked, k, scale, fill: ranked.err_at(k, scale, fill)),
        Metric("precision", "P", lambda ranked, k, scale, fill: ranked.precision_at(k, fill)),
        Metric("mrr", "MRR", lambda ranked, k, scale, fill: ranked.mrr(fill), cutoff=False),
        Metric(
            "map",
            "MAP",
            lambda ranked, k, scale, fill: ranked.average_precision(fill),
            cutoff=False,
        ),
    )
}
PRIMARY = METRICS["ndcg"]  # the NDCG and Outlier-NDCG columns, the t-tests, the choice
SELECTION_K = 5
SELECTION_METRIC = PRIMARY.key(SELECTION_K)  # every epoch, grid point, checkpoint: vali NDCG@5


def compared_metrics() -> list[Metric]:
    """The metrics shown beside the primary one and never used to choose: those without a
    cutoff first (MRR, MAP), then the others (ERR@k, P@k)."""
    rest = [m for m in METRICS.values() if m is not PRIMARY]
    return [m for m in rest if not m.cutoff] + [m for m in rest if m.cutoff]
