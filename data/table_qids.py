"""A table's qid column as int64 qids (`integer_qids`, for ``data=table`` and `serving`'s
predictions on tables): integer columns as they are, float columns only where every value is an
exact integer within 2^53; anything else refused with the first row that is no qid.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError

_MAX_QID = 2**53  # float64 holds every integer up to here; LETOR files refuse larger qids too


def integer_qids(values: np.ndarray, path: Path, column: str) -> np.ndarray:
    """A table's qid column as int64; `UserError` naming the first row that is no integer, or
    an integer beyond int64 (a float qid beyond 2^53: float64 no longer tells it apart)."""
    if values.dtype.kind == "i":
        return values.astype(np.int64)
    if values.dtype.kind == "u":
        bad = np.flatnonzero(values > np.iinfo(np.int64).max)
        if not len(bad):
            return values.astype(np.int64)
        raise UserError(f"{path}: column {column}: row {int(bad[0])} is {values[bad[0]]}, beyond "
                        "int64's qids")  # fmt: skip
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)))
            beyond = np.flatnonzero(np.abs(values) > _MAX_QID)
        if not len(bad) and not len(beyond):
            return values.astype(np.int64)
        if len(bad) and (not len(beyond) or bad[0] < beyond[0]):
            raise UserError(f"{path}: column {column}: row {int(bad[0])} is {values[bad[0]]}, "
                            "not an integer qid")  # fmt: skip
        raise UserError(
            f"{path}: column {column}: row {int(beyond[0])} is {values[beyond[0]]:g}, beyond 2^53 "
            "(float qids stop being exact integers there); store the qids as integers"
        )
    raise UserError(f"{path}: column {column} holds {values.dtype}, not integer qids")
