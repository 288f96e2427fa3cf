"""Query groups (QGs) of a LETOR file: from the qid of each line, or, for LightGBM-style files
without ``qid:``, from the ``<file>.query`` file beside it (one QG size per line)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor.lines import binary_problem
from scarce_ltr.data.letor.parsed import UTF16_BOMS


def groups_from_qids(
    line_qids: np.ndarray, line_numbers: np.ndarray, path: Path
) -> tuple[np.ndarray, np.ndarray]:
    """QG offsets from per-line qids; a qid that comes back after another one is an error."""
    change = np.flatnonzero(line_qids[1:] != line_qids[:-1]) + 1
    starts = np.concatenate(([0], change))
    group_qids = line_qids[starts]
    _, first_seen = np.unique(group_qids, return_index=True)
    if len(first_seen) != len(group_qids):
        seen_before = np.ones(len(group_qids), dtype=bool)
        seen_before[first_seen] = False
        bad = int(np.flatnonzero(seen_before)[0])
        raise DataFormatError(
            path,
            int(line_numbers[starts[bad]]),
            f"qid {group_qids[bad]} appears again after other qids "
            "(the items of a query group must be on consecutive lines)",
        )
    offsets = np.concatenate((starts, [len(line_qids)])).astype(np.int64)
    return offsets, group_qids.astype(np.int64)


def query_file_for(path: Path) -> Path:
    return path.with_name(path.name + ".query")


def offsets_from_query_file(path: Path, n_items: int) -> np.ndarray:
    sizes = query_sizes(path)
    check_query_total(path, int(sizes.sum()), n_items)
    return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def query_sizes(path: Path) -> np.ndarray:
    """The QG sizes in the ``.query`` file beside ``path`` (one positive integer per line)."""
    query_path = query_file_for(path)
    if not query_path.is_file():
        raise DataFormatError(
            path, None, f"lines have no qid: and there is no {query_path.name} file of group sizes"
        )
    try:
        data = query_path.read_bytes()
    except OSError as exc:
        raise DataFormatError(query_path, None, f"cannot be read ({exc.strerror})") from None
    if data.startswith(UTF16_BOMS):
        raise DataFormatError(query_path, 1, binary_problem(data.split(b"\n", 1)[0]))
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    sizes = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "\0" in line:
            raise DataFormatError(query_path, number, binary_problem(line.encode()))
        if not line.strip():
            continue
        size = line.strip()
        digits = size.lstrip("0")  # int() refuses strings of over 4300 digits
        if not re.fullmatch(r"[0-9]+", size) or not 1 <= len(digits) <= 18:
            shown = size if len(size) <= 40 else f"{size[:40]}..."
            raise DataFormatError(
                query_path, number, f"'{shown}' is not a group size (a positive integer)"
            )
        sizes.append(int(digits))
    return np.array(sizes, dtype=np.int64)


def check_query_total(path: Path, total: int, n_items: int) -> None:
    if total != n_items:
        raise DataFormatError(
            query_file_for(path),
            None,
            f"group sizes add up to {total}, but {path.name} has {n_items} items",
        )
