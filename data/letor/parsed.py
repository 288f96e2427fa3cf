"""What one block of a LETOR file parses into (`Parsed`) and the limits every parser checks.

The three parsers (`data.letor.dense`, `data.letor.tokens`, `data.letor.lines`) give the same
`Parsed` for the same block and refuse the same lines: labels and values finite in float32
(`FLOAT32_MAX`), qids integral below `MAX_QID`, 1-based feature indices up to
`MAX_FEATURE_INDEX`, none twice on a line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

# ':' and CR become spaces; "qid:" is blanked separately so positions stay aligned.
SEPARATORS = bytes.maketrans(b":\r\t\v\f", b"     ")
# `parse_dense` blanks the letters of "qid:" too, having checked they appear nowhere else.
SEPARATORS_QID = bytes.maketrans(b":\r\t\v\fqid", b"        ")
EXPECTED = "expected '<label> qid:<int> <index>:<value> ...'"
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_QID = 2**53
MAX_FEATURE_INDEX = 1_000_000  # dense [n_items, n_features] float32: more is a mistake
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


@dataclass
class Parsed:
    """Items of one chunk, as flat arrays. Inside this package ``width`` may stand for ``rows``
    and ``cols`` (both None then): every line holds features ``0..width-1`` in that order, a
    quarter of the bytes to send from a worker; `parse_chunks` yields them filled in."""

    labels: np.ndarray  # [n_lines] float64
    qids: np.ndarray  # [n_lines] float64 (integral); empty without qid
    rows: np.ndarray  # [nnz] int64, line index within the chunk
    cols: np.ndarray  # [nnz] int64, 0-based feature index
    values: np.ndarray  # [nnz] float64
    line_numbers: np.ndarray  # [n_lines] int64, 1-based line numbers in the file
    has_qid: bool
    width: int | None = None

    def filled(self) -> Parsed:
        """This chunk with ``rows`` and ``cols`` spelled out."""
        if self.width is None:
            return self
        n = len(self.labels)
        rows = np.repeat(np.arange(n, dtype=np.int64), self.width)
        cols = np.tile(np.arange(self.width, dtype=np.int64), n)
        return replace(self, rows=rows, cols=cols, width=None)


def parsed_width(parsed: Parsed) -> int:
    if parsed.width is not None:
        return parsed.width
    return int(parsed.cols.max()) + 1 if len(parsed.cols) else 0


def numbers_ok(labels: np.ndarray, qids: np.ndarray, values: np.ndarray) -> bool:
    """Labels and values within float32 (NaN fails too), qids integral and below `MAX_QID`:
    what the vectorized paths accept; the slow path names the line of anything else."""
    return bool(
        np.all(np.abs(values) <= FLOAT32_MAX)
        and np.all(np.abs(labels) <= FLOAT32_MAX)
        and not np.any(qids != np.floor(qids))
        and np.all(np.abs(qids) < MAX_QID)
    )


def indices_ok(rows: np.ndarray, cols: np.ndarray) -> bool:
    """1-based integral feature indices up to `MAX_FEATURE_INDEX`, none twice on a line."""
    return not (
        np.any(cols < 1)
        or np.any(cols > MAX_FEATURE_INDEX)
        or np.any(cols != np.floor(cols))
        or _has_duplicate_index(rows, cols)
    )


def _has_duplicate_index(rows: np.ndarray, cols: np.ndarray) -> bool:
    """Whether a line names a feature twice; lines with increasing indices (all LETOR files)
    are checked without sorting."""
    if len(cols) < 2:
        return False
    same_line = rows[1:] == rows[:-1]
    if not np.any(same_line & (cols[1:] <= cols[:-1])):
        return False
    keys = rows * (MAX_FEATURE_INDEX + 1) + cols.astype(np.int64)
    return len(np.unique(keys)) != len(keys)
