"""``data.format=arrays`` (``data=arrays``): a folder per split of ``.npy`` arrays in the
parsed cache's own form (`scarce_ltr.data.arrays`), memory-mapped, never parsed. The estimators
of `scarce_ltr.api` write their data sets in this form. Predict does not read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scarce_ltr.data.arrays import check_values, read_arrays, split_folder
from scarce_ltr.data.formats.base import DataFormat, DataKeys, LoadedData, checked

NAME = "arrays"


@dataclass(frozen=True)
class Options:
    """Arrays read no key of their own: ``data.path`` and ``data.splits`` name the folders, and
    the arrays are the cache's (features, labels, offsets, qids)."""

    def check(self) -> None:
        """Nothing to check: no key of its own."""


def find(cfg: DataKeys, folder: Path, stem: str) -> Path | None:
    return split_folder(folder, stem)


def load(cfg: DataKeys, files: dict[str, Path]) -> LoadedData:
    """Each split's arrays, checked as they are read; missing values (NaN) counted."""
    splits = {split: read_arrays(path, name=split) for split, path in files.items() if path}
    missing = {
        s: check_values(
            split.features,
            files[s] / "features.npy",
            [str(j) for j in range(split.n_features)],
            None,
        )
        for s, split in splits.items()
    }
    return checked(LoadedData(splits, files, None, missing))


FORMAT = DataFormat(
    NAME, Options, pattern="/ (a folder holding features.npy)", kinds="folders of .npy arrays",
    find=find, load=load,
)  # fmt: skip
