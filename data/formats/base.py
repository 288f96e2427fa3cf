"""What every data format module exports, and what the formats share.

A format (`scarce_ltr.data.formats.FORMATS`) says how a data set's splits are stored. Its module
exports ``NAME`` (the ``data.format`` value), ``Options`` (a frozen dataclass whose fields are
the ``data.*`` keys it reads beside ``data.path`` and ``data.splits``, with ``check()``) and
``FORMAT``, a `DataFormat`: how a split's file is found and how the splits are read, and which
inputs ``predict`` reads as this format. `scarce_ltr.data.datasets` and
`scarce_ltr.serving.predict` dispatch through the registry; neither names a format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

from scarce_ltr.core.errors import DataFormatError, UserError
from scarce_ltr.data.arrays import Missing
from scarce_ltr.data.letor import line_of_item
from scarce_ltr.data.ranking_split import MAX_LABEL, RankingSplit, label_outside_grades


class DataKeys(Protocol):
    """The ``data`` section as a format reads it: ``splits`` (each split's file stem; None: a
    vali carved from train) and, by name, the format's own keys, its `Options`' fields (read
    through `DataFormat.options_of`). `scarce_ltr.data.datasets.DataConfig` is one; the formats
    type against this, so that they import nothing of `datasets`, which dispatches to them."""

    @property
    def splits(self) -> Mapping[str, str | None]: ...


@dataclass(frozen=True)
class LoadedData:
    """The raw splits with what their files say beside the values: the feature columns' names
    (a table's; None for LETOR text, arrays and the synthetic data) and, per split, where its
    features are missing (tables and arrays: NaN; LETOR text has no missing value)."""

    splits: dict[str, RankingSplit]
    files: dict[str, Path] = field(default_factory=dict)
    feature_names: list[str] | None = None
    missing: dict[str, Missing] = field(default_factory=dict)

    def missing_column(self, split: str, j: int) -> str:
        """Column ``j`` of ``split`` in messages: a table's name, or the index in features.npy."""
        if self.feature_names is not None:
            return repr(self.feature_names[j])
        return f"{j} of features.npy"


@dataclass(frozen=True)
class DataFormat:
    """One way of storing a data set's splits (see the module docstring)."""

    name: str
    # The frozen dataclass of the data.* keys the format reads (its fields), with check().
    options: type
    # A split's file in the missing-files message, after its stem: "[.txt|.txt.gz]".
    pattern: str
    # What the format reads, in words, for messages: "files (plain text or .gz)".
    kinds: str
    # The file (or folder) holding a split: (config, data folder, the split's stem) -> path or
    # None when absent; a `UserError` when something else stands there.
    find: Callable[[DataKeys, Path, str], Path | None]
    # The splits of the files `find` found ({split: path}), read and checked.
    load: Callable[[DataKeys, dict[str, Path]], LoadedData]
    # Whether predict reads ``data.path`` as this format (None: predict does not read it).
    predicts: Callable[[Path], bool] | None = None
    # Whether ``data.path`` may name one file holding every split (else a file is refused).
    one_file: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        """The ``data.*`` keys (without ``data.``) this format reads beside path and splits."""
        return tuple(f.name for f in fields(self.options))

    def options_of(self, cfg: DataKeys) -> Any:
        """This format's `Options` from ``cfg``, checked."""
        options = self.options(**{key: getattr(cfg, key) for key in self.keys})
        options.check()
        return options


def checked(loaded: LoadedData) -> LoadedData:
    """Refuse an empty split, and a train feature column missing in every row (nothing to
    learn from, nothing to fill it with), naming the file."""
    for s, split in loaded.splits.items():
        if split.n_items == 0:
            raise UserError(f"{loaded.files[s]}: no rows; the {s} split needs at least one QG")
    train = loaded.splits["train"]
    counts = loaded.missing["train"].counts
    empty = [j for j, count in enumerate(counts) if count == train.n_items]
    if empty:
        raise UserError(
            f"{loaded.files['train']}: column {loaded.missing_column('train', empty[0])} is "
            "missing (null or NaN) in every row: nothing to learn from; leave it out"
            + (" (data.features=[...])" if loaded.feature_names is not None else "")
        )
    return loaded


def check_label_range(labels, path: Path, *, first_item: int = 0) -> None:
    """Stop at the first label outside the relevance grades ``0..MAX_LABEL``, naming its line
    (``labels`` are the file's items from ``first_item`` on: a piece of a streamed file)."""
    item = label_outside_grades(labels)
    if item is not None:
        raise DataFormatError(
            path,
            line_of_item(path, first_item + item),
            f"label {float(labels[item]):g} is outside the relevance grades 0..{MAX_LABEL} "
            "(NDCG's gain is 2^label - 1); relabel the file",
        )
