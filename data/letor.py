"""Reading SVMlight / LETOR text into a `RankingSplit`.

Accepted lines: ``<label> qid:<int> <index>:<value> ... [# comment]`` with 1-based sparse indices
(absent features are 0), integer or float labels, CRLF or LF line ends, blank and comment-only
lines; plain or gzip-compressed. Also LightGBM-style files without ``qid:`` and a ``<file>.query``
file beside them holding one QG size per line.

Every value is checked against what it is stored as: labels and features must be finite in
float32 (|x| <= 3.4e38; a larger value would turn into inf and then NaN in every split after
standardising), qids must be integers that float64 holds exactly (|qid| < 2**53), feature
indices at most `MAX_FEATURE_INDEX` (the features are dense). A feature index given twice on one
line is an error: the format gives no meaning to it, and taking either value would be a guess.

Parsing is vectorized with numpy over chunks of the file: bytes methods strip comments and
separators, plain decimals are converted without a Python loop, and the line structure is
checked from token positions. When any check fails, the chunk is parsed again line by line in
Python, which names the first bad line and says what was expected. That slow path is also the
reference that the tests compare the fast path with.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.ranking_split import RankingSplit

CHUNK_BYTES = 16 << 20
_COMMENT = re.compile(rb"#[^\n]*")
# ':' and CR become spaces; "qid:" is blanked separately so positions stay aligned.
_SEPARATORS = bytes.maketrans(b":\r\t\v\f", b"     ")
_POW10 = 10.0 ** np.arange(19)
_MAX_DIGITS = 15  # mantissas below 2**53: division by 10**k rounds exactly
_EXPECTED = "expected '<label> qid:<int> <index>:<value> ...'"
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_QID = 2**53
MAX_FEATURE_INDEX = 1_000_000  # dense [n_items, n_features] float32: more is a mistake


@dataclass
class _Parsed:
    """Items of one chunk, as flat arrays."""

    labels: np.ndarray  # [n_lines] float64
    qids: np.ndarray  # [n_lines] float64 (integral); empty without qid
    rows: np.ndarray  # [nnz] int64, line index within the chunk
    cols: np.ndarray  # [nnz] int64, 0-based feature index
    values: np.ndarray  # [nnz] float64
    line_numbers: np.ndarray  # [n_lines] int64, 1-based line numbers in the file
    has_qid: bool


def read_letor(path: str | Path, *, name: str | None = None) -> RankingSplit:
    """Parse one LETOR/SVMlight file (plain or ``.gz``) into dense float32 arrays."""
    path = Path(path)
    chunks = list(parse_chunks(path))
    if not chunks or not any(len(c.labels) for c in chunks):
        raise DataFormatError(path, None, f"no data lines found ({_EXPECTED})")
    labels = np.concatenate([c.labels for c in chunks])
    line_numbers = np.concatenate([c.line_numbers for c in chunks])
    has_qid = chunks[0].has_qid
    n_features = max((int(c.cols.max()) + 1 for c in chunks if len(c.cols)), default=0)
    features = np.zeros((len(labels), n_features), dtype=np.float32)
    start = 0
    for c in chunks:
        features[c.rows + start, c.cols] = c.values
        start += len(c.labels)
    if has_qid:
        line_qids = np.concatenate([c.qids for c in chunks]).astype(np.int64)
        offsets, qids = _groups_from_qids(line_qids, line_numbers, path)
    else:
        offsets = _offsets_from_query_file(path, len(labels))
        qids = np.arange(len(offsets) - 1, dtype=np.int64)
    return RankingSplit(
        features, labels.astype(np.float32), offsets, qids, name or _split_name(path)
    )


def _split_name(path: Path) -> str:
    return path.name.split(".")[0]


def open_text(path: Path) -> io.BufferedIOBase:
    """Open a file for binary reading, decompressing gzip when its magic bytes say so."""
    if not path.is_file():
        raise DataFormatError(path, None, "file not found")
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _read_blocks(path: Path):
    """Yield (block, first_line_number) with blocks ending at a line boundary."""
    line_number = 1
    rest = b""
    try:
        with open_text(path) as f:
            while True:
                block = f.read(CHUNK_BYTES)
                if not block:
                    break
                block = rest + block
                cut = block.rfind(b"\n") + 1
                if cut == 0:
                    rest = block
                    continue
                rest = block[cut:]
                yield block[:cut], line_number
                line_number += block.count(b"\n", 0, cut)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataFormatError(path, None, f"cannot be read ({exc})") from None
    if rest.strip():
        yield rest + b"\n", line_number


def parse_chunks(path: Path, on_block=None):
    """The parsed items of ``path``, block by block (`_Parsed`); ``on_block(n_bytes)``, when
    given, hears of each block read (a progress bar)."""
    has_qid: bool | None = None
    for block, first_line in _read_blocks(path):
        if on_block is not None:
            on_block(len(block))
        if has_qid is None:
            first = next((ln for ln in block.split(b"\n") if ln.split(b"#")[0].strip()), None)
            if first is None:
                continue
            has_qid = b"qid:" in first
        parsed = _parse_fast(block, first_line, has_qid)
        if parsed is None:
            parsed = _parse_slow(block, first_line, has_qid, path)
        yield parsed


def _parse_fast(block: bytes, first_line: int, has_qid: bool) -> _Parsed | None:
    """Vectorized parse of whole lines; None when anything looks off (the slow path decides)."""
    text = _COMMENT.sub(b"", block)
    n_qid = text.count(b"qid:")
    cleaned = text.replace(b"qid:", b"    ").translate(_SEPARATORS)
    raw = np.frombuffer(text, dtype=np.uint8)
    buf = np.frombuffer(cleaned, dtype=np.uint8)
    is_space = (buf == 32) | (buf == 10)
    newline = np.flatnonzero(buf == 10)
    not_space = ~is_space
    starts = np.flatnonzero(not_space & np.concatenate(([True], is_space[:-1])))
    ends = np.flatnonzero(not_space & np.concatenate((is_space[1:], [True])))
    numbers = _decimal_numbers(buf, starts, ends, cleaned)
    if numbers is None:
        return None
    # Line of every token and of every line break; blank lines hold no token.
    token_line = np.searchsorted(newline, starts)
    n_lines_in_block = len(newline)
    per_line = np.bincount(token_line, minlength=n_lines_in_block)
    data_lines = np.flatnonzero(per_line > 0)
    counts = per_line[data_lines]
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
    cols = numbers[index_tokens]
    values = numbers[value_tokens]
    labels = numbers[first_token]
    qids = numbers[first_token + 1] if has_qid else np.zeros(0)
    if (
        np.any(cols < 1)
        or np.any(cols > MAX_FEATURE_INDEX)
        or np.any(cols != np.floor(cols))
        or not np.all(np.abs(values) <= FLOAT32_MAX)  # NaN fails this too
        or not np.all(np.abs(labels) <= FLOAT32_MAX)
        or np.any(qids != np.floor(qids))
        or not np.all(np.abs(qids) < MAX_QID)
    ):
        return None
    rows = np.searchsorted(first_token, index_tokens, side="right") - 1
    if _has_duplicate_index(rows, cols):
        return None
    # Line numbers count the lines of the original block, comments included.
    line_numbers = first_line + data_lines
    return _Parsed(
        labels=labels,
        qids=qids,
        rows=rows,
        cols=cols.astype(np.int64) - 1,
        values=values,
        line_numbers=line_numbers.astype(np.int64),
        has_qid=has_qid,
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


def _decimal_numbers(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, cleaned: bytes
) -> np.ndarray | None:
    """``[n_tokens]`` float64 values of the tokens ``cleaned[starts[i]:ends[i] + 1]``, or None.

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
    return values


def _parse_slow(block: bytes, first_line: int, has_qid: bool, path: Path) -> _Parsed:
    """Line-by-line parse that raises `DataFormatError` at the first bad line."""
    labels, qids, rows, cols, values, line_numbers = [], [], [], [], [], []
    for offset, raw_line in enumerate(block.split(b"\n")[:-1]):
        number = first_line + offset
        tokens = raw_line.split(b"#", 1)[0].split()
        if not tokens:
            continue
        text = [t.decode("utf-8", "replace") for t in tokens]
        labels.append(_number(text[0], path, number, "label"))
        features = text[1:]
        if has_qid:
            if not features or not features[0].startswith("qid:"):
                raise DataFormatError(path, number, f"missing qid: ({_EXPECTED})")
            qid_text = features[0][4:]
            if not re.fullmatch(r"[+-]?\d+", qid_text):
                raise DataFormatError(
                    path, number, f"qid '{qid_text}' is not an integer ({_EXPECTED})"
                )
            if abs(int(qid_text)) >= MAX_QID:
                raise DataFormatError(
                    path, number, f"qid {qid_text} is out of range (|qid| < 2**53)"
                )
            qids.append(float(qid_text))
            features = features[1:]
        elif features and features[0].startswith("qid:"):
            raise DataFormatError(
                path, number, "qid: found, but earlier lines of this file had none"
            )
        seen: dict[int, str] = {}
        for pair in features:
            index_text, sep, value_text = pair.partition(":")
            if not sep or not re.fullmatch(r"[+-]?\d+", index_text):
                raise DataFormatError(
                    path, number, f"bad feature '{pair}' (expected <index>:<value>)"
                )
            index = int(index_text)
            if index < 1:
                raise DataFormatError(
                    path, number, f"feature index {index} in '{pair}' (indices are 1-based)"
                )
            if index > MAX_FEATURE_INDEX:
                raise DataFormatError(
                    path,
                    number,
                    f"feature index {index} in '{pair}' is above {MAX_FEATURE_INDEX:,} "
                    "(features are stored dense)",
                )
            if index in seen:
                raise DataFormatError(
                    path,
                    number,
                    f"feature {index} is given twice ({seen[index]} and {value_text}); "
                    "give each feature once per line",
                )
            seen[index] = value_text
            rows.append(len(labels) - 1)
            cols.append(index - 1)
            values.append(_number(value_text, path, number, f"value of feature {index}"))
        line_numbers.append(number)
    return _Parsed(
        labels=np.asarray(labels, dtype=np.float64),
        qids=np.asarray(qids, dtype=np.float64),
        rows=np.asarray(rows, dtype=np.int64),
        cols=np.asarray(cols, dtype=np.int64),
        values=np.asarray(values, dtype=np.float64),
        line_numbers=np.asarray(line_numbers, dtype=np.int64),
        has_qid=has_qid,
    )


def _number(text: str, path: Path, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataFormatError(path, line, f"bad {what} '{text}' (expected a number)") from None
    if not np.isfinite(value):
        raise DataFormatError(path, line, f"{what} is '{text}' (expected a finite number)")
    if abs(value) > FLOAT32_MAX:
        raise DataFormatError(
            path,
            line,
            f"{what} is {text}, beyond the float32 range it is stored in "
            f"(|x| <= {FLOAT32_MAX:.7g}); rescale it (e.g. log) or drop the line",
        )
    return value


def line_of_item(path: Path, item: int) -> int | None:
    """The 1-based line number of the ``item``-th data line (blank and comment lines skipped),
    for messages about one item; None when the file is shorter."""
    seen = 0
    try:
        with open_text(Path(path)) as f:
            for number, raw_line in enumerate(f, start=1):
                if raw_line.split(b"#", 1)[0].strip():
                    if seen == item:
                        return number
                    seen += 1
    except (OSError, EOFError, zlib.error):
        return None
    return None


def _groups_from_qids(
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


def _offsets_from_query_file(path: Path, n_items: int) -> np.ndarray:
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
    sizes = []
    for number, line in enumerate(query_path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        if not line.strip().isdigit() or int(line) < 1:
            raise DataFormatError(
                query_path, number, f"'{line.strip()}' is not a group size (a positive integer)"
            )
        sizes.append(int(line))
    return np.array(sizes, dtype=np.int64)


def check_query_total(path: Path, total: int, n_items: int) -> None:
    if total != n_items:
        raise DataFormatError(
            query_file_for(path),
            None,
            f"group sizes add up to {total}, but {path.name} has {n_items} items",
        )


def write_letor(split: RankingSplit, path: str | Path, *, precision: int = 6) -> None:
    """Write a split as dense LETOR text (plain, or gzip when the name ends in .gz)."""
    path = Path(path)
    feature_fmt = " ".join(f"{j + 1}:%.{precision}g" for j in range(split.n_features))
    qid_per_item = np.repeat(split.qids, split.group_sizes)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as f:
        for start in range(0, split.n_items, 50_000):
            stop = min(start + 50_000, split.n_items)
            block = np.column_stack(
                [split.labels[start:stop], qid_per_item[start:stop], split.features[start:stop]]
            )
            np.savetxt(f, block, fmt=f"%g qid:%d {feature_fmt}")
