"""Data sets given as arrays: one folder per split in the parsed cache's own form.

``data=arrays data.path=<folder>`` reads ``<folder>/train/``, ``vali/`` and ``test/`` (other
names with ``data.splits.<split>=<name>``), each holding what `scarce_ltr.data.cache` keeps of a
parsed LETOR file:

    features.npy  float32 [N, d]   (NaN: a missing value; the trees take it as missing)
    labels.npy    float   [N]      relevance grades 0..30
    offsets.npy   int64   [Q + 1]  QG g owns rows offsets[g]:offsets[g + 1]
    qids.npy      int64   [Q]

The files are memory-mapped, never parsed: there is nothing to cache. `write_arrays` writes a
split in this form (a temp folder renamed into place), as the estimators of `scarce_ltr.api` do.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import file_error, temp_folder_beside
from scarce_ltr.data.ranking_split import MAX_LABEL, RankingSplit, label_outside_grades

ARRAYS = ("features", "labels", "offsets", "qids")


def split_folder(root: Path, stem: str) -> Path | None:
    """``root/stem`` when it is a folder holding ``features.npy`` (None otherwise)."""
    folder = root / stem
    return folder if (folder / "features.npy").is_file() else None


def read_arrays(folder: str | Path, *, name: str) -> RankingSplit:
    """The split of ``folder`` (memory-mapped features and labels), checked."""
    folder = Path(folder)
    missing = [f"{key}.npy" for key in ARRAYS if not (folder / f"{key}.npy").is_file()]
    if missing:
        raise UserError(f"{folder}: missing {', '.join(missing)} (data=arrays needs {_NEEDS})")
    try:
        arrays = {key: np.load(folder / f"{key}.npy", mmap_mode="r") for key in ARRAYS}
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder}: not readable as .npy arrays ({exc})") from None
    features = arrays["features"]
    if features.ndim != 2 or features.dtype != np.float32:
        raise UserError(
            f"{folder / 'features.npy'}: features must be float32 [N, d], got "
            f"{features.dtype} of shape {features.shape}"
        )
    for key in ("labels", "offsets", "qids"):
        if arrays[key].dtype.kind not in "iufb":
            raise UserError(f"{folder / key}.npy holds {arrays[key].dtype}, not numbers; {_NEEDS}")
    qids = _integers(arrays["qids"], folder / "qids.npy")
    offsets = np.asarray(arrays["offsets"], dtype=np.int64)
    if len(offsets) and (np.diff(offsets) < 0).any():
        raise UserError(f"{folder / 'offsets.npy'}: offsets must not decrease")
    try:
        split = RankingSplit(
            features,
            arrays["labels"],
            offsets,
            qids,
            name,
        )
    except (ValueError, IndexError) as exc:
        raise UserError(f"{folder}: arrays do not fit together ({exc}); {_NEEDS}") from None
    check_labels(np.asarray(split.labels), folder / "labels.npy")
    return split


def _integers(values: np.ndarray, path: Path) -> np.ndarray:
    """``qids.npy`` as int64: a float that is no integer, or beyond 2^53 (where float64 stops
    telling integers apart; int64 would wrap), is named with its index."""
    values = np.asarray(values)
    with np.errstate(invalid="ignore"):
        if values.dtype.kind == "f":
            bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) > 2**53)
        elif values.dtype.kind == "u":
            bad = values > np.iinfo(np.int64).max
        else:
            bad = np.zeros(len(values), dtype=bool)
    wrong = np.flatnonzero(bad)
    if len(wrong):
        i = int(wrong[0])
        raise UserError(f"{path}: qid {i} is {values[i]}, not an integer qid of int64 (up to 2^53 "
                        "as a float)")  # fmt: skip
    return values.astype(np.int64)


def check_labels(labels: np.ndarray, where: object, *, rows: np.ndarray | None = None) -> None:
    """Refuse a label outside the relevance grades ``0..MAX_LABEL`` (or NaN), naming its row
    (``rows[i]``, the file's row of ``labels[i]``, when given)."""
    item = label_outside_grades(labels)
    if item is not None:
        row = item if rows is None else int(rows[item])
        raise UserError(
            f"{where}: row {row}: label {labels[item]:g} is outside the relevance grades "
            f"0..{MAX_LABEL} (NDCG's gain is 2^label - 1)"
        )


@dataclass(frozen=True)
class Missing:
    """Where a split's features are missing (null or NaN): ``counts`` ``[n_features]`` per
    column, and the first missing value's column index and row (the row of the file: of the
    table, of ``features.npy``); None when nothing is missing."""

    counts: list[int]
    first: tuple[int, int] | None

    @property
    def any(self) -> bool:
        return self.first is not None

    def as_dict(self) -> dict:
        return {"counts": list(self.counts), "first": list(self.first) if self.first else None}

    @classmethod
    def from_dict(cls, info: dict | None, n_features: int) -> Missing:
        if not info:
            return cls([0] * n_features, None)
        first = info.get("first")
        return cls([int(c) for c in info["counts"]], tuple(first) if first else None)


def check_values(
    values: np.ndarray,
    path: Path | str,
    names: list[str],
    rows: np.ndarray | None,
    columns: list[np.ndarray] | None = None,
) -> Missing:
    """Refuse an infinite value or one beyond float32 in ``values`` ``[n, d]`` (float32: both
    became inf), naming the column and the row of the file (``rows[i]``: the file's row of
    ``values[i]``; None: the same); count the missing (NaN) values. ``columns``: the source
    columns, to quote the value as written."""
    counts = np.zeros(values.shape[1], dtype=np.int64)
    first: tuple[int, int] | None = None
    for start in range(0, len(values), _CHECK_ROWS):
        block = values[start : start + _CHECK_ROWS]
        if np.isfinite(block).all():
            continue
        infinite = np.flatnonzero(np.isinf(block).any(axis=1))
        if len(infinite):
            i = int(infinite[0])
            j = int(np.flatnonzero(np.isinf(block[i]))[0])
            row = start + i if rows is None else int(rows[start + i])
            shown = columns[j][row] if columns is not None else block[i, j]
            what = "infinite" if np.isinf(shown) else "beyond float32"
            raise UserError(
                f"{path}: column {names[j]!r}, row {row}: {shown} is {what} (the features are "
                "stored as float32); rescale or clip the column (a missing value is null or NaN)"
            )
        nan = np.isnan(block)
        counts += nan.sum(axis=0)
        flat = np.argwhere(nan)
        # the first missing value by file row (rows in qid order need not be in file order)
        file_rows = start + flat[:, 0] if rows is None else rows[start + flat[:, 0]]
        k = int(np.argmin(file_rows))
        if first is None or file_rows[k] < first[1]:
            first = (int(flat[k, 1]), int(file_rows[k]))
    return Missing([int(c) for c in counts], first)


_CHECK_ROWS = 1 << 15  # rows checked at a time


def write_arrays(
    split: RankingSplit,
    folder: str | Path,
    *,
    meta: dict | None = None,
    what: str = "arrays",
    key: str = "run_dir",
) -> None:
    """Write ``split`` into ``folder`` in the form `read_arrays` reads (and ``meta`` as
    ``meta.json``): a temp folder beside it, renamed into place, so a crash leaves the old
    folder or the new one, never half. An `OSError` is a `UserError` naming ``what`` is written
    and advising ``key=`` (`core.files.file_error`)."""
    folder = Path(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_folder_beside(folder)  # the umask's mode, not mkdtemp's 0o700
    except OSError as exc:
        raise file_error(exc, f"write {what} in", folder.parent, key=key) from None
    try:
        np.save(tmp / "features.npy", np.ascontiguousarray(split.features, dtype=np.float32))
        np.save(tmp / "labels.npy", np.ascontiguousarray(split.labels, dtype=np.float32))
        np.save(tmp / "offsets.npy", np.asarray(split.offsets, dtype=np.int64))
        np.save(tmp / "qids.npy", np.asarray(split.qids, dtype=np.int64))
        if meta is not None:
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise file_error(exc, f"write {what} in", folder, key=key) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_NEEDS = (
    "features.npy float32 [N, d], labels.npy [N], offsets.npy int64 [Q + 1] from 0 to N, "
    "qids.npy [Q]"
)
