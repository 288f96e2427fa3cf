"""Semi-supervised add-ons of the GBDT baselines (paper section 3 and appendix A.2.3).

Pseudo-labels: a GBDT trained on the labeled QGs scores the unlabeled train QGs, and its scores
become relevance levels 0..30 by binning them evenly into 31 buckets, lowest scores in level 0.
The bins are global, over the scores of all unlabeled items together, not per QG:

- the paper bins "the resulting scores" as one set;
- per-QG bins would stretch every QG over all 31 levels, so a QG whose items the teacher finds
  alike (or all irrelevant) would still get an item at level 30 and gains 2^30 apart, while
  global bins keep a QG's spread of levels in proportion to the teacher's spread of scores.

``width`` (default) cuts the score range ``[min, max]`` into equal-width bins; ``quantile`` puts
an equal share of items in each bin. Equal scores always share a level; constant scores all get
level 0, which LambdaMART ignores (a QG without a relevant item has no gradient).

PCA: fit on every train item's (transformed) features, labeled or not; its first ``k``
components are appended to the train, vali and test features by one and the same fitted object.
"""

from __future__ import annotations

import numpy as np
from sklearn.decomposition import PCA

from scarce_ltr.data.ranking_split import RankingSplit


def pseudo_labels(scores: np.ndarray, *, levels: int = 31, binning: str = "width") -> np.ndarray:
    """Relevance levels of scored items.

    Args:
        scores: ``[n_items]`` teacher scores of the unlabeled items, all QGs together.
        levels: number of levels; the result lies in ``0 .. levels - 1``.
        binning: ``width`` (equal-width bins of ``[min, max]``) or ``quantile`` (equal counts).

    Returns:
        ``[n_items]`` float32 integer-valued levels; higher score, higher or equal level.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return np.zeros(0, dtype=np.float32)
    if not np.isfinite(scores).all():
        raise ValueError("pseudo_labels: scores must be finite")
    low, high = scores.min(), scores.max()
    if high == low:
        return np.zeros(len(scores), dtype=np.float32)
    if binning == "width":
        level = np.floor((scores - low) / (high - low) * levels)
    elif binning == "quantile":
        edges = np.quantile(scores, np.arange(1, levels) / levels)
        level = np.searchsorted(edges, scores, side="left").astype(np.float64)
    else:
        raise ValueError(f"unknown binning {binning!r}; allowed: width, quantile")
    return np.clip(level, 0, levels - 1).astype(np.float32)


def with_pseudo_labels(
    train: RankingSplit, labeled: np.ndarray, pseudo: np.ndarray
) -> RankingSplit:
    """Every train QG: true labels on labeled QGs, ``pseudo`` on the others.

    Args:
        train: ``[n_items]`` rows; the labels of unlabeled QGs are never read.
        labeled: ``[n_groups]`` bool, the QGs whose labels the learner may see.
        pseudo: ``[n_unlabeled_items]`` levels of the unlabeled QGs' items, in train order.
    """
    item_labeled = np.repeat(labeled, train.group_sizes)
    if int((~item_labeled).sum()) != len(pseudo):
        raise ValueError(f"{len(pseudo)} pseudo-labels for {(~item_labeled).sum()} unlabeled items")
    labels = np.zeros(train.n_items, dtype=np.float32)
    labels[item_labeled] = np.asarray(train.labels)[item_labeled]
    labels[~item_labeled] = pseudo
    return train.with_labels(labels)


class Projection:
    """A fitted PCA's projection, ``(x - mean) @ components.T``, from its arrays alone: what a
    model bundle keeps, computed exactly as scikit-learn's ``PCA.transform`` does (project, then
    subtract the projected mean), so that a bundle reproduces the training features bit for bit.
    """

    def __init__(self, *, mean: np.ndarray, components: np.ndarray) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)  # [n_features]
        self.components = np.asarray(components, dtype=np.float64)  # [k, n_features]

    def __call__(self, features: np.ndarray) -> np.ndarray:
        """``[n_items, k]`` float32 principal-component scores."""
        if len(features) == 0:
            return np.zeros((0, len(self.components)), dtype=np.float32)
        scores = np.asarray(features, dtype=np.float64) @ self.components.T
        scores -= self.mean.reshape(1, -1) @ self.components.T
        return scores.astype(np.float32)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "components": self.components}


class PCAFeatures:
    """A PCA of the train features; appends its first ``k`` components to any split.

    Fitted once with the largest ``k`` asked for: the first ``k`` principal directions of an
    exact PCA do not depend on how many more are computed, so each smaller ``k`` is a slice.
    """

    def __init__(self, train_features: np.ndarray, *, max_components: int, seed: int) -> None:
        """``train_features``: ``[n_items, n_features]``, every train item."""
        n_items, n_features = train_features.shape
        if max_components > min(n_items, n_features):
            raise ValueError(
                f"{max_components} PCA components asked for, but train has {n_items} items "
                f"of {n_features} features"
            )
        # The exact covariance eigensolver: deterministic, fast for many items and few features.
        self.pca = PCA(n_components=max_components, svd_solver="covariance_eigh", random_state=seed)
        self.pca.fit(np.asarray(train_features, dtype=np.float64))
        self.max_components = max_components
        self.projector = Projection(mean=self.pca.mean_, components=self.pca.components_)

    def projection(self, features: np.ndarray) -> np.ndarray:
        """``[n_items, max_components]`` float32 principal-component scores."""
        return self.projector(features)

    def append(
        self, split: RankingSplit, k: int, projection: np.ndarray | None = None
    ) -> RankingSplit:
        """``split`` with its first ``k`` component scores as extra columns.

        ``projection`` (from `projection`) saves recomputing it for several ``k``.
        """
        if not 1 <= k <= self.max_components:
            raise ValueError(f"k must be in 1..{self.max_components}, got {k}")
        scores = self.projection(split.features) if projection is None else projection
        features = np.hstack([np.asarray(split.features, dtype=np.float32), scores[:, :k]])
        return split.with_features(np.ascontiguousarray(features))
