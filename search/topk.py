"""The vali-best k of an ensemble's members, averaged (``weights=topk``; the sweep model
``topk:<model>,<model>,...``), with k chosen by cross-fitting over the vali QGs.

Why: on a validation set of a few dozen QGs (OHSUMED has 21 per fold) the vali argmax over a
sweep's models is a noisy pick, and a grid of weights chosen on the same QGs overfits them
(`search.crossfit`). Averaging the few vali-best models (ensemble selection, Caruana et al.
2004, in its simplest form: equal weights, no search over weights) keeps most of what the
argmax gets right while a wrong pick among near-equal models costs less. How many to average
is the one choice left, and it is made out of sample: the labeled vali QGs are split into
folds (`crossfit.assign_folds`); for each fold the members are ordered by their mean on the
other folds and every k is scored on the held-out fold by the average of that order's first
k. The k with the best held-out mean wins (the fewest members on ties); the final members are
the first k of the order on every vali QG.

The vali score the run reports is the whole procedure's, cross-fitted one level up: each outer
fold's QGs are scored by the members chosen (order and k) without them, as ``weights=crossfit``
does, so that sweeps and ``select`` compare an honest value; the in-sample value is kept beside
it. Test never enters.

All functions are pure: ``member_per_group`` is ``[n_members, n_groups]``, each member's per-QG
vali NDCG@5 over the labeled vali QGs (NaN where undefined), and ``mix_per_group(members)``
returns the same row for the plain average of the members' normalized scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scarce_ltr.search.crossfit import assign_folds, group_means
from scarce_ltr.search.selection import select_best

MixPerGroup = Callable[[tuple[int, ...]], np.ndarray]


@dataclass(frozen=True)
class TopK:
    """The members chosen on every vali QG and the procedure's cross-fitted score."""

    members: tuple[int, ...]  # the chosen members, vali-best first
    held_out_by_k: list[float]  # [n_members] the held-out mean of each k = 1, 2, ...
    fold_members: list[tuple[int, ...]]  # per outer fold: the members chosen without it
    fold_of_group: np.ndarray  # [n_groups] int: each QG's outer fold; -1 where undefined
    estimate: float  # the cross-fitted vali score of the whole procedure
    in_sample: float  # the chosen members' mean over every vali QG (optimistic)

    @property
    def k(self) -> int:
        return len(self.members)


def order_members(member_per_group: np.ndarray, inside: np.ndarray) -> list[int]:
    """Members by their mean over the ``inside`` QGs, best first; ties keep the given order.

    >>> order_members(np.array([[0.2, 0.4], [0.5, 0.1], [0.6, 0.6]]), np.array([True, True]))
    [2, 0, 1]
    """
    means = np.array(group_means(member_per_group[:, inside]), dtype=np.float64)
    means[np.isnan(means)] = -np.inf
    return [int(i) for i in np.argsort(-means, kind="stable")]


def choose_members(
    member_per_group: np.ndarray,
    mix_per_group: MixPerGroup,
    inside: np.ndarray,
    *,
    n_folds: int,
    seed: int,
) -> tuple[tuple[int, ...], list[float]]:
    """The first k members of the order on ``inside``, k cross-fitted over the ``inside``
    QGs; also each k's held-out mean. ValueError with fewer than 2 QGs inside."""
    fold_of = assign_folds(inside, n_folds, seed=seed)
    n_members = len(member_per_group)
    held_out = np.full((n_members, len(inside)), np.nan)
    for fold in range(int(fold_of.max()) + 1):
        out = fold_of == fold
        order = order_members(member_per_group, (fold_of >= 0) & ~out)
        for k in range(1, n_members + 1):
            held_out[k - 1, out] = mix_per_group(tuple(order[:k]))[out]
    by_k = group_means(held_out[:, fold_of >= 0])
    best_k = select_best(by_k) + 1  # the first best: the fewest members
    return tuple(order_members(member_per_group, inside)[:best_k]), by_k


def top_k(
    member_per_group: np.ndarray, mix_per_group: MixPerGroup, *, n_folds: int, seed: int
) -> TopK:
    """Choose the members on every labeled vali QG and score the choice out of sample.

    >>> values = np.array([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    >>> top_k(values, lambda m: values[list(m)].mean(axis=0), n_folds=2, seed=0).members
    (0,)
    """
    member_per_group = np.asarray(member_per_group, dtype=np.float64)
    if member_per_group.ndim != 2 or len(member_per_group) < 1:
        raise ValueError("member_per_group must be [n_members, n_groups] with one member or more")
    mix_per_group = _cached(mix_per_group)
    defined = ~np.isnan(member_per_group).all(axis=0)
    fold_of = assign_folds(defined, n_folds, seed=seed)
    held_out = np.full(member_per_group.shape[1], np.nan)
    fold_members = []
    for fold in range(int(fold_of.max()) + 1):
        out = fold_of == fold
        inside = (fold_of >= 0) & ~out
        chosen, _ = choose_members(
            member_per_group, mix_per_group, inside, n_folds=n_folds, seed=seed
        )
        fold_members.append(chosen)
        held_out[out] = mix_per_group(chosen)[out]
    members, by_k = choose_members(
        member_per_group, mix_per_group, defined, n_folds=n_folds, seed=seed
    )
    return TopK(
        members=members,
        held_out_by_k=by_k,
        fold_members=fold_members,
        fold_of_group=fold_of,
        estimate=float(np.nanmean(held_out[defined])),
        in_sample=group_means(mix_per_group(members)[None, defined])[0],
    )


def weights_of(members: tuple[int, ...], n_members: int) -> np.ndarray:
    """``[n_members]`` equal weights on ``members``, 0 elsewhere."""
    weights = np.zeros(n_members)
    weights[list(members)] = 1.0 / len(members)
    return weights


def _cached(mix_per_group: MixPerGroup) -> MixPerGroup:
    """Score each set of members once (the order within a set does not change its average)."""
    seen: dict[tuple[int, ...], np.ndarray] = {}

    def scored(members: tuple[int, ...]) -> np.ndarray:
        key = tuple(sorted(members))
        if key not in seen:
            seen[key] = np.asarray(mix_per_group(key), dtype=np.float64)
        return seen[key]

    return scored
