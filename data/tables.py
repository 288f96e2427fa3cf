"""Tables on the command line: ``data=table`` reads Parquet files and ``.npz`` columns.

``data.path=<folder>`` holds each split as ``<name>.parquet`` (or ``.pq``), ``<name>.npz`` (one
1-D array per column, as ``np.savez(path, **columns)`` writes) or a folder ``<name>/`` of
Parquet parts; or all splits in the folder's one table, with ``data.split_column=<column>``
naming each row's split (its values: ``data.splits``). A table has one row per item:
``data.qid`` (default ``qid``) and ``data.label`` (``label``) columns, and the features:
``data.features=[...]`` in that order, or every other numeric column of the train table in its
order. The splits' columns are matched by name (`scarce_ltr.data.datasets` gives vali and test
train's feature names): their order is free, a column train has and another split lacks is an
error, one only another split has is named in a warning and left out. Rows may come in any qid
order: they are grouped stably (QGs by ascending qid, a QG's rows in table order).

A null (or NaN) feature value is a missing value: the table's `Missing` (counted here, kept in
the cache) says where, and `scarce_ltr.data.pipeline` lets the trees take it and stops the deep
models naming the column and row. An infinite value, or one beyond float32 (the features are
stored as float32), is refused naming the file, the column and the row; so are a label that is no
relevance grade, a qid that is no integer (or beyond 2^53, where float64 stops holding
integers), a column name given twice and a file that cannot be read.

Each table is read once into the parsed cache (``$LTR_CACHE_DIR``, the LETOR files' cache) in
its own form (`scarce_ltr.data.arrays`), reloaded memory-mapped, and read again when the content
of the table (any of its parts) or the columns asked for change; each entry is built under its
lock. Parquet is read through pyarrow, the
optional extra ``parquet`` (``pip install 'scarce-ltr[parquet]'``; ``./run.sh`` installs it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import refuse_special_input
from scarce_ltr.data.arrays import Missing, check_labels, check_values, read_arrays, write_arrays
from scarce_ltr.data.cache import content_hash, default_cache_root, entry_lock
from scarce_ltr.data.ranking_split import MAX_LABEL, QidGroups, RankingSplit
from scarce_ltr.data.table_qids import integer_qids

TABLE_VERSION = 3  # bump when the reading changes (3: values checked, missing counted), so
# tables are read again
SUFFIXES = (".parquet", ".pq", ".npz")
PARQUET_MISSING = (
    "reading Parquet needs pyarrow, the optional extra 'parquet': pip install "
    "'scarce-ltr[parquet]' (./run.sh installs it), or give the table as .npz"
)


def find_table(folder: Path, stem: str) -> Path | None:
    """The table of a split: ``<stem>.parquet|.pq|.npz``, ``<stem>`` itself, or a folder of
    Parquet parts."""
    for candidate in (*(folder / f"{stem}{s}" for s in SUFFIXES), folder / stem):
        if candidate.suffix in SUFFIXES:  # a FIFO so named: said, not "missing"
            refuse_special_input(candidate, "a Parquet or .npz table")
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


@dataclass(frozen=True)
class LoadedTable:
    """A table's split, its feature columns' names, its other numeric columns (not features)
    and where its features are missing."""

    split: RankingSplit
    names: list[str]
    others: list[str]
    missing: Missing


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
    columns = dict(qid=qid, label=label, features=features, split=split)
    return open_table(path, name=name, cache_root=cache_root, **columns).split


def open_table(
    path: str | Path,
    *,
    name: str,
    qid: str = "qid",
    label: str = "label",
    features: list[str] | None = None,
    split: tuple[str, str] | None = None,
    cache_root: Path | None = None,
    reference: str | None = None,
) -> LoadedTable:
    """`load_table` with the names of its columns and its missing values. ``reference``: the
    file ``features`` were taken from (train's table), for the message naming a column this
    table lacks."""
    source = Path(path).resolve()
    _check_roles(source, qid, label, features, split)  # before the cache: an entry may exist
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
            info = json.loads(meta.read_text())
            current = info.get("stamp") == stamp
        except (OSError, ValueError):
            current = False
        if not current:
            columns = dict(qid=qid, label=label, features=features, split=split)
            loaded = read_table(source, name=name, reference=reference, **columns)
            info = {
                "stamp": stamp,
                "n_items": loaded.split.n_items,
                "feature_names": loaded.names,
                "other_columns": loaded.others,
                "missing": loaded.missing.as_dict(),
            }
            what = "the parsed-data cache (LTR_CACHE_DIR)"
            write_arrays(loaded.split, target, meta=info, what=what, key="LTR_CACHE_DIR")
        data = read_arrays(target, name=name)
        missing = Missing.from_dict(info.get("missing"), data.n_features)
        return LoadedTable(data, info["feature_names"], info.get("other_columns", []), missing)


def _check_roles(path: Path, qid: str, label: str, features, split) -> None:
    """Refuse one column in two roles (qids read as labels, the label as a feature) or listed
    twice in data.features."""
    twice = sorted({c for c in features or [] if list(features).count(c) > 1})
    if twice:
        raise UserError(f"{path}: data.features lists {', '.join(map(repr, twice))} twice")
    named = [("data.qid", qid), ("data.label", label)]
    named += [("data.split_column", split[0])] if split else []
    for i, (role, column) in enumerate(named):
        same = [other for other, c in named[:i] if c == column]
        if same:
            raise UserError(f"{path}: {same[0]} and {role} are both '{column}'; give each its "
                            "own column")  # fmt: skip
        if column in (features or []):
            raise UserError(
                f"{path}: data.features lists '{column}', the {role} column; a feature must be "
                "another column (drop it from data.features)"
            )


def read_table(
    path: Path,
    *,
    name: str,
    qid: str,
    label: str,
    features: list[str] | None,
    split: tuple[str, str] | None = None,
    reference: str | None = None,
) -> LoadedTable:
    """The split of a table (no cache), its feature columns' names and its missing values,
    checked."""
    table = Table.open(path)
    roles = [("data.qid", qid), ("data.label", label)]
    for role, column in roles + ([("data.split_column", split[0])] if split else []):
        if column not in table.names:
            raise UserError(
                f"{path}: no {role} column '{column}'; its columns: {', '.join(table.names)} "
                f"(give {role}=<column>)"
            )
    taken = (qid, label, split[0] if split else None)
    numeric = [c for c in table.names if c not in taken and table.numeric(c)]
    if features:
        absent = [c for c in features if c not in table.names]
        if absent and reference:
            raise UserError(
                f"{path} lacks the column(s) {', '.join(map(repr, absent))} of {reference} "
                f"(the splits' columns are matched by name); its columns: "
                f"{', '.join(table.names)}"
            )
        if absent:
            raise UserError(
                f"{path}: no column {', '.join(map(repr, absent))} of data.features; its "
                f"columns: {', '.join(table.names)}"
            )
        bad = [c for c in features if not table.numeric(c)]
        if bad:
            what = f"numeric in {reference}" if reference else "in data.features"
            raise UserError(
                f"{path}: column(s) {', '.join(map(repr, bad))} ({what}) hold "
                f"{', '.join(table.kind(c) for c in bad)}, not numbers"
            )
        chosen = list(features)
    else:
        chosen = numeric
        if not chosen:
            raise UserError(f"{path}: no numeric column besides {qid} and {label}")
    if not table.numeric(label):
        raise UserError(
            f"{path}: the data.label column '{label}' holds {table.kind(label)}, not relevance "
            f"grades (numbers 0..{MAX_LABEL})"
        )
    table.load([qid, label, *chosen, *([split[0]] if split else [])])
    qids = integer_qids(table.column(qid), path, qid)
    rows = _rows(table, path, split, qids)  # None: every row, in qid order already
    if not len(qids if rows is None else rows):
        raise UserError(f"{path}: no rows{f' with {split[0]}={split[1]}' if split else ''}; "
                        f"the {name} split needs at least one QG")  # fmt: skip
    labels = table.column(label).astype(np.float64)
    check_labels(labels if rows is None else labels[np.sort(rows)], f"{path} (column {label})",
                 rows=None if rows is None else np.sort(rows))  # fmt: skip
    qids = qids if rows is None else qids[rows]
    values = feature_matrix([table.column(c) for c in chosen], rows, len(qids))
    missing = check_values(values, path, chosen, rows, [table.column(c) for c in chosen])
    labels = (labels if rows is None else labels[rows]).astype(np.float32)
    groups = QidGroups(qids)  # the rows are in qid order already: only offsets and qids
    others = [c for c in numeric if c not in chosen]
    split_data = RankingSplit(values, labels, groups.offsets, groups.qids, name)
    return LoadedTable(split_data, chosen, others, missing)


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
        with np.errstate(over="ignore"):  # beyond float32 becomes inf: `check_values` names it
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

    def __init__(self, names: list[str], load, numeric, kind) -> None:
        self.names, self._load, self._numeric, self._kind = names, load, numeric, kind
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
        _refuse_repeated(path, names)

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

        return cls(names, load, numeric, lambda column: str(schema.field(column).type))

    @classmethod
    def _npz(cls, path: Path) -> Table:
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = dict(archive)
        except Exception as exc:  # zipfile, zlib and numpy each raise their own
            raise UserError(f"{path}: not readable as .npz ({type(exc).__name__}: {exc})") from None
        if not isinstance(arrays, dict):
            raise UserError(f"{path}: one array, not columns; save one array per column")
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

        return cls(list(arrays), lambda columns: arrays, numeric, lambda c: str(arrays[c].dtype))

    def numeric(self, column: str) -> bool:
        return self._numeric(column)

    def kind(self, column: str) -> str:
        """The column's type, for messages (``string``, ``list<item: int64>``, ``<U4``)."""
        return self._kind(column)

    def load(self, columns: list[str]) -> None:
        """Read these columns (a Parquet file is read once, its other columns never)."""
        self._columns = self._load(columns)

    def column(self, column: str) -> np.ndarray:
        assert self._columns is not None, "load() the columns first"
        data = self._columns[column]
        if isinstance(data, np.ndarray):
            return data
        data = self._columns.column(column)
        if data.null_count and not _is_float(data.type):
            import pyarrow as pa

            # null in an integer or boolean column: NaN (missing), not None in an object array
            data = data.cast(pa.float64())
        return np.asarray(data.to_numpy(zero_copy_only=False))


def _is_float(kind) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_floating(kind))


def _refuse_repeated(path: Path, names: list[str]) -> None:
    """A column name given twice: which column is meant cannot be told."""
    seen: set[str] = set()
    twice = [n for n in names if n in seen or seen.add(n)]
    if twice:
        raise UserError(
            f"{path}: column name(s) {', '.join(map(repr, dict.fromkeys(twice)))} appear more "
            "than once; rename or drop the copies"
        )


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
