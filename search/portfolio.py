"""A portfolio of recipes chosen from a matrix of vali scores, TabRepo's greedy way.

Rows are candidate recipes, columns cells (one searched run each: a data set, label setting,
seed, fold and model). On each cell the candidates are ranked by their vali score (1: the best;
ties share their mean rank; NaN, a recipe that could not be scored there, ranks below every
score). A portfolio's rank on a cell is that of its best member there, since a portfolio run
keeps its vali-best trial (`selection.select_best`). Greedy forward selection (Salinas and
Erickson 2023, TabRepo; Caruana et al. 2004's ensemble selection): start empty, and at each
step add the candidate that lowers the mean rank over cells the most; ties go to the earlier
candidate.

Ranks rather than raw scores, so that a cell whose NDCG spreads widely (a large label budget, an
easy data set) does not outvote the others. Only vali scores come in.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def cell_ranks(scores: np.ndarray) -> np.ndarray:
    """``scores`` ``[n_candidates, n_cells]`` of vali NDCG -> each candidate's rank on each
    cell (1: the best; ties share their mean rank; NaN ranks last).

    >>> cell_ranks(np.array([[0.5, np.nan], [0.7, 0.2], [0.5, 0.3]])).tolist()
    [[2.5, 3.0], [1.0, 2.0], [2.5, 1.0]]
    """
    values = np.where(np.isnan(scores), -np.inf, scores)
    return rankdata(-values, method="average", axis=0)


def greedy_portfolio(scores: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    """The rows of ``scores`` ``[n_candidates, n_cells]`` a portfolio of ``k`` (at most the
    number of candidates) takes, in the order chosen, and the portfolio's mean rank over cells
    after each step.

    The generalist (row 1) first, then the specialist that covers its weak cells:

    >>> scores = [[0.9, 0.9, 0.1, 0.1], [0.6, 0.6, 0.6, 0.6], [0.1, 0.1, 0.9, 0.5]]
    >>> greedy_portfolio(np.array(scores), 2)
    ([1, 0], [1.75, 1.25])
    """
    if scores.ndim != 2 or not scores.size:
        raise ValueError(f"a portfolio needs candidates x cells scores, got shape {scores.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ranks = cell_ranks(scores)
    best = np.full(ranks.shape[1], np.inf)  # the portfolio's rank on each cell: none yet
    chosen: list[int] = []
    steps: list[float] = []
    for _ in range(min(k, len(ranks))):
        means = np.minimum(best, ranks).mean(axis=1)
        means[chosen] = np.inf
        pick = int(np.argmin(means))  # the first of ties: candidate order
        chosen.append(pick)
        steps.append(float(means[pick]))
        best = np.minimum(best, ranks[pick])
    return chosen, steps
