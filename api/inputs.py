"""The arrays users have, checked and put in the project's form: features, labels and qids.

Features come as dense numpy (any real dtype), scipy sparse (CSR, what SVMlight files are) or a
pandas DataFrame (numeric columns, matched by name at predict time); they become float32
``[n_items, n_features]``. A qid array may come in any order:
`scarce_ltr.data.ranking_split.QidGroups` sorts the items stably into QGs (QGs by ascending qid,
a QG's items in their input order), so the order in which QGs come does not change what is
trained, and puts per-item results back in the input order.
Every problem is one `ValueError` naming the argument, the column or the row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scarce_ltr.data.ranking_split import MAX_LABEL, label_outside_grades

_FLOAT32_MAX = float(np.finfo(np.float32).max)
MISSING_POLICIES = ("raise", "median", "keep")  # keep: NaN goes to the model (trees only)


@dataclass(frozen=True)
class Features:
    """Checked features: ``values`` float32 ``[n_items, n_features]`` (NaN where missing) and
    the column names of a DataFrame (None for arrays)."""

    values: np.ndarray
    names: list[str] | None

    def column(self, j: int) -> str:
        return repr(self.names[j]) if self.names is not None else str(j)


def as_features(x, *, arg: str = "X", columns: list[str] | None = None) -> Features:
    """``x`` as float32 features; ``columns``: the names a DataFrame must hold (predict)."""
    names = None
    if is_dataframe(x):
        names = [str(c) for c in x.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"{arg}: column names repeat: {_repeated(names)}")
        if columns is not None:
            absent = [c for c in columns if c not in names]
            if absent:
                raise ValueError(
                    f"{arg} lacks the column(s) {', '.join(map(repr, absent))} the ranker was "
                    f"fit on (it has {', '.join(map(repr, names))})"
                )
            x, names = x[list(columns)], list(columns)
        bad = [str(c) for c, t in x.dtypes.items() if not _numeric(t)]
        if bad:
            raise ValueError(
                f"{arg}: non-numeric column(s) {', '.join(map(repr, bad))}: features must be "
                "numbers (encode categories first, or drop the columns)"
            )
        values = x.to_numpy(dtype=np.float64, na_value=np.nan)
    elif _is_sparse(x):
        values = x.tocsr().toarray()
    else:
        values = np.asarray(x)
    if values.ndim != 2:
        raise ValueError(f"{arg} must be 2-D [n_items, n_features], got shape {values.shape}")
    if not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise ValueError(f"{arg} must hold numbers, got dtype {values.dtype}")
    if np.iscomplexobj(values):
        raise ValueError(f"{arg} must hold real numbers, got dtype {values.dtype}")
    if values.shape[1] == 0:
        raise ValueError(f"{arg} has no feature column")
    features = Features(np.ascontiguousarray(values), names)
    with np.errstate(invalid="ignore"):
        over = np.abs(values) > _FLOAT32_MAX  # inf too; NaN is no overflow
    if over.any():
        row, j = (int(i) for i in np.argwhere(over)[0])
        raise ValueError(
            f"{arg}: row {row}, column {features.column(j)}: {values[row, j]} is beyond float32 "
            "(the features are stored as float32); rescale the column"
        )
    return Features(np.ascontiguousarray(values, dtype=np.float32), names)


def as_labels(y, n_items: int, *, arg: str = "y") -> np.ndarray:
    """``[n_items]`` float32 relevance grades 0..30."""
    labels = np.asarray(y)
    _check_length(labels, n_items, arg, "labels")
    if not np.issubdtype(labels.dtype, np.number) and labels.dtype != bool:
        raise ValueError(f"{arg} must hold numbers (relevance grades), got dtype {labels.dtype}")
    labels = labels.astype(np.float64)
    row = label_outside_grades(labels)
    if row is not None:
        raise ValueError(
            f"{arg}: row {row}: label {labels[row]:g} is outside the relevance grades "
            f"0..{MAX_LABEL} (NDCG's gain is 2^label - 1)"
        )
    return labels.astype(np.float32)


def as_qids(qid, n_items: int, *, arg: str = "qid") -> np.ndarray:
    """``[n_items]`` int64 query ids (integral values of any numeric dtype)."""
    if qid is None:
        raise ValueError(f"{arg} is required: the query id of each of the {n_items} rows")
    qids = np.asarray(qid)
    _check_length(qids, n_items, arg, "ids")
    if qids.dtype.kind in "iu":
        return qids.astype(np.int64)
    if qids.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~np.isfinite(qids) | (qids != np.round(qids)))
        if not len(bad) and n_items and np.abs(qids).max() > 2**53:
            bad = np.flatnonzero(np.abs(qids) > 2**53)
        if len(bad):
            row = int(bad[0])
            raise ValueError(f"{arg} must hold integers; row {row} is {qids[row].item()}")
        return qids.astype(np.int64)
    raise ValueError(f"{arg} must hold integers, got dtype {qids.dtype}")


def check_columns(features: Features, *, arg: str = "X") -> None:
    """Refuse a column that is NaN in every row: nothing to learn from, nothing to impute."""
    values = features.values
    if not len(values):
        return
    empty = np.flatnonzero(np.isnan(values).all(axis=0))
    if len(empty):
        raise ValueError(
            f"{arg}: column {features.column(int(empty[0]))} is NaN in every row; drop it"
        )


def check_missing(features: Features, policy: str, *, arg: str = "X") -> None:
    """``policy="raise"``: refuse NaN, naming the first column that holds one."""
    if policy != "raise":
        return
    rows, cols = np.nonzero(np.isnan(features.values))
    if len(rows):
        j = int(cols.min())
        row = int(rows[cols == j][0])
        raise ValueError(
            f"{arg}: column {features.column(j)} is NaN (row {row}); deep models need every "
            "value: pass missing='median' to impute the train median, or fill it yourself"
        )


def impute(values: np.ndarray, medians: np.ndarray) -> np.ndarray:
    """``values`` with each NaN replaced by its column's median (a copy when there is one)."""
    nan = np.isnan(values)
    if not nan.any():
        return values
    out = values.copy()
    out[nan] = np.broadcast_to(medians, values.shape)[nan]
    return out


def is_dataframe(x) -> bool:
    return type(x).__name__ == "DataFrame" and hasattr(x, "dtypes") and hasattr(x, "columns")


def _is_sparse(x) -> bool:
    try:
        from scipy import sparse
    except ImportError:  # pragma: no cover - scipy is a dependency
        return False
    return sparse.issparse(x)


def _numeric(dtype) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(dtype)) and not isinstance(dtype, pd.CategoricalDtype)


def _repeated(names: list[str]) -> str:
    seen, twice = set(), []
    for name in names:
        if name in seen and name not in twice:
            twice.append(name)
        seen.add(name)
    return ", ".join(map(repr, twice))


def _check_length(values: np.ndarray, n_items: int, arg: str, what: str) -> None:
    if values.ndim != 1:
        raise ValueError(f"{arg} must be 1-D, one of its {what} per row, got shape {values.shape}")
    if len(values) != n_items:
        raise ValueError(f"{arg} has {len(values)} {what}; its X has {n_items} rows")
