"""``data.format=table`` (``data=table``): Parquet files, folders of Parquet parts, or ``.npz``
files of columns, one row per item (`scarce_ltr.data.tables` reads them into the cache).

Its keys: ``data.qid`` and ``data.label`` (the query-id and label columns), ``data.features``
(the feature columns; ``[]``: train's other numeric columns) and ``data.split_column`` (a column
naming each row's split, all splits in one table; null: a table per split). Predict reads such a
table (`scarce_ltr.serving.predict_table`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.data.formats.base import DataFormat, DataKeys, LoadedData, checked
from scarce_ltr.data.tables import SUFFIXES, find_table, open_table, single_table

NAME = "table"


@dataclass(frozen=True)
class Options:
    """The ``data.*`` keys a table reads (their defaults: `DataConfig`'s)."""

    qid: str = "qid"
    label: str = "label"
    features: list[str] = field(default_factory=list)
    split_column: str | None = None

    def check(self) -> None:
        """A column name is not empty (the roles' clashes need the file: `data.tables`)."""
        for key in ("qid", "label"):
            if not getattr(self, key):
                raise ValueError(f"data.{key} must name a column of the table, got ''")


def find(cfg: DataKeys, folder: Path, stem: str) -> Path | None:
    """A split's table; with ``data.split_column``, the folder's one table (or ``data.path``
    itself, a table holding every split)."""
    split_column = _options(cfg).split_column
    if folder.is_file():  # data.path=<one table>: every split in it, by data.split_column
        if not split_column:
            raise UserError(
                f"data.path={folder} is one table: give data.split_column=<column naming "
                "each row's split>, or data.path=<folder holding a table per split>"
            )
        return folder if folder.suffix in SUFFIXES else None
    return single_table(folder) if split_column else find_table(folder, stem)


def load(cfg: DataKeys, files: dict[str, Path]) -> LoadedData:
    """Train's table first: its feature columns (``data.features``, or its numeric columns)
    are taken by name from vali's and test's, whatever their order."""
    options = _options(cfg)
    columns = dict(qid=options.qid, label=options.label)
    train = open_table(
        files["train"], name="train", split=split_rows(cfg, "train"), features=options.features,
        **columns,
    )  # fmt: skip
    tables = {"train": train}
    reference = None if options.features else str(files["train"])
    for s in ("vali", "test"):
        if s not in files:  # a vali carved from train (data.vali_from_train)
            continue
        tables[s] = open_table(
            files[s], name=s, split=split_rows(cfg, s), features=train.names,
            reference=reference, **columns,
        )  # fmt: skip
        if not options.features and tables[s].others:
            print(
                f"warning: {files[s]}: numeric column(s) {', '.join(map(repr, tables[s].others))}"
                f" not in {files['train']} are left out (the splits' columns are matched by name)",
                file=sys.stderr,
            )
    splits = {s: t.split for s, t in tables.items()}
    missing = {s: t.missing for s, t in tables.items()}
    return checked(LoadedData(splits, files, list(train.names), missing))


def split_rows(cfg: DataKeys, split: str) -> tuple[str, str] | None:
    """``data.split_column``: the column and the value (``data.splits``) of a split's rows."""
    column = _options(cfg).split_column
    return (column, cfg.splits[split]) if column else None


def _options(cfg: DataKeys) -> Options:
    """Table's keys of the data section (`Options`, checked)."""
    return FORMAT.options_of(cfg)


def predicts(path: Path) -> bool:
    """A Parquet or ``.npz`` file, or a folder of Parquet parts."""
    return find_table(path.parent, path.name) == path and (path.is_dir() or path.suffix in SUFFIXES)


FORMAT = DataFormat(
    NAME, Options, pattern="[.parquet|.pq|.npz|/]",
    kinds="tables (Parquet, a folder of Parquet parts, or .npz)",
    find=find, load=load, predicts=predicts, one_file=True,
)  # fmt: skip
