"""The line-by-line parse in Python: the reference the quicker parsers are tested against, and
the one that names the first bad line of a block and says what was expected."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor.parsed import (
    EXPECTED,
    FLOAT32_MAX,
    MAX_FEATURE_INDEX,
    MAX_QID,
    UTF8_BOM,
    UTF16_BOMS,
    Parsed,
)


def parse_slow(block: bytes, first_line: int, has_qid: bool, path: Path) -> Parsed:
    """Line-by-line parse that raises `DataFormatError` at the first bad line."""
    labels, qids, rows, cols, values, line_numbers = [], [], [], [], [], []
    for offset, raw_line in enumerate(block.split(b"\n")[:-1]):
        number = first_line + offset
        tokens = _line_words(raw_line, path, number)
        if not tokens:
            continue
        text = [t.decode("utf-8", "replace") for t in tokens]
        labels.append(_number(text[0], path, number, "label"))
        features = text[1:]
        if has_qid:
            qids.append(_qid(features, path, number))
            features = features[1:]
        elif features and features[0].startswith("qid:"):
            raise DataFormatError(
                path, number, "qid: found, but earlier lines of this file had none"
            )
        for index, value in _features(features, path, number):
            rows.append(len(labels) - 1)
            cols.append(index - 1)
            values.append(value)
        line_numbers.append(number)
    return Parsed(
        labels=np.asarray(labels, dtype=np.float64),
        qids=np.asarray(qids, dtype=np.float64),
        rows=np.asarray(rows, dtype=np.int64),
        cols=np.asarray(cols, dtype=np.int64),
        values=np.asarray(values, dtype=np.float64),
        line_numbers=np.asarray(line_numbers, dtype=np.int64),
        has_qid=has_qid,
    )


def _line_words(raw_line: bytes, path: Path, number: int) -> list[bytes]:
    """The words of line ``number`` before its comment; an error for binary bytes in it."""
    data = raw_line.split(b"#", 1)[0]
    tokens = data.split()
    if (number == 1 and raw_line.startswith(UTF16_BOMS)) or b"\0" in data:
        raise DataFormatError(path, number, binary_problem(raw_line))
    if UTF8_BOM in data:
        raise DataFormatError(
            path,
            number,
            "UTF-8 byte-order mark (EF BB BF) inside the file, where only text may be "
            "(files joined with cat?); remove it",
        )
    return tokens


def _qid(features: list[str], path: Path, number: int) -> float:
    """The qid of a line whose words after the label are ``features`` (``qid:<int>`` first)."""
    if not features or not features[0].startswith("qid:"):
        raise DataFormatError(path, number, f"missing qid: ({EXPECTED})")
    qid_text = features[0][4:]
    if not re.fullmatch(r"[+-]?\d+", qid_text):
        raise DataFormatError(
            path, number, f"qid '{shown(qid_text)}' is not an integer ({EXPECTED})"
        )
    if _digits(qid_text) > 16 or abs(int(qid_text)) >= MAX_QID:
        raise DataFormatError(
            path, number, f"qid {shown(qid_text)} is out of range (|qid| < 2**53)"
        )
    return float(qid_text)


def _features(features: list[str], path: Path, number: int) -> Iterator[tuple[int, float]]:
    """``(index, value)`` of each ``<index>:<value>`` word of a line, in order; an error at the
    first bad one."""
    seen: dict[int, str] = {}
    for pair in features:
        index_text, sep, value_text = pair.partition(":")
        if not sep or not re.fullmatch(r"[+-]?\d+", index_text):
            raise DataFormatError(
                path, number, f"bad feature '{shown(pair)}' (expected <index>:<value>)"
            )
        # int() refuses thousands of digits; beyond 18 the index is far above the maximum
        index = int(index_text) if _digits(index_text) <= 18 else MAX_FEATURE_INDEX + 1
        if index < 1:
            raise DataFormatError(
                path, number, f"feature index {index} in '{pair}' (indices are 1-based)"
            )
        if index > MAX_FEATURE_INDEX:
            raise DataFormatError(
                path,
                number,
                f"feature index {shown(index_text.lstrip('+'))} in '{shown(pair)}' is above "
                f"{MAX_FEATURE_INDEX:,} "
                "(features are stored dense)",
            )
        if index in seen:
            raise DataFormatError(
                path,
                number,
                f"feature {index} is given twice ({shown(seen[index])} and {shown(value_text)}); "
                "give each feature once per line",
            )
        seen[index] = value_text
        yield index, _number(value_text, path, number, f"value of feature {index}")


def shown(text: str, most: int = 40) -> str:
    """``text`` as a message quotes it: its first ``most`` characters and ``...`` when longer
    (a line may hold megabytes of one word)."""
    return text if len(text) <= most else f"{text[:most]}..."


def _digits(text: str) -> int:
    """Significant digits of an integer's text (``+007`` has one)."""
    return len(text.lstrip("+-").lstrip("0"))


def binary_problem(line: bytes) -> str:
    """What a line holding NUL bytes (or opening with a UTF-16 byte-order mark) looks like:
    UTF-16 text of ASCII characters has a NUL beside every one, about half its bytes."""
    nul = line.count(b"\0")
    if line.startswith(UTF16_BOMS) or 0.3 * len(line) <= nul <= 0.7 * len(line):
        return (
            "the file looks like UTF-16 text (a NUL byte beside every character), not UTF-8; "
            "save it as UTF-8 or ASCII"
        )
    column = line.index(b"\0") + 1
    return (
        f"NUL byte (\\0) at column {column}: the file is binary, or not UTF-8 text, or was "
        "cut short and padded with zeros"
    )


def _number(text: str, path: Path, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataFormatError(
            path, line, f"bad {what} '{shown(text)}' (expected a number)"
        ) from None
    if not np.isfinite(value):
        raise DataFormatError(path, line, f"{what} is '{shown(text)}' (expected a finite number)")
    if abs(value) > FLOAT32_MAX:
        raise DataFormatError(
            path,
            line,
            f"{what} is {shown(text)}, beyond the float32 range it is stored in "
            f"(|x| <= {FLOAT32_MAX:.7g}); rescale it (e.g. log) or drop the line",
        )
    return value
