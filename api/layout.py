"""fit's arrays as a data set of the command line: train, vali and test folders of `data=arrays`.

The stages label a seeded draw of the train QGs (`scarce_ltr.data.scarcity`): the first
``ceil(fraction * n)`` QGs of a permutation seeded by the run's seed. The estimator knows which
QGs are labeled, so it puts them where that draw looks: with ``n_labeled`` labeled QGs of ``n``,
`labeled_fraction` gives the fraction whose draw takes exactly ``n_labeled`` QGs, and
`train_split` places the labeled QGs (in their order) at the drawn positions and the unlabeled
ones (label 0, never read: no stage trains on an unlabeled QG's labels) at the others. The
stages then see the labels the user gave, and no label of theirs changes. Data that came from a
``./run.sh`` data set and its own draw is put back in its own order, so the runs are the same.
"""

from __future__ import annotations

import math

import numpy as np

from scarce_ltr.data.ranking_split import RankingSplit, concatenate
from scarce_ltr.data.scarcity import ScarcityConfig, apply_scarcity

HOLDOUT_SHARE = 0.2  # of the labeled QGs, for validation when fit gets no eval_set
_HOLDOUT_STREAM = 27


def labeled_fraction(n_labeled: int, n_groups: int) -> float:
    """The float ``f`` in (0, 1] with ``ceil(f * n_groups) == n_labeled`` (as the draw counts)."""
    if not 1 <= n_labeled <= n_groups:
        raise ValueError(f"{n_labeled} labeled QGs of {n_groups}")
    f = n_labeled / n_groups
    while math.ceil(f * n_groups) > n_labeled:
        f = float(np.nextafter(f, 0.0))
    while math.ceil(f * n_groups) < n_labeled:
        f = float(np.nextafter(f, 1.0))
    return f


def drawn_mask(n_groups: int, fraction: float, *, seed: int) -> np.ndarray:
    """``[n_groups]`` bool: the train QGs the stages label at ``fraction`` with ``seed`` (the
    scarcity code itself, on stand-in QGs of one item)."""
    train = _stand_in(n_groups)
    return apply_scarcity(
        train, _stand_in(1), ScarcityConfig(fraction=fraction), seed=seed
    ).train_labeled


def train_split(
    labeled: RankingSplit, unlabeled: RankingSplit | None, *, seed: int
) -> tuple[RankingSplit, float]:
    """The train split the stages read, and the ``scarcity.fraction`` that labels exactly
    ``labeled``'s QGs in it."""
    n_labeled = labeled.n_groups
    n_unlabeled = unlabeled.n_groups if unlabeled is not None else 0
    n = n_labeled + n_unlabeled
    fraction = labeled_fraction(n_labeled, n)
    mask = drawn_mask(n, fraction, seed=seed)
    source = np.empty(n, dtype=np.int64)  # the QG of `both` at each train position
    source[mask] = np.arange(n_labeled)
    source[~mask] = n_labeled + np.arange(n_unlabeled)
    if unlabeled is None:
        return labeled.subset(source), fraction
    unlabeled = unlabeled.with_labels(np.zeros(unlabeled.n_items, dtype=np.float32))
    both = concatenate([labeled, unlabeled], "train")
    return both.subset(source), fraction


def holdout(labeled: RankingSplit, *, seed: int) -> tuple[RankingSplit, RankingSplit]:
    """``(train, vali)``: a seeded `HOLDOUT_SHARE` of the labeled QGs held out for validation."""
    n = labeled.n_groups
    if n < 2:
        raise ValueError(
            "one labeled QG cannot be both trained and validated on: give eval_set=(X, y, qid) "
            "or more labeled QGs"
        )
    n_vali = min(n - 1, max(1, round(HOLDOUT_SHARE * n)))
    chosen = np.zeros(n, dtype=bool)
    chosen[np.random.default_rng([seed, _HOLDOUT_STREAM]).permutation(n)[:n_vali]] = True
    train, vali = labeled.subset(np.flatnonzero(~chosen)), labeled.subset(np.flatnonzero(chosen))
    return train, RankingSplit(vali.features, vali.labels, vali.offsets, vali.qids, "vali")


def _stand_in(n_groups: int) -> RankingSplit:
    return RankingSplit(
        np.zeros((n_groups, 1), dtype=np.float32),
        np.zeros(n_groups, dtype=np.float32),
        np.arange(n_groups + 1, dtype=np.int64),
        np.arange(n_groups, dtype=np.int64),
    )
