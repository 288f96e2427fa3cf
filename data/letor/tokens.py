"""The vectorized parse of any block: every word located and converted with numpy, the line
structure checked from word counts and colon positions; None sends the block to the line-by-line
reference (`data.letor.lines`), which names the bad line."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from scarce_ltr.data.letor.parsed import SEPARATORS, Parsed, indices_ok, numbers_ok

_COMMENT = re.compile(rb"#[^\n]*")
_POW10 = 10.0 ** np.arange(19)
_MAX_DIGITS = 15  # mantissas below 2**53: division by 10**k rounds exactly


@dataclass
class _Words:
    """The words of a block with its comments cut: where each lies in ``raw`` (its first and
    last byte), its value and whether it is written as an integer, and how many words each line
    of the block holds (0 for a blank or comment line)."""

    raw: np.ndarray  # [n_bytes] uint8, the block without comments ("qid:" still in it)
    starts: np.ndarray  # [n_words] int64
    ends: np.ndarray  # [n_words] int64
    numbers: np.ndarray  # [n_words] float64
    integer_text: np.ndarray  # [n_words] bool
    per_line: np.ndarray  # [n_lines] int64
    n_qid: int  # times "qid:" appears


def parse_fast(block: bytes, first_line: int, has_qid: bool) -> Parsed | None:
    """Vectorized parse of whole lines; None when anything looks off (the slow path decides)."""
    words = _words(block)
    layout = None if words is None else _layout(words, has_qid)
    if layout is None:
        return None
    data_lines, first_token, index_tokens = layout
    numbers = words.numbers
    cols = numbers[index_tokens]
    values = numbers[index_tokens + 1]
    labels = numbers[first_token]
    qids = numbers[first_token + 1] if has_qid else np.zeros(0)
    if not numbers_ok(labels, qids, values):
        return None
    rows = np.searchsorted(first_token, index_tokens, side="right") - 1
    if not indices_ok(rows, cols):
        return None
    # Line numbers count the lines of the original block, comments included.
    line_numbers = first_line + data_lines
    return Parsed(
        labels=labels,
        qids=qids,
        rows=rows,
        cols=cols.astype(np.int64) - 1,
        values=values,
        line_numbers=line_numbers.astype(np.int64),
        has_qid=has_qid,
    )


def _words(block: bytes) -> _Words | None:
    """The words of ``block`` and their values; None when a word is no number."""
    text = _COMMENT.sub(b"", block)
    n_qid = text.count(b"qid:")
    cleaned = text.replace(b"qid:", b"    ").translate(SEPARATORS)
    raw = np.frombuffer(text, dtype=np.uint8)
    buf = np.frombuffer(cleaned, dtype=np.uint8)
    is_space = (buf == 32) | (buf == 10)
    newline = np.flatnonzero(buf == 10)
    not_space = ~is_space
    starts = np.flatnonzero(not_space & np.concatenate(([True], is_space[:-1])))
    ends = np.flatnonzero(not_space & np.concatenate((is_space[1:], [True])))
    decoded = _decimal_numbers(buf, starts, ends, cleaned)
    if decoded is None:
        return None
    numbers, integer_text = decoded
    # Line of every token and of every line break; blank lines hold no token.
    token_line = np.searchsorted(newline, starts)
    per_line = np.bincount(token_line, minlength=len(newline))
    return _Words(raw, starts, ends, numbers, integer_text, per_line, n_qid)


def _layout(words: _Words, has_qid: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``data_lines`` (the block's lines that hold words), ``first_token`` (the label word of
    each) and ``index_tokens`` (the ``<index>`` word of each ``<index>:<value>``); None unless
    every such line reads ``<label> [qid:<int>] <int>:<value> ...``."""
    raw, starts, ends, n_qid = words.raw, words.starts, words.ends, words.n_qid
    data_lines = np.flatnonzero(words.per_line > 0)
    counts = words.per_line[data_lines]
    head = 2 if has_qid else 1
    if np.any(counts < head) or np.any((counts - head) % 2):
        return None
    first_token = np.concatenate(([0], np.cumsum(counts)[:-1]))
    if has_qid:
        qid_at = np.flatnonzero(
            (raw[:-3] == ord("q"))
            & (raw[1:-2] == ord("i"))
            & (raw[2:-1] == ord("d"))
            & (raw[3:] == ord(":"))
        )
        if n_qid != len(data_lines) or len(qid_at) != n_qid:
            return None
        if np.any(starts[first_token + 1] != qid_at + 4):
            return None
    within = np.arange(len(starts)) - np.repeat(first_token, counts)
    index_tokens = np.flatnonzero((within >= head) & ((within - head) % 2 == 0))
    value_tokens = index_tokens + 1
    n_colons = int(np.count_nonzero(raw == ord(":"))) - (n_qid if has_qid else 0)
    if n_colons != len(index_tokens):
        return None
    if len(index_tokens) and (
        np.any(raw[ends[index_tokens] + 1] != ord(":"))
        or np.any(raw[starts[value_tokens] - 1] != ord(":"))
    ):
        return None
    # qid:1.0 and 1.0:<value> are refused as the slow path refuses them, whatever they equal.
    if not np.all(words.integer_text[index_tokens]) or (
        has_qid and not np.all(words.integer_text[first_token + 1])
    ):
        return None
    return data_lines, first_token, index_tokens


def _decimal_numbers(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, cleaned: bytes
) -> tuple[np.ndarray, np.ndarray] | None:
    """``[n_tokens]`` float64 values of the tokens ``cleaned[starts[i]:ends[i] + 1]`` and
    ``[n_tokens]`` bool, whether each is written as an integer (``[+-]?<digits>``); or None.

    Plain decimals (``-12.5``, ``3``, ``.25``) are converted without a Python loop: their digits
    form an integer mantissa (exact in float64 below 2**53) divided by a power of ten, which
    rounds exactly as strtod does for up to 15 digits. The rare other tokens (exponents, longer
    mantissas) go through Python's float one by one; a token that is no number gives None.
    """
    n = len(starts)
    is_digit = (buf >= 48) & (buf <= 57)
    is_dot = buf == 46
    is_sign = (buf == 45) | (buf == 43)
    odd = (buf != 32) & (buf != 10) & ~(is_digit | is_dot | is_sign)
    # One pass of segment sums over a packed code per byte: digits count 1, dots 2**6,
    # signs 2**12, other characters 2**18. A segment is a token and the blanks after it.
    code = is_digit.astype(np.int32)
    code[is_dot] = 1 << 6
    code[is_sign] = 1 << 12
    code[odd] = 1 << 18
    packed = np.add.reduceat(code, starts)
    digits = packed & 63
    dots = (packed >> 6) & 63
    signs = (packed >> 12) & 63
    others = packed >> 18
    # A segment of 64 bytes or more may carry over from one 6-bit field into the next: its
    # counts are taken again, one by one (rare: no number needs 64 characters).
    long = np.flatnonzero(np.diff(np.append(starts, len(buf))) >= 64)
    for i in long:
        segment = slice(starts[i], starts[i + 1] if i + 1 < n else len(buf))
        digits[i], dots[i] = is_digit[segment].sum(), is_dot[segment].sum()
        signs[i], others[i] = is_sign[segment].sum(), odd[segment].sum()
    integer_text = (others == 0) & (dots == 0) & (signs == is_sign[starts]) & (digits >= 1)
    simple = (others == 0) & (dots <= 1) & (signs == is_sign[starts])
    simple &= (digits >= 1) & (digits <= _MAX_DIGITS)
    digit_pos = np.flatnonzero(is_digit)
    last_digit = np.cumsum(digits) - 1
    rank = np.repeat(last_digit, digits) - np.arange(len(digit_pos))
    np.minimum(rank, 18, out=rank)
    contrib = (buf[digit_pos] - 48) * _POW10[rank]
    first_digit = last_digit - digits + 1
    nonempty = digits > 0
    mantissa = np.zeros(n)
    mantissa[nonempty] = np.add.reduceat(contrib, first_digit[nonempty])
    # Digits after the dot set the power of ten to divide by.
    frac = np.zeros(n, dtype=np.int64)
    dot_pos = np.flatnonzero(is_dot)
    if len(dot_pos):
        dot_token = np.searchsorted(starts, dot_pos, side="right") - 1
        before = np.searchsorted(digit_pos, dot_pos) - first_digit[dot_token]
        frac[dot_token] = digits[dot_token] - before
    values = mantissa / _POW10[np.minimum(frac, 18)]
    values[buf[starts] == 45] *= -1
    for i in np.flatnonzero(~simple):
        try:
            values[i] = float(cleaned[starts[i] : ends[i] + 1])
        except ValueError:
            return None
    return values, integer_text
