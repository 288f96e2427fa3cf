"""The quickest parse, for blocks of dense lines (every line the same features, no comment or
blank line: MSLR, Yahoo): a check of the line structure from colon and blank positions, then
numpy's C text reader."""

from __future__ import annotations

import functools
import io
import warnings

import numpy as np

from scarce_ltr.data.letor.parsed import (
    MAX_FEATURE_INDEX,
    SEPARATORS,
    SEPARATORS_QID,
    Parsed,
    indices_ok,
    numbers_ok,
)

# Bytes of a plain dense block: printable ASCII, blanks, tabs, CR and LF.
_PLAIN = bytes(range(32, 127)) + b"\t\r\n"
_MAX_DENSE_PAIRS = 1 << 16  # wider dense lines take the token path (a record type per width)


def parse_dense(block: bytes, first_line: int, has_qid: bool) -> Parsed | None:
    """Parse of a block whose lines all give the same number of features (MSLR, Yahoo, any
    file written dense) and hold no blank line, comment or odd byte; None for anything else.

    numpy's C text reader (`np.loadtxt`) converts the tokens with CPython's own correctly
    rounded ``PyOS_string_to_double``, so every value is what ``float(token)`` gives; qids and
    indices are read as integers (`_dense_dtype`), so ``1.0`` there is refused. The line
    structure is checked from colon and whitespace positions: every colon sits inside a word,
    no word holds two, and each line has ``P + qid`` colons with the first one ending ``qid:``
    after one label word. With the field count that `np.loadtxt` enforces (1 + qid + 2P per
    line), that leaves only ``<label> [qid:<q>] <i>:<v> ... <i>:<v>``.
    """
    if not block or b"#" in block or block.translate(None, _PLAIN):
        return None
    raw = np.frombuffer(block, dtype=np.uint8)
    newline = np.flatnonzero(raw == 10)
    n = len(newline)
    colon = np.flatnonzero(raw == 58)
    # The letters of "qid:" appear nowhere else, so blanking them leaves the qid as a token.
    n_qid = n if has_qid else 0
    if n == 0 or len(colon) % n or any(block.count(c) != n_qid for c in (b"q", b"i", b"d")):
        return None
    n_pairs = len(colon) // n - has_qid
    if n_pairs < 0 or not _words_in_place(raw, newline, colon, has_qid):
        return None
    if n_pairs > _MAX_DENSE_PAIRS:
        return None
    table = _read_table(block, has_qid, n_pairs)
    if table is None or table.shape != (n,):
        return None
    return _from_table(table, first_line, has_qid, n_pairs)


def _words_in_place(raw: np.ndarray, newline: np.ndarray, colon: np.ndarray, has_qid: bool) -> bool:
    """Whether every line of ``raw`` starts with a word, holds as many colons as the others,
    each inside a word and none two in one, and opens with a label word and then, with
    ``has_qid``, a word ending ``qid:``."""
    n = len(newline)
    per_line = len(colon) // n
    line_start = np.concatenate(([0], newline[:-1] + 1))
    space = raw <= 32  # blanks, tabs, CR and LF: the other control bytes were refused
    if np.any(space[line_start]):
        return False  # a blank line or leading blanks: the general path numbers them
    if not per_line:
        return True
    by_line = colon.reshape(n, per_line)
    first = by_line[:, 0]
    if np.any(first <= line_start) or np.any(by_line[:, -1] >= newline):
        return False  # not exactly per_line colons on every line
    if np.any(space[colon - 1]) or np.any(space[colon + 1]):
        return False
    # Whether a blank lies between each colon and the next (the last segment holds an LF).
    if not np.all(np.logical_or.reduceat(space, colon)):
        return False  # two colons in one word
    if has_qid:
        return not (
            np.any(raw[first - 1] != ord("d"))
            or np.any(raw[first - 2] != ord("i"))
            or np.any(raw[first - 3] != ord("q"))
            or np.any(first - 4 <= line_start)
            or np.any(~space[first - 4])
        )
    # False when the label word holds a colon.
    return bool(
        np.all(np.logical_or.reduceat(space, np.stack([line_start, first], 1).ravel())[::2])
    )


def _read_table(block: bytes, has_qid: bool, n_pairs: int) -> np.ndarray | None:
    """``block`` through `np.loadtxt` as records of `_dense_dtype`; None when a token is no
    number (no integer where one belongs) or a line has another field count."""
    text = block.translate(SEPARATORS_QID if has_qid else SEPARATORS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return np.loadtxt(
                io.BytesIO(text), dtype=_dense_dtype(has_qid, n_pairs), comments=None, ndmin=1
            )
    except (ValueError, Warning):  # a token that is no number (no integer), a column count off
        return None


def _from_table(table: np.ndarray, first_line: int, has_qid: bool, n_pairs: int) -> Parsed | None:
    """The `Parsed` lines of ``table`` ``[n]`` (records of `_dense_dtype`); ``width`` stands for
    the rows and columns when every line holds features ``1..n_pairs`` in order. None when a
    number is out of range or an index repeats or is out of range."""
    n = len(table)
    head = 2 if has_qid else 1
    # Every field is 8 bytes: the records are rows of one [n, fields] table, read both ways.
    as_float = table.view(np.float64).reshape(n, head + 2 * n_pairs)
    as_int = table.view(np.int64).reshape(n, head + 2 * n_pairs)
    labels = as_float[:, 0]
    qids = as_int[:, 1].astype(np.float64) if has_qid else np.zeros(0)
    values = as_float[:, head + 1 :: 2].ravel()
    if not numbers_ok(labels, qids, values):
        return None
    line_numbers = np.arange(first_line, first_line + n, dtype=np.int64)
    labels, qids = np.ascontiguousarray(labels), np.ascontiguousarray(qids)
    if n_pairs <= MAX_FEATURE_INDEX and np.array_equal(
        as_int[:, head::2], np.broadcast_to(np.arange(1, n_pairs + 1), (n, n_pairs))
    ):
        return Parsed(labels, qids, None, None, values, line_numbers, has_qid, n_pairs)  # type: ignore[arg-type]
    cols = as_int[:, head::2].ravel()
    rows = np.repeat(np.arange(n, dtype=np.int64), n_pairs)
    if not indices_ok(rows, cols):
        return None
    return Parsed(labels, qids, rows, cols.astype(np.int64) - 1, values, line_numbers, has_qid)


@functools.lru_cache(maxsize=8)
def _dense_dtype(has_qid: bool, n_pairs: int) -> np.dtype:
    """Record of one dense line: float64 label and values, int64 qid and indices. numpy's
    integer reader takes ``[+-]?<digits>`` only, so ``qid:1.0`` and ``1.0:<value>`` are
    refused here as on the slow path (reading float columns would take them as 1), and it
    reads integers faster than floats: ~40 % off `np.loadtxt` on an MSLR block."""
    head = 2 if has_qid else 1
    kinds = ["f8", "i8"][:head] + ["i8", "f8"] * n_pairs
    return np.dtype([(f"f{i}", kind) for i, kind in enumerate(kinds)])
