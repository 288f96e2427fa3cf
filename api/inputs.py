"""The arrays users have, checked and put in the project's form: features, labels and qids.

Features come as dense numpy (any real dtype), scipy sparse (CSR, what SVMlight files are) or a
pandas DataFrame (numeric or categorical columns, matched by name at predict time; a category
is its position among fit's categories, as LightGBM reads it); they become float32
``[n_items, n_features]``. Query ids are any hashable ids (`codes` numbers them) or LightGBM's
``group`` sizes. A qid array may come in any order:
`scarce_ltr.data.ranking_split.QidGroups` sorts the items stably into QGs (QGs by ascending qid,
a QG's items in their input order), so the order in which QGs come does not change what is
trained, and puts per-item results back in the input order.
Every problem is one `ValueError` naming the argument, the column or the row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scarce_ltr.data.ranking_split import MAX_LABEL, label_outside_grades

_FLOAT32_MAX = float(np.finfo(np.float32).max)
MISSING_POLICIES = ("raise", "median", "keep")  # keep: NaN goes to the model (trees only)


@dataclass(frozen=True)
class Features:
    """Checked features: ``values`` float32 ``[n_items, n_features]`` (NaN where missing), the
    column names of a DataFrame (None for arrays) and the categories of its pandas categorical
    columns (column index -> the categories, whose positions are the values)."""

    values: np.ndarray
    names: list[str] | None
    categories: dict[int, list] = field(default_factory=dict)

    def column(self, j: int) -> str:
        return repr(self.names[j]) if self.names is not None else str(j)


def as_features(
    x, *, arg: str = "X", columns: list[str] | None = None, categories: dict | None = None
) -> Features:
    """``x`` as float32 features; ``columns``: the names a DataFrame must hold (predict);
    ``categories``: fit's categories of the categorical columns (LightGBM's reading: a value is
    its position among fit's categories, NaN when fit did not see it)."""
    names = None
    found: dict[int, list] = {}
    if is_dataframe(x):
        labels = {str(c): c for c in x.columns}  # the names as strings, to the frame's labels
        names = list(labels) if len(labels) == len(x.columns) else [str(c) for c in x.columns]
        if len(set(names)) != len(x.columns):
            raise ValueError(f"{arg}: column names repeat: {_repeated(names)}")
        if columns is not None:
            absent = [c for c in columns if c not in labels]
            if absent:
                raise ValueError(
                    f"{arg} lacks the column(s) {', '.join(map(repr, absent))} the ranker was "
                    f"fit on (it has {', '.join(map(repr, names))})"
                )
            x, names = x[[labels[c] for c in columns]], list(columns)
        bad = [names[j] for j, t in enumerate(x.dtypes) if not _numeric(t) and not _category(t)]
        if bad:
            raise ValueError(
                f"{arg}: non-numeric column(s) {', '.join(map(repr, bad))}: features must be "
                "numbers or pandas categories (encode other columns first, or drop them)"
            )
        x, found = _category_codes(x, arg, categories)
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
    features = Features(np.ascontiguousarray(values), names, found)
    with np.errstate(invalid="ignore"):
        over = np.abs(values) > _FLOAT32_MAX  # inf too; NaN is no overflow
    if over.any():
        row, j = (int(i) for i in np.argwhere(over)[0])
        raise ValueError(
            f"{arg}: row {row}, column {features.column(j)}: {values[row, j]} is beyond float32 "
            "(the features are stored as float32); rescale the column"
        )
    return Features(np.ascontiguousarray(values, dtype=np.float32), names, found)


def _category_codes(frame, arg: str, categories: dict | None):
    """``frame`` with each categorical column as its codes (NaN for a missing or unseen value),
    and the categories of each: its own at fit (``categories`` None), fit's after."""
    import pandas as pd

    found: dict[int, list] = {}
    out = frame
    for j, dtype in enumerate(frame.dtypes):
        known = None if categories is None else categories.get(j)
        if not _category(dtype):
            if known is not None:
                raise ValueError(
                    f"{arg}: column {j} ({frame.columns[j]!r}) was categorical at fit; give it "
                    "as a pandas category again"
                )
            continue
        if categories is not None and known is None:
            raise ValueError(
                f"{arg}: column {j} ({frame.columns[j]!r}) is categorical; it was not at fit"
            )
        column = frame.iloc[:, j]
        if known is None:
            known = list(column.cat.categories)
        codes = pd.Index(known).get_indexer(column.astype(object)).astype(np.float64)
        codes[codes < 0] = np.nan  # missing, or a category fit did not see
        if out is frame:
            out = frame.copy()
        out.isetitem(j, codes)
        found[j] = known
    return out, found


def categorical_columns(given, categories: dict, names, width: int) -> list[int]:
    """LGBMRanker's ``categorical_feature``: ``auto`` (the DataFrame's categorical columns) or
    the columns by index or name."""
    if isinstance(given, str) and given == "auto":
        return sorted(categories)
    if isinstance(given, str) or not isinstance(given, list | tuple | np.ndarray):
        raise ValueError("categorical_feature must be 'auto' or a list of column indices or names")
    out = []
    for column in given:
        if isinstance(column, int | np.integer) and 0 <= column < width:
            out.append(int(column))
        elif isinstance(column, str) and names is not None and column in names:
            out.append(names.index(column))
        else:
            raise ValueError(f"categorical_feature: {column!r} is no column of X")
    return sorted(set(out))


def as_group(group, n_items: int, *, arg: str = "group") -> np.ndarray:
    """LightGBM's ``group``: the sizes of consecutive QGs, as one int64 qid per row."""
    sizes = np.asarray(group)
    if sizes.ndim != 1 or not (np.issubdtype(sizes.dtype, np.number) and len(sizes)):
        raise ValueError(f"{arg} must be a 1-D list of QG sizes, got {sizes.dtype} {sizes.shape}")
    if (sizes != np.round(sizes)).any() or (sizes < 1).any():
        raise ValueError(f"{arg} must hold QG sizes (integers >= 1)")
    if int(sizes.sum()) != n_items:
        raise ValueError(f"{arg}'s sizes add up to {int(sizes.sum())}; its X has {n_items} rows")
    return np.repeat(np.arange(len(sizes), dtype=np.int64), sizes.astype(np.int64))


def query_ids(qid, group, n_items: int, *, what: str = "") -> np.ndarray:
    """The raw qids of ``qid=`` (any hashable ids) or ``group=`` (sizes), exactly one given."""
    if qid is not None and group is not None:
        raise ValueError(f"{what}qid and {what}group are both given: pass one (ids or sizes)")
    if group is not None:
        return as_group(group, n_items, arg=f"{what}group")
    return as_raw_qids(qid, n_items, arg=f"{what}qid")


def as_labels(y, n_items: int, *, arg: str = "y", integer: str | None = None) -> np.ndarray:
    """``[n_items]`` float32 relevance grades 0..30: real numbers, or integers (floats with
    integral values, ``1.0``, included) when ``integer`` names the model that needs them
    (LightGBM's lambdarank refuses ``0.5`` too)."""
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
    if integer is not None:
        bad = np.flatnonzero(labels != np.round(labels))
        if len(bad):
            row = int(bad[0])
            raise ValueError(
                f"{arg}: row {row}: label {labels[row]:g} is not an integer; {integer} takes "
                f"integer relevance grades 0..{MAX_LABEL} (round the labels, or binarize "
                "real-valued feedback: y > threshold)"
            )
    return labels.astype(np.float32)


def as_raw_qids(qid, n_items: int, *, arg: str = "qid") -> np.ndarray:
    """``[n_items]`` query ids: int64 for integral numbers; any hashable ids (strings, ...)
    kept as they are (`codes` numbers them)."""
    if qid is None:
        raise ValueError(f"{arg} is required: the query id of each of the {n_items} rows")
    qids = np.asarray(qid)
    if qids.dtype.kind == "O" and qids.ndim == 2 and len(qid) == n_items:  # ids that are tuples
        qids = np.empty(n_items, dtype=object)
        qids[:] = list(qid)
    _check_length(qids, n_items, arg, "ids")
    if qids.dtype.kind in "iub":
        return qids.astype(np.int64)
    if qids.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~np.isfinite(qids) | (qids != np.round(qids)))
        if not len(bad) and n_items and np.abs(qids).max() > 2**53:
            bad = np.flatnonzero(np.abs(qids) > 2**53)
        if len(bad):
            row = int(bad[0])
            raise ValueError(f"{arg} must hold integers or other ids; row {row} is "
                             f"{qids[row].item()}")  # fmt: skip
        return qids.astype(np.int64)
    if qids.dtype.kind in "US":
        return qids
    if qids.dtype.kind != "O":
        raise ValueError(f"{arg} must hold ids (integers, strings), got dtype {qids.dtype}")
    for row, value in enumerate(qids):
        if value is None or (isinstance(value, float) and value != value):
            raise ValueError(f"{arg}: row {row} has no id ({value})")
        try:
            hash(value)
        except TypeError:
            raise ValueError(
                f"{arg}: row {row}: {type(value).__name__} is not hashable, not an id"
            ) from None
    return qids


def codes(*raw: np.ndarray) -> list[np.ndarray]:
    """The raw qids of arrays that share their ids, as int64 numbers: integers as they are,
    other ids numbered in sorted order (in order of first appearance when they do not sort)."""
    if all(r.dtype.kind == "i" for r in raw):
        return [r.astype(np.int64) for r in raw]
    every = np.concatenate([np.asarray(r, dtype=object) for r in raw])
    try:
        _, numbers = np.unique(every, return_inverse=True)
    except TypeError:  # ids of kinds that do not compare
        first: dict = {}
        numbers = np.array([first.setdefault(v, len(first)) for v in every], dtype=np.int64)
    out, start = [], 0
    for r in raw:
        out.append(numbers[start : start + len(r)].astype(np.int64))
        start += len(r)
    return out


def as_qids(qid, n_items: int, *, arg: str = "qid") -> np.ndarray:
    """``[n_items]`` int64 numbers of the query ids of one array (`as_raw_qids`, `codes`)."""
    return codes(as_raw_qids(qid, n_items, arg=arg))[0]


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


def _category(dtype) -> bool:
    import pandas as pd

    return isinstance(dtype, pd.CategoricalDtype)


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
