"""Is the encoder learning? Label-free monitors and a k-NN probe, before training and per epoch.

On a fixed sample of pretraining items (train + vali QGs, drawn once from the seed):

- ``alignment``: mean squared distance between the unit-norm embeddings of two views of an item
  (Wang & Isola, 2020; lower is better), views by the monitor's own augmentation;
- ``uniformity``: ``log mean exp(-2 |u - v|^2)`` over pairs of distinct items (lower is more
  spread out);
- ``effective_rank``: ``exp`` of the entropy of the normalised singular values of the centred
  embeddings (Roy & Vetterli, 2007); a collapse (below ``max(collapse_min, collapse_share *
  width)``) raises a warning: a loss can look fine while every item maps to a few directions.
- ``effective_rank_vali``: the same on the items of the vali QGs (at most ``vali_items``, whole
  QGs, drawn once), the items finetuning is chosen on; never part of the pretraining set unless
  ``include_vali``. Measured before training too (``monitor_initial``: the randomly initialised
  encoder of the same seed, the reference a pretrained encoder should be compared with: a random
  ResNet already spreads items over many directions, so a pretrained rank below it means
  pretraining collapsed directions, not that it found structure).

Where the label setting labels train QGs, a k-NN probe (faiss, inner product of unit-norm
embeddings) scores each item of the labeled vali QGs by the mean label of its ``k`` nearest
labeled train items, and reports vali NDCG@5 (``core.metrics``). The same probe on the input
features (``knn_ndcg@5_raw``) is the bar an encoder should clear. Labels are read here only.
"""

from __future__ import annotations

import math

import faiss
import numpy as np
import torch

from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.core.seeding import generator
from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.pretrain.augmentations import view_augmentation
from scarce_ltr.pretrain.objectives.base import Objective

PROBE_K = 5
_EMBED_BUDGET = 8192


def _sample_groups(split: RankingSplit, groups: np.ndarray, *, n_items: int, seed: int):
    """A seeded subset of ``groups`` holding about ``n_items`` items (at least one QG)."""
    order = np.random.default_rng(seed).permutation(groups)
    filled = np.cumsum(split.group_sizes[order])
    keep = order[: max(1, int(np.searchsorted(filled, n_items)) + 1)]
    return split.subset(np.sort(keep))


def embed_split(
    objective: Objective,
    split: RankingSplit,
    *,
    device: torch.device,
    augment=None,
    gen: torch.Generator | None = None,
) -> np.ndarray:
    """``[n_items, D]`` float32 embeddings of every item of ``split``, in row order."""
    batcher = QueryGroupBatcher(split, item_budget=_EMBED_BUDGET)
    out = []
    with torch.no_grad():
        for batch in batcher:
            features, mask = batch.features.to(device), batch.mask.to(device)
            if augment is not None:
                features = augment(features, mask, generator=gen)
            out.append(objective.embed(features, mask)[mask].float().cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, objective.width), np.float32)


def effective_rank(embeddings: np.ndarray) -> float:
    """``exp(entropy)`` of the normalised singular values of the centred ``[N, D]`` matrix."""
    centred = embeddings.astype(np.float64) - embeddings.mean(axis=0, keepdims=True)
    if not np.isfinite(centred).all():
        # Undefined (and SVD would not converge); the training loop names the NaN it leads to.
        return float("nan")
    singular = np.linalg.svd(centred, compute_uv=False)
    total = singular.sum()
    if total <= 0:
        return 1.0
    p = singular[singular > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def alignment(a: np.ndarray, b: np.ndarray) -> float:
    """Mean ``|u - v|^2`` of unit-norm ``[N, D]`` embeddings of two views."""
    return float(np.mean(np.sum((_unit(a) - _unit(b)) ** 2, axis=1)))


def uniformity(embeddings: np.ndarray) -> float:
    """``log mean_{i != j} exp(-2 |u_i - u_j|^2)`` of unit-norm embeddings."""
    u = _unit(embeddings).astype(np.float64)
    n = len(u)
    if n < 2:
        return float("nan")
    # -2 |u_i - u_j|^2 = 4 u.v - 4 for unit vectors, clipped at 0 distance; in place on one
    # [n, n] array, the diagonal (i = j) set to -inf so that it adds nothing.
    values = u @ u.T
    values *= 4.0
    values -= 4.0
    np.minimum(values, 0.0, out=values)
    np.fill_diagonal(values, -np.inf)
    top = values.max()
    values -= top
    np.exp(values, out=values)
    return float(top + math.log(values.sum() / (n * (n - 1))))


def knn_scores(index_x: np.ndarray, index_y: np.ndarray, queries: np.ndarray, *, k: int):
    """``[n_queries]`` mean label of each query's ``k`` nearest index rows (cosine)."""
    index = faiss.IndexFlatIP(index_x.shape[1])
    index.add(np.ascontiguousarray(_unit(index_x), dtype=np.float32))
    k = min(k, len(index_x))
    _, neighbours = index.search(np.ascontiguousarray(_unit(queries), dtype=np.float32), k)
    return index_y[neighbours].mean(axis=1)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


class Monitor:
    """Fixed samples and the measurements of `measure`."""

    def __init__(self, prepared: PreparedData, pretrain: RankingSplit, cfg, *, seed: int) -> None:
        self.cfg = cfg
        self.seed = seed
        self.sample = _sample_groups(
            pretrain, np.flatnonzero(pretrain.group_sizes > 0), n_items=cfg.n_items, seed=seed
        )
        self.augment = view_augmentation(zero_p=cfg.zero_p, noise_scale=cfg.noise_scale)
        self.vali_sample = None
        vali_nonempty = np.flatnonzero(prepared.vali.group_sizes > 0)
        if len(vali_nonempty):
            self.vali_sample = _sample_groups(
                prepared.vali, vali_nonempty, n_items=cfg.vali_items, seed=seed + 3
            )
        labels = prepared.labels
        train_groups = np.flatnonzero(labels.train_labeled & (prepared.train.group_sizes > 0))
        vali_groups = np.flatnonzero(labels.vali_labeled & (prepared.vali.group_sizes > 0))
        self.probe_train = self.probe_vali = None
        if len(train_groups) and len(vali_groups):
            self.probe_train = _sample_groups(
                prepared.train, train_groups, n_items=cfg.probe_items, seed=seed + 1
            )
            order = np.random.default_rng(seed + 2).permutation(vali_groups)
            self.probe_vali = prepared.vali.subset(np.sort(order[: cfg.probe_groups]))

    def probe(self, train_x: np.ndarray, vali_x: np.ndarray, policy: str) -> float:
        assert self.probe_train is not None and self.probe_vali is not None
        scores = knn_scores(train_x, self.probe_train.labels, vali_x, k=self.cfg.knn_k)
        vali = self.probe_vali
        return float(mean_ndcg(scores, vali.labels, vali.offsets, k=PROBE_K, policy=policy))

    def raw_probe(self, policy: str) -> float | None:
        """The k-NN probe on the (transformed) input features."""
        if self.probe_train is None or self.probe_vali is None:
            return None
        return self.probe(
            np.asarray(self.probe_train.features), np.asarray(self.probe_vali.features), policy
        )

    def measure(self, objective: Objective, *, device: torch.device, policy: str) -> dict:
        was_training = objective.training
        objective.eval()
        try:
            clean = embed_split(objective, self.sample, device=device)
            views = [
                embed_split(
                    objective,
                    self.sample,
                    device=device,
                    augment=self.augment,
                    gen=generator(device, self.seed, 9, view),
                )
                for view in (0, 1)
            ]
            width = clean.shape[1]
            erank = effective_rank(clean)
            out: dict = {
                "alignment": alignment(*views),
                "uniformity": uniformity(clean),
                "effective_rank": erank,
                "effective_rank_share": erank / width,
                "collapsed": erank < max(self.cfg.collapse_min, self.cfg.collapse_share * width),
            }
            if self.vali_sample is not None:
                vali = embed_split(objective, self.vali_sample, device=device)
                out["effective_rank_vali"] = effective_rank(vali)
            if self.probe_train is not None and self.probe_vali is not None:
                train_x = embed_split(objective, self.probe_train, device=device)
                vali_x = embed_split(objective, self.probe_vali, device=device)
                out[f"knn_ndcg@{PROBE_K}"] = self.probe(train_x, vali_x, policy)
            return out
        finally:
            objective.train(was_training)
