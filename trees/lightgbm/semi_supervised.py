"""Semi-supervised add-ons of the GBDT baselines (paper section 3 and appendix A.2.3).

Pseudo-labels: a GBDT trained on the labeled QGs (or a finished run given as ``gbdt.teacher``)
scores the unlabeled train QGs, and `data.teachers.pseudo_labels` bins its scores into
relevance levels 0..30 (31 buckets, lowest scores in level 0; why the bins are global, there).

PCA: fit on every train item's (transformed) features, labeled or not; its first ``k``
components are appended to the train, vali and test features by one and the same fitted object.
"""

from __future__ import annotations

import numpy as np
from sklearn.decomposition import PCA

from scarce_ltr.data.ranking_split import RankingSplit


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
