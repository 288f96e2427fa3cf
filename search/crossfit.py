"""Cross-fitted ensemble weights (``weights=crossfit``): an honest vali score for choosing
weights on a small validation set.

Choosing the best of many weight vectors on vali NDCG@5 overfits when vali has few QGs (OHSUMED
has 21 per fold): the chosen vector's vali score is the maximum of many noisy means, and a
member that happens to rank a few vali QGs well earns weight it will not keep on test. The
in-sample score of the choice is then optimistic, and a sweep that picks the model with the best
vali score favours exactly such ensembles.

Cross-fitting separates the choice from its score. The labeled vali QGs that count (those with
a defined NDCG@5) are split into ``K`` folds by a permutation drawn from the seed; for each fold
the grid's best vector is chosen on the other ``K - 1`` folds and scores the held-out fold. Every
QG is thus scored once, by weights chosen without it, and the mean over QGs is an estimate of
the whole weight-choosing procedure on new QGs, not of one lucky choice. The ensemble reports it
as its vali NDCG@5 (what sweeps and ``select`` compare), and the in-sample value beside it.

The final weights are the mean of the ``K`` fold choices: each is an equally valid choice made
on most of vali, and averaging them (subagging, Buhlmann and Yu 2002) smooths the argmax, whose
hard decision swings with a few QGs; a member that wins only through a few QGs keeps weight only
in the folds that train on them. The mean lies in the simplex (it need not lie on the grid).

All functions are pure: ``per_group`` is ``[n_vectors, n_groups]``, one row per weight vector
(the grid's order: a tie goes to the earlier, more even vector), one column per labeled vali QG,
NaN where the QG has no defined value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scarce_ltr.search.selection import select_best

_FOLD_STREAM = 7919  # the fold permutation's stream, apart from every other use of the seed


@dataclass(frozen=True)
class CrossFit:
    """The cross-fitted choice over a grid of weight vectors."""

    fold_of_group: np.ndarray  # [n_groups] int: each QG's fold; -1 for a QG that does not count
    fold_choices: np.ndarray  # [n_folds] int: the vector chosen without each fold
    held_out: np.ndarray  # [n_groups]: each QG's value under the vector chosen without it
    estimate: float  # mean of held_out over the QGs that count: the cross-fitted score
    in_sample_choice: int  # the vector chosen on every QG (what weights=grid keeps)
    in_sample: float  # its mean over every QG: the optimistic in-sample score

    @property
    def n_folds(self) -> int:
        return len(self.fold_choices)


def assign_folds(defined: np.ndarray, n_folds: int, *, seed: int) -> np.ndarray:
    """``[n_groups]`` int fold of each QG where ``defined`` (round robin over a seeded
    permutation, so fold sizes differ by at most one), -1 elsewhere.

    >>> assign_folds(np.array([True, False, True, True]), 2, seed=0).tolist()
    [1, -1, 0, 1]
    """
    index = np.flatnonzero(defined)
    if n_folds < 2:
        raise ValueError(f"cross-fitting needs 2 or more folds, got {n_folds}")
    if len(index) < 2:
        raise ValueError(
            f"cross-fitting needs 2 or more labeled vali QGs with a relevant item, got {len(index)}"
        )
    folds = min(n_folds, len(index))
    order = np.random.default_rng([seed, _FOLD_STREAM]).permutation(len(index))
    fold_of = np.full(len(defined), -1, dtype=np.int64)
    fold_of[index[order]] = np.arange(len(index)) % folds
    return fold_of


def crossfit(per_group: np.ndarray, *, n_folds: int, seed: int) -> CrossFit:
    """Choose a vector on ``K - 1`` folds, score it on the held-out fold, for each fold.

    Args:
        per_group: ``[n_vectors, n_groups]`` each vector's per-QG vali NDCG@5 (NaN: undefined).
        n_folds: K, at most the number of QGs that count.
        seed: draws the folds.

    Returns:
        A `CrossFit`: with two vectors, one right on 3 QGs of 4 and one right on the fourth only,
        every fold keeps the first, and the estimate is 0.75 like its in-sample score.
    """
    per_group = np.asarray(per_group, dtype=np.float64)
    if per_group.ndim != 2 or per_group.shape[0] < 1:
        raise ValueError("per_group must be [n_vectors, n_groups] with one vector or more")
    defined = ~np.isnan(per_group).all(axis=0)
    fold_of = assign_folds(defined, n_folds, seed=seed)
    folds = int(fold_of.max()) + 1
    held_out = np.full(per_group.shape[1], np.nan)
    choices = np.empty(folds, dtype=np.int64)
    for fold in range(folds):
        inside = (fold_of >= 0) & (fold_of != fold)
        choices[fold] = select_best(group_means(per_group[:, inside]))
        out = fold_of == fold
        held_out[out] = per_group[choices[fold], out]
    means = group_means(per_group[:, defined])
    best = select_best(means)
    return CrossFit(
        fold_of_group=fold_of,
        fold_choices=choices,
        held_out=held_out,
        estimate=float(np.nanmean(held_out[defined])),
        in_sample_choice=best,
        in_sample=float(means[best]),
    )


def group_means(values: np.ndarray) -> list[float]:
    """Each row's mean over its defined entries (what `core.metrics` averages under policy
    ``skip``); NaN for a row with none."""
    counts = (~np.isnan(values)).sum(axis=1)
    sums = np.nansum(values, axis=1)
    return [float(s / c) if c else float("nan") for s, c in zip(sums, counts, strict=True)]
