"""The in-memory (or memory-mapped) form of one split of a learning-to-rank data set.

A split is a sequence of query groups (QGs). Items of one QG are contiguous rows:
QG ``g`` owns rows ``offsets[g]:offsets[g + 1]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Relevance grades 0..30: LightGBM's gain table, and 2^30 - 1 is exact in float32.
MAX_LABEL = 30


def label_outside_grades(labels: np.ndarray) -> int | None:
    """The index of the first label outside the relevance grades ``0..MAX_LABEL`` (NaN too),
    or None: NDCG's gain 2^y - 1 makes a negative label a negative gain, a huge one overflow."""
    labels = np.asarray(labels)
    bad = np.flatnonzero(~((labels >= 0) & (labels <= MAX_LABEL)))
    return int(bad[0]) if len(bad) else None


@dataclass(frozen=True)
class RankingSplit:
    """One split of an LTR data set.

    Attributes:
        features: ``[n_items, n_features]`` float32 (may be a read-only memmap).
        labels: ``[n_items]`` float32 relevance labels (graded, binary or real).
        offsets: ``[n_groups + 1]`` int64, ``offsets[0] == 0``, non-decreasing.
        qids: ``[n_groups]`` int64 query ids, in file order.
        name: a short name for messages ("train", "vali", "test").
    """

    features: np.ndarray
    labels: np.ndarray
    offsets: np.ndarray
    qids: np.ndarray
    name: str = "split"

    def __post_init__(self) -> None:
        n_items = self.features.shape[0]
        if self.features.ndim != 2:
            raise ValueError(f"{self.name}: features must be [n_items, n_features]")
        if self.labels.shape != (n_items,):
            raise ValueError(f"{self.name}: labels must be [n_items]={n_items}")
        if self.offsets.ndim != 1 or self.offsets[0] != 0 or self.offsets[-1] != n_items:
            raise ValueError(f"{self.name}: offsets must start at 0 and end at n_items")
        if self.qids.shape != (len(self.offsets) - 1,):
            raise ValueError(f"{self.name}: qids must be [n_groups]")

    @property
    def n_items(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def n_groups(self) -> int:
        return int(len(self.offsets) - 1)

    @property
    def group_sizes(self) -> np.ndarray:
        """``[n_groups]`` int64 number of items per QG."""
        return np.diff(self.offsets)

    @property
    def group_index(self) -> np.ndarray:
        """``[n_items]`` int64: the QG each item belongs to."""
        return np.repeat(np.arange(self.n_groups, dtype=np.int64), self.group_sizes)

    def group_slice(self, g: int) -> slice:
        return slice(int(self.offsets[g]), int(self.offsets[g + 1]))

    def groups_with_relevant(self) -> np.ndarray:
        """``[n_groups]`` bool: QGs holding at least one item with a label above 0."""
        if self.n_items == 0:
            return np.zeros(self.n_groups, dtype=bool)
        max_label = np.maximum.reduceat(self.labels, self.offsets[:-1].clip(max=self.n_items - 1))
        return (max_label > 0) & (self.group_sizes > 0)

    def with_features(self, features: np.ndarray) -> RankingSplit:
        """The same QGs and labels with other per-item features (e.g. transformed)."""
        return RankingSplit(features, self.labels, self.offsets, self.qids, self.name)

    def with_labels(self, labels: np.ndarray) -> RankingSplit:
        return RankingSplit(self.features, labels, self.offsets, self.qids, self.name)

    def subset(self, groups: np.ndarray) -> RankingSplit:
        """A new split holding the given QGs (indices, in the given order), copied."""
        groups = np.asarray(groups, dtype=np.int64)
        sizes = self.group_sizes[groups]
        offsets = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        rows = rows_of_groups(self.offsets, groups)
        return RankingSplit(
            np.ascontiguousarray(self.features[rows]),
            np.ascontiguousarray(self.labels[rows]),
            offsets,
            self.qids[groups].copy(),
            self.name,
        )


class QidGroups:
    """Items in any qid order grouped stably by qid (QGs by ascending qid, a QG's items in input
    order): ``order`` [n_items] (input rows in QG order), ``offsets`` [n_groups + 1] and
    ``qids`` [n_groups] (ascending)."""

    def __init__(self, qids: np.ndarray) -> None:
        self.order = np.argsort(qids, kind="stable")
        self.qids, sizes = np.unique(qids, return_counts=True)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    @property
    def n_groups(self) -> int:
        return len(self.qids)

    def item_qids(self) -> np.ndarray:
        """``[n_items]`` the qid of each item, in QG order."""
        return np.repeat(self.qids, np.diff(self.offsets))

    def to_input_order(self, values: np.ndarray) -> np.ndarray:
        """Per-item ``values`` in QG order, put back in the input order."""
        out = np.empty_like(values)
        out[self.order] = values
        return out


def score_by_qid(
    score_split: Callable[[RankingSplit], np.ndarray],
    features: np.ndarray,
    qids: np.ndarray | None = None,
) -> np.ndarray:
    """``[n_items]`` scores of raw ``features`` ``[n_items, n_features]`` in their order, by
    ``score_split`` on them grouped by ``qids`` (any order; None: all items one QG): what a
    fitted ranker's ``predict`` does with the arrays it is given."""
    features = np.asarray(features, dtype=np.float32)
    if features.ndim != 2:
        raise ValueError(f"features must be [n_items, n_features], got shape {features.shape}")
    n = len(features)
    qids = np.zeros(n, dtype=np.int64) if qids is None else np.asarray(qids)
    if qids.shape != (n,):
        raise ValueError(f"qids must be [n_items]={n}, got shape {qids.shape}")
    groups = QidGroups(qids)
    split = RankingSplit(
        features[groups.order], np.zeros(n, np.float32), groups.offsets,
        np.arange(groups.n_groups, dtype=np.int64), "input",
    )  # fmt: skip
    return groups.to_input_order(score_split(split))


def rows_of_groups(offsets: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Row indices of the given QGs, concatenated in order, without a Python loop."""
    starts = offsets[groups]
    sizes = offsets[groups + 1] - starts
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # Position within each group, plus the group's start row.
    group_start_in_output = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.repeat(starts, sizes) + (np.arange(total) - group_start_in_output)


def concatenate(splits: list[RankingSplit], name: str) -> RankingSplit:
    """Several splits as one (e.g. train + vali features for pretraining)."""
    offsets = [np.zeros(1, dtype=np.int64)]
    shift = 0
    for split in splits:
        offsets.append(split.offsets[1:] + shift)
        shift += split.n_items
    return RankingSplit(
        np.concatenate([np.asarray(s.features) for s in splits]),
        np.concatenate([np.asarray(s.labels) for s in splits]),
        np.concatenate(offsets),
        np.concatenate([s.qids for s in splits]),
        name,
    )
