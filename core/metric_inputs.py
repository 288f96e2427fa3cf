"""What every ranking metric accepts, checked once: the empty-QG policy, the cutoff k, a
selection of query groups (QGs), the score, label and offset arrays, and ERR's highest grade.

Shared by the numpy metrics (`core.metrics`) and their torch twins (`core.metrics_torch`), so
both refuse the same inputs with the same messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Empty-QG policy name -> the NDCG a QG without any relevant item counts as.
EMPTY_QG_POLICIES: dict[str, float] = {"skip": float("nan"), "one": 1.0, "zero": 0.0}


def check_policy(policy: str) -> float:
    """The NDCG an undefined QG gets under ``policy`` (NaN for ``skip``); ValueError if unknown."""
    if policy not in EMPTY_QG_POLICIES:
        allowed = ", ".join(repr(name) for name in EMPTY_QG_POLICIES)
        raise ValueError(f"unknown empty-QG policy {policy!r}; allowed: {allowed}")
    return EMPTY_QG_POLICIES[policy]


def check_k(k: int) -> int:
    """``k`` as a Python int; ValueError unless it is an integer >= 1."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"NDCG cutoff k must be an integer >= 1, got {k!r}")
    return int(k)


def group_mask(groups: np.ndarray | Sequence[int], *, n_groups: int) -> np.ndarray:
    """``[n_groups]`` bool mask from a bool mask or an index array of QGs."""
    selected = np.asarray(groups)
    if selected.dtype == bool:
        if selected.shape != (n_groups,):
            raise ValueError(f"a bool QG mask must have shape ({n_groups},), got {selected.shape}")
        return selected
    if selected.size and not np.issubdtype(selected.dtype, np.integer):
        raise ValueError(f"select QGs by a bool mask or integer indices, not {selected.dtype}")
    mask = np.zeros(n_groups, dtype=bool)
    mask[selected.astype(np.int64).ravel()] = True
    return mask


def check_inputs(
    scores: np.ndarray, labels: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[n_items]`` float64 scores and labels, ``[n_groups + 1]`` int64 offsets; ValueError
    naming what is wrong."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    offsets = np.asarray(offsets)
    if scores.ndim != 1 or labels.shape != scores.shape:
        shapes = f"{scores.shape} and {labels.shape}"
        raise ValueError(f"scores and labels must both be [n_items], got {shapes}")
    if offsets.ndim != 1 or len(offsets) < 1 or not np.issubdtype(offsets.dtype, np.integer):
        raise ValueError("offsets must be a 1-D integer array [n_groups + 1]")
    offsets = offsets.astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != len(scores) or np.any(np.diff(offsets) < 0):
        raise ValueError(f"offsets must rise from 0 to n_items={len(scores)} without decreasing")
    # NaN has no place in an order; a diverged model should fail loudly, not score as last.
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    # Negative labels would give negative gains and an ideal DCG that is not an upper bound.
    if labels.size and not labels.min() >= 0:
        raise ValueError("labels must be >= 0 (and not NaN)")
    return scores, labels, offsets


def stop_scale(labels: np.ndarray, max_grade: float | None) -> float:
    """``2**max_grade``, ERR's normaliser; ValueError when a label lies above ``max_grade``."""
    labels = np.asarray(labels, dtype=np.float64)
    top = float(labels.max()) if labels.size else 0.0
    if max_grade is None:
        max_grade = top
    if not max_grade >= top:
        raise ValueError(f"ERR: a label of {top:g} lies above max_grade={max_grade:g}")
    return float(np.exp2(max_grade))
