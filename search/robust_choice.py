"""A choice among models that holds on small validation sets: keep the simpler model unless a
more complex one wins clearly.

The vali argmax (`search.selection.select_best`) is right when vali is large. With 21 vali QGs
(OHSUMED) or a few labeled ones (``scarcity.val=same``), the model with the best vali mean is
often the one whose vali score was maximised over most (an Optuna search, a weighted ensemble)
and whose edge comes from a few QGs; its test score then falls behind a simpler model's.

The rule here gives the simpler model the benefit of the doubt. Candidates come with a
simplicity level (lower is simpler; the caller says why, e.g. `sweeps.choice.simplicity`); the
incumbent is the vali-best model of the simplest level, and each more complex level's vali-best
model challenges it in turn: a seeded paired bootstrap over the vali QGs (``n_resamples``
resamples of the QGs with replacement, the same resamples for every challenge) gives the
one-sided p-value of "the challenger's mean advantage is not above 0", the share of resampled
mean differences at or below 0. The challenger takes over only when ``p < alpha``. Within a level
nothing is tested: the argmax stands, as among equally complex candidates there is no simpler
one to prefer.

Only validation values come in; the QGs are the columns of ``per_group``, pooled over whatever
units the caller gives (one fold and seed, or every fold and seed of a setting), the same QGs in
the same order for every candidate. A QG undefined (NaN) for any candidate is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scarce_ltr.search.selection import select_best

ALPHA = 0.05
N_RESAMPLES = 2000


@dataclass(frozen=True)
class Challenge:
    """One more complex level's vali-best model against the incumbent."""

    incumbent: int
    challenger: int
    mean_diff: float  # challenger minus incumbent, mean over the QGs
    p: float  # one-sided paired bootstrap p of mean_diff <= 0
    switched: bool


@dataclass(frozen=True)
class RobustChoice:
    chosen: int  # index into the candidates
    argmax: int  # the plain vali argmax, for comparison
    challenges: tuple[Challenge, ...]
    n_groups: int  # QGs compared on


def keep_simpler(
    per_group: Sequence[np.ndarray],
    levels: Sequence[int],
    *,
    alpha: float = ALPHA,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> RobustChoice:
    """The robust choice among candidates.

    Args:
        per_group: one ``[n_groups]`` array per candidate: its per-QG vali NDCG@5 on the same QGs.
        levels: each candidate's simplicity level (lower is simpler).
        alpha: the one-sided p below which a more complex challenger wins.
        n_resamples: bootstrap resamples of the QGs.
        seed: draws the resamples.

    Returns:
        A `RobustChoice`. Example: a tree with 0.5 on each of 20 QGs and a complex model with 1.0
        on 2 of them and 0.45 on the others (mean 0.505, the vali argmax): p is about 0.4, so the
        tree is kept; were it 0.55 on all 20, p would be 0 and the complex model chosen.
    """
    if len(per_group) != len(levels) or not len(per_group):
        raise ValueError("per_group and levels must name the same candidates (one or more)")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    values = np.stack([np.asarray(v, dtype=np.float64) for v in per_group])
    values = values[:, ~np.isnan(values).any(axis=0)]
    if values.shape[1] == 0:
        raise ValueError("no QG has a defined value for every candidate")
    means = values.mean(axis=1).tolist()
    resamples = np.random.default_rng(seed).integers(
        0, values.shape[1], size=(n_resamples, values.shape[1])
    )
    best_of = {}
    for level in sorted(set(levels)):
        members = [i for i, lv in enumerate(levels) if lv == level]
        best_of[level] = members[select_best([means[i] for i in members])]
    order = list(best_of.values())
    incumbent, challenges = order[0], []
    for challenger in order[1:]:
        diff = values[challenger] - values[incumbent]
        p = bootstrap_p(diff, resamples)
        switched = p < alpha
        challenges.append(Challenge(incumbent, challenger, float(diff.mean()), p, switched))
        if switched:
            incumbent = challenger
    return RobustChoice(incumbent, select_best(means), tuple(challenges), values.shape[1])


def bootstrap_p(diff: np.ndarray, resamples: np.ndarray) -> float:
    """One-sided paired bootstrap p of "mean ``diff`` <= 0": the share of resampled means
    (``resamples [n_resamples, n]``: QG indices) at or below 0.

    >>> bootstrap_p(np.array([0.1, 0.2, -0.05]), np.array([[0, 1, 2], [2, 2, 0], [2, 2, 2]]))
    0.6666666666666666
    """
    return float(np.mean(diff[resamples].mean(axis=1) <= 0))
