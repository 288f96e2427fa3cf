"""Tables on the command line: ``data=table`` reads Parquet files and ``.npz`` columns.

``data.path=<folder>`` holds each split as ``<name>.parquet`` (or ``.pq``), ``<name>.npz`` (one
1-D array per column, as ``np.savez(path, **columns)`` writes) or a folder ``<name>/`` of
Parquet parts; or all splits in the folder's one table, with ``data.split_column=<column>``
naming each row's split (its values: ``data.splits``). A table has one row per item:
``data.qid`` (default ``qid``) and ``data.label`` (``label``) columns, and the features:
``data.features=[...]`` in that order, or every other numeric column in the table's order. Rows
may come in any qid order: they are grouped stably (QGs by ascending qid, a QG's rows in table
order). NaN in a feature is a missing value.

Each table is read once into the parsed cache (``$LTR_CACHE_DIR``, the LETOR files' cache) in
its own form (`scarce_ltr.data.arrays`), reloaded memory-mapped, and read again when the content
of the table (any of its parts) or the columns asked for change; each entry is built under its
lock. Parquet is read through pyarrow, the
optional extra ``parquet`` (``pip install 'scarce-ltr[parquet]'``; ``./run.sh`` installs it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.data.arrays import check_labels, read_arrays, write_arrays
from scarce_ltr.data.cache import content_hash, default_cache_root, entry_lock
from scarce_ltr.data.ranking_split import QidGroups, RankingSplit

TABLE_VERSION = 2  # bump when the reading changes (2: keyed on content), so tables are read again
SUFFIXES = (".parquet", ".pq", ".npz")
PARQUET_MISSING = (
    "reading Parquet needs pyarrow, the optional extra 'parquet': pip install "
    "'scarce-ltr[parquet]' (./run.sh installs it), or give the table as .npz"
)


def find_table(folder: Path, stem: str) -> Path | None:
    """The table of a split: ``<stem>.parquet|.pq|.npz``, ``<stem>`` itself, or a folder of
    Parquet parts."""
    for candidate in (*(folder / f"{stem}{s}" for s in SUFFIXES), folder / stem):
        if candidate.is_file() and candidate.suffix in SUFFIXES:
            return candidate
        if candidate.is_dir() and _parts(candidate):
            return candidate
    return None


def single_table(folder: Path) -> Path | None:
    """The one table of ``folder`` (``data.split_column``: every split in one table); a folder
    holding several is refused, naming them."""
    if not folder.is_dir():
        return None
    tables = [p for p in sorted(folder.iterdir()) if find_table(folder, p.name) == p]
    if len(tables) > 1:
        names = ", ".join(p.name for p in tables)
        raise UserError(
            f"{folder}: data.split_column takes the folder's one table; it holds {names}"
        )
    return tables[0] if tables else None


def load_table(
    path: str | Path,
    *,
    name: str,
    qid: str = "qid",
    label: str = "label",
    features: list[str] | None = None,
    split: tuple[str, str] | None = None,
    cache_root: Path | None = None,
) -> RankingSplit:
    """The split of a table (its rows whose column ``split[0]`` is ``split[1]`` when given),
    from the cache when it is current."""
    source = Path(path).resolve()
    spec = {"qid": qid, "label": label, "features": list(features or [])}
    spec["split"] = list(split) if split else None
    stamp = {"source": str(source), "files": _file_stamps(source), "columns": spec}
    stamp["version"] = TABLE_VERSION
    key = hashlib.sha1(json.dumps(stamp["columns"] | {"s": str(source)}).encode()).hexdigest()
    target = (cache_root or default_cache_root()) / f"{source.name}-table-{key[:16]}"
    meta = target / "meta.json"
    # One process at a time checks, builds or opens the entry: a sweep's jobs starting together
    # on a new table read it once, and none finds the entry half-built (as `data.cache`).
    with entry_lock(target):
        try:
            current = json.loads(meta.read_text()).get("stamp") == stamp
        except (OSError, ValueError):
            current = False
        if not current:
            columns = dict(qid=qid, label=label, features=features, split=split)
            data, names = read_table(source, name=name, **columns)
            info = {"stamp": stamp, "n_items": data.n_items, "feature_names": names}
            write_arrays(data, target, meta=info)
        return read_arrays(target, name=name)


def read_table(
    path: Path,
    *,
    name: str,
    qid: str,
    label: str,
    features: list[str] | None,
    split: tuple[str, str] | None = None,
) -> tuple[RankingSplit, list[str]]:
    """The split of a table (no cache) and its feature columns' names, checked."""
    table = Table.open(path)
    roles = [("data.qid", qid), ("data.label", label)]
    for role, column in roles + ([("data.split_column", split[0])] if split else []):
        if column not in table.names:
            raise UserError(
                f"{path}: no {role} column '{column}'; its columns: {', '.join(table.names)} "
                f"(give {role}=<column>)"
            )
    if features:
        absent = [c for c in features if c not in table.names]
        if absent:
            raise UserError(
                f"{path}: no column {', '.join(map(repr, absent))} of data.features; its "
                f"columns: {', '.join(table.names)}"
            )
        bad = [c for c in features if not table.numeric(c)]
        if bad:
            raise UserError(f"{path}: data.features {', '.join(map(repr, bad))} not numeric")
        chosen = list(features)
    else:
        taken = (qid, label, split[0] if split else None)
        chosen = [c for c in table.names if c not in taken and table.numeric(c)]
        if not chosen:
            raise UserError(f"{path}: no numeric column besides {qid} and {label}")
    table.load([qid, label, *chosen, *([split[0]] if split else [])])
    qids = integer_qids(table.column(qid), path, qid)
    rows = _rows(table, path, split, qids)  # None: every row, in qid order already
    qids = qids if rows is None else qids[rows]
    values = feature_matrix([table.column(c) for c in chosen], rows, len(qids))
    labels = table.column(label).astype(np.float32)
    labels = labels if rows is None else labels[rows]
    check_labels(labels, f"{path} (column {label}, rows in qid order)")
    groups = QidGroups(qids)  # the rows are in qid order already: only offsets and qids
    return RankingSplit(values, labels, groups.offsets, groups.qids, name), chosen


_BLOCK_ROWS = 1 << 15  # rows filled at a time: the block stays in cache across the columns


def feature_matrix(columns: list[np.ndarray], rows: np.ndarray | None, n: int) -> np.ndarray:
    """``[n, len(columns)]`` float32 rows (``rows`` of each column) filled block by block: 10x
    faster than one strided column at a time through the whole array."""
    values = np.empty((n, len(columns)), dtype=np.float32)
    for start in range(0, n, _BLOCK_ROWS):
        block = values[start : start + _BLOCK_ROWS]
        picked = (
            slice(start, start + _BLOCK_ROWS) if rows is None else rows[start : start + _BLOCK_ROWS]
        )
        for j, column in enumerate(columns):
            block[:, j] = column[picked]
    return values


def _rows(table, path: Path, split, qids: np.ndarray) -> np.ndarray | None:
    """The rows of the split (all without ``split``) in stable qid order; None: all, as they
    are (already in qid order)."""
    rows = None
    if split is not None:
        column, value = split
        values = table.column(column).astype(str)
        rows = np.flatnonzero(values == str(value))
        if not len(rows):
            found = ", ".join(map(str, np.unique(values)[:10]))
            raise UserError(f"{path}: no row has {column}={value} (data.splits); it has {found}")
    chosen = qids if rows is None else qids[rows]
    if rows is None and (len(qids) < 2 or (np.diff(qids) >= 0).all()):
        return None
    order = np.argsort(chosen, kind="stable")
    return order if rows is None else rows[order]


class Table:
    """Column names and columns of a Parquet file, a folder of parts or an ``.npz``."""

    def __init__(self, names: list[str], load, numeric) -> None:
        self.names, self._load, self._numeric = names, load, numeric
        self._columns = None

    @classmethod
    def open(cls, path: Path) -> Table:
        if path.suffix == ".npz":
            return cls._npz(path)
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(f"{path}: {PARQUET_MISSING}") from None
        try:
            dataset = pq.ParquetDataset(str(path)) if path.is_dir() else pq.ParquetFile(str(path))
            schema = dataset.schema if path.is_dir() else dataset.schema_arrow
        except Exception as exc:  # pyarrow's own errors name no common base class
            raise UserError(f"{path}: not readable as Parquet ({exc})") from None
        names = [f.name for f in schema]

        def load(columns: list[str]):
            try:
                return pq.read_table(str(path), columns=list(dict.fromkeys(columns)))
            except Exception as exc:
                raise UserError(f"{path}: not readable as Parquet ({exc})") from None

        def numeric(column: str) -> bool:
            import pyarrow as pa

            kind = schema.field(column).type
            return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind)
                        or pa.types.is_boolean(kind))  # fmt: skip

        return cls(names, load, numeric)

    @classmethod
    def _npz(cls, path: Path) -> Table:
        try:
            arrays = dict(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: not readable as .npz ({exc})") from None
        flat = [k for k, v in arrays.items() if v.ndim != 1]
        if flat:
            raise UserError(f"{path}: {flat[0]!r} is not a column (1-D array), shape "
                            f"{arrays[flat[0]].shape}; save one array per column")  # fmt: skip
        lengths = {len(v) for v in arrays.values()}
        if len(lengths) > 1:
            raise UserError(f"{path}: columns of different lengths {sorted(lengths)}")

        def numeric(column: str) -> bool:
            kind = arrays[column].dtype.kind
            return kind in "iufb"

        return cls(list(arrays), lambda columns: arrays, numeric)

    def numeric(self, column: str) -> bool:
        return self._numeric(column)

    def load(self, columns: list[str]) -> None:
        """Read these columns (a Parquet file is read once, its other columns never)."""
        self._columns = self._load(columns)

    def column(self, column: str) -> np.ndarray:
        assert self._columns is not None, "load() the columns first"
        data = self._columns[column]
        if isinstance(data, np.ndarray):
            return data
        return np.asarray(self._columns.column(column).to_numpy(zero_copy_only=False))


def integer_qids(values: np.ndarray, path: Path, column: str) -> np.ndarray:
    """A table's qid column as int64; `UserError` naming the first row that is no integer."""
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    if values.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)))
        if not len(bad):
            return values.astype(np.int64)
        raise UserError(f"{path}: column {column}: row {int(bad[0])} is {values[bad[0]]}, not "
                        "an integer qid")  # fmt: skip
    raise UserError(f"{path}: column {column} holds {values.dtype}, not integer qids")


def _parts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".parquet", ".pq"))


def _file_stamps(source: Path) -> list[list]:
    """Each file of the table (its parts) with its content's hash: an edit that keeps size and
    modification time (``cp -p``, ``rsync -t``) is read again, as LETOR files are."""
    files = _parts(source) if source.is_dir() else [source]
    try:
        return [[str(f), content_hash(f)] for f in files]
    except OSError as exc:
        raise UserError(f"{source}: not readable ({exc.strerror})") from None
