"""Every trial's per-QG vali NDCG@5, kept beside a searched run (``trials.npz``), so that the
search's choice can be scored out of sample later (``select rule=crossfit``, `sweeps.choice`).

A search (30 Optuna trials, a paper grid, a learning-rate grid) keeps the trial with the best vali
mean and reports that trial's vali score: the maximum of many noisy means, above what the kept
trial scores on QGs it was not chosen on (the winner's curse), and the more trials, the further
above. Comparing such a score with a one-recipe model's, or a 30-trial search's with a 3-point
grid's, favours whichever was maximised most. With each trial's per-QG values the choice can be
cross-fitted like ensemble weights (`search.crossfit`): the trial chosen without a fold of vali
QGs scores that fold. An ensemble with ``weights=grid`` writes its weight vectors as trials.

The file holds ``per_trial`` (``[n_trials, n_groups]``: one row per trial in the order they ran,
one column per labeled vali QG in the split's order, NaN where a QG has no defined value or the
trial was pruned) and ``qids`` (the columns' qids). Written only for two trials or more: a run of
one trial has nothing to cross-fit, and its plain vali score stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scarce_ltr.core.files import atomic_write_bytes, npz_bytes

TRIALS = "trials.npz"


def write_trial_scores(
    folder: Path, qids: np.ndarray, per_trial: Sequence[np.ndarray | None]
) -> None:
    """Write ``trials.npz`` in ``folder`` (nothing for fewer than two trials); a trial without
    values (``None``: pruned before it was scored) is a row of NaN."""
    if len(per_trial) < 2:
        return
    n_groups = len(qids)
    rows = np.full((len(per_trial), n_groups), np.nan)
    for index, values in enumerate(per_trial):
        if values is None:
            continue
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (n_groups,):
            raise ValueError(
                f"trial {index} has {values.shape} per-QG values, expected ({n_groups},)"
            )
        rows[index] = values
    atomic_write_bytes(Path(folder) / TRIALS, npz_bytes(per_trial=rows, qids=np.asarray(qids)))


def read_trial_scores(folder: str | Path) -> tuple[np.ndarray, np.ndarray] | None:
    """``(qids, per_trial)`` of ``folder``'s ``trials.npz``; None when the run has none."""
    path = Path(folder) / TRIALS
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as stored:
        return np.asarray(stored["qids"]), np.asarray(stored["per_trial"], dtype=np.float64)
