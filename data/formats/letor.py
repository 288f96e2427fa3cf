"""``data.format=letor`` (the default): LETOR/SVMlight text files, plain or ``.gz``.

``data.path`` holds a file per split (``data.splits``; ``.txt``, ``.txt.gz`` and ``.gz`` are
tried after the name itself), parsed once into the cache (`scarce_ltr.data.cache`). Predict
streams such files piece by piece (`scarce_ltr.data.letor.stream`); it is predict's last resort
for an input no other format claims, a file or a folder of split files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import refuse_special_input
from scarce_ltr.data.cache import load_split
from scarce_ltr.data.formats.base import DataFormat, DataKeys, LoadedData, check_label_range

NAME = "letor"


@dataclass(frozen=True)
class Options:
    """LETOR text reads no key of its own: ``data.path`` and ``data.splits`` name its files,
    and each line says its label, qid and features."""

    def check(self) -> None:
        """Nothing to check: no key of its own."""


def find(cfg: DataKeys, folder: Path, stem: str) -> Path | None:
    candidates = [folder / c for c in (stem, f"{stem}.txt", f"{stem}.txt.gz", f"{stem}.gz")]
    for path in candidates:
        if path.is_file():
            return path
    for path in candidates:  # not "missing": a folder (a FIFO, ...) stands where the file belongs
        refuse_special_input(path, "a LETOR file (plain or .gz)")
        if path.is_dir():
            raise UserError(
                f"{path} is a folder; a LETOR file (plain or .gz) is expected there "
                "(data=arrays reads a folder of .npy arrays per split)"
            )
    return None


def load(cfg: DataKeys, files: dict[str, Path]) -> LoadedData:
    """Each split's file through the parsed cache, its labels checked (naming the line)."""
    splits = {split: load_split(path, name=split) for split, path in files.items() if path}
    for split, path in files.items():
        check_label_range(splits[split].labels, path)
    return LoadedData(splits, files)


def predicts(path: Path) -> bool:
    """Predict's last resort: any file, or a folder of split files (predict names what a
    folder lacks)."""
    return True


FORMAT = DataFormat(
    NAME, Options, pattern="[.txt|.txt.gz]", kinds="files (plain text or .gz)",
    find=find, load=load, predicts=predicts,
)  # fmt: skip
