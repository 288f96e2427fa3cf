"""Reading SVMlight / LETOR text into a `RankingSplit`.

Accepted lines: ``<label> qid:<int> <index>:<value> ... [# comment]`` with 1-based sparse indices
(absent features are 0), integer or float labels, CRLF or LF line ends, blank and comment-only
lines; plain or gzip-compressed. Also LightGBM-style files without ``qid:`` and a ``<file>.query``
file beside them holding one QG size per line. A UTF-8 byte-order mark at the start of a file is
skipped (as most readers do); a NUL byte in a line, which binary and UTF-16 files are full of, is
named as such, and so is a byte-order mark in the middle (files joined with ``cat``).

Every value is checked against what it is stored as: labels and features must be finite in
float32 (|x| <= 3.4e38; a larger value would turn into inf and then NaN in every split after
standardising), qids must be integers that float64 holds exactly (|qid| < 2**53), feature
indices at most `MAX_FEATURE_INDEX` (the features are dense). A qid or feature index must be
written as an integer (``[+-]?<digits>``): ``qid:1.0`` and ``1.0:<value>`` are refused by every
path, as scikit-learn's `load_svmlight_file` refuses them. A feature index given twice on one
line is an error: the format gives no meaning to it, and taking either value would be a guess.
Before the dense ``[n_items, n_features]`` float32 array is allocated its size is checked against
the memory available (`available_memory`): one stray large index would otherwise get the
process killed by the kernel instead of a message naming its line.

Parsing works over chunks of the file, three ways, the first that accepts a chunk wins. Chunks
of dense lines (every line the same features, no comment or blank line: MSLR, Yahoo) go through
numpy's C text reader after a check of the line structure (`_parse_dense`); other chunks through
vectorized numpy token code (`_parse_fast`); a chunk either refuses is parsed again line by line
in Python (`_parse_slow`), which names the first bad line and says what was expected. All three
give values equal to ``float(token)`` and accept and refuse the same lines; the slow path is
the reference the tests compare the others with. Large files are parsed by forked worker
processes when cores are idle.
"""

from __future__ import annotations

import collections
import functools
import gzip
import io
import itertools
import multiprocessing
import os
import re
import sys
import warnings
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.ranking_split import RankingSplit

CHUNK_BYTES = 16 << 20
PARALLEL_MIN_BYTES = 64 << 20  # smaller files parse in the calling process
MAX_WORKERS = 8
_COMMENT = re.compile(rb"#[^\n]*")
# ':' and CR become spaces; "qid:" is blanked separately so positions stay aligned.
_SEPARATORS = bytes.maketrans(b":\r\t\v\f", b"     ")
# `_parse_dense` blanks the letters of "qid:" too, having checked they appear nowhere else.
_SEPARATORS_QID = bytes.maketrans(b":\r\t\v\fqid", b"        ")
# Bytes of a plain dense block: printable ASCII, blanks, tabs, CR and LF.
_PLAIN = bytes(range(32, 127)) + b"\t\r\n"
_POW10 = 10.0 ** np.arange(19)
_MAX_DIGITS = 15  # mantissas below 2**53: division by 10**k rounds exactly
_EXPECTED = "expected '<label> qid:<int> <index>:<value> ...'"
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_QID = 2**53
MAX_FEATURE_INDEX = 1_000_000  # dense [n_items, n_features] float32: more is a mistake
_MAX_DENSE_PAIRS = 1 << 16  # wider dense lines take the token path (a record type per width)
_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


@dataclass
class _Parsed:
    """Items of one chunk, as flat arrays. Inside this module ``width`` may stand for ``rows``
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

    def filled(self) -> _Parsed:
        """This chunk with ``rows`` and ``cols`` spelled out."""
        if self.width is None:
            return self
        n = len(self.labels)
        rows = np.repeat(np.arange(n, dtype=np.int64), self.width)
        cols = np.tile(np.arange(self.width, dtype=np.int64), n)
        return replace(self, rows=rows, cols=cols, width=None)


def read_letor(path: str | Path, *, name: str | None = None) -> RankingSplit:
    """Parse one LETOR/SVMlight file (plain or ``.gz``) into dense float32 arrays."""
    path = Path(path)
    # float32 values at once (what they are stored as): half the memory while chunks pile up,
    # and half the bytes a worker sends back.
    chunks = list(_parsed_blocks(path, None, values_dtype=np.float32))
    if not chunks or not any(len(c.labels) for c in chunks):
        raise DataFormatError(path, None, f"no data lines found ({_EXPECTED})")
    labels = np.concatenate([c.labels for c in chunks])
    line_numbers = np.concatenate([c.line_numbers for c in chunks])
    has_qid = chunks[0].has_qid
    n_features = max((_width(c) for c in chunks), default=0)
    _check_memory(path, chunks, len(labels), n_features)
    features = np.zeros((len(labels), n_features), dtype=np.float32)
    start = 0
    for c in chunks:
        if c.width is None:
            features[c.rows + start, c.cols] = c.values
        else:
            features[start : start + len(c.labels), : c.width] = c.values.reshape(-1, c.width)
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


def available_memory() -> int | None:
    """Bytes this process can still allocate without swapping: ``MemAvailable`` of
    ``/proc/meminfo``, lowered to the room left under a cgroup v2 limit (a container's), or
    the free pages `os.sysconf` counts elsewhere; None when the system says nothing."""
    try:
        meminfo = Path("/proc/meminfo").read_text()
        match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.MULTILINE)
        available = int(match.group(1)) * 1024 if match else None
    except OSError:
        available = None
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit.isdigit():
            available = min(available, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass
    return available


def _check_memory(path: Path, chunks: list[_Parsed], n_items: int, n_features: int) -> None:
    """Refuse, naming the line of the largest feature index, a dense feature array larger
    than the memory available: allocating it would get the process killed by the kernel."""
    needed = n_items * n_features * 4
    available = available_memory()
    if available is None or needed <= available:
        return
    line = None
    for c in chunks:
        if _width(c) == n_features and len(c.labels):
            at = 0 if c.width is not None else int(c.rows[np.argmax(c.cols)])
            line = int(c.line_numbers[at])
            break
    stored = sum(len(c.values) for c in chunks)
    if stored < n_items * n_features // 2:  # mostly absent features: a stray index
        way_out = (
            f"feature index {n_features:,} on this line is the largest; the features are "
            "stored dense, so renumber the feature indices to be contiguous or drop the stray one"
        )
    else:
        way_out = "use a machine with more memory, or split the file"
    raise DataFormatError(
        path,
        line,
        f"{n_items:,} items x {n_features:,} features need {_bytes(needed)} as dense float32, "
        f"more than the {_bytes(available)} of memory available; {way_out}",
    )


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _width(parsed: _Parsed) -> int:
    if parsed.width is not None:
        return parsed.width
    return int(parsed.cols.max()) + 1 if len(parsed.cols) else 0


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
    given, hears of each block read (a progress bar). Files of `PARALLEL_MIN_BYTES` or more are
    parsed by one forked process per idle core (`_worker_count`), a few blocks ahead."""
    for parsed in _parsed_blocks(path, on_block):
        yield parsed.filled()


def _parsed_blocks(path: Path, on_block, *, values_dtype=np.float64):
    """`parse_chunks`, with ``width`` standing for ``rows`` and ``cols`` where it can, and the
    values as ``values_dtype``."""
    blocks = _without_bom(_reported(_read_blocks(path), on_block))
    for block, first_line in blocks:
        first = next((ln for ln in block.split(b"\n") if ln.split(b"#")[0].strip()), None)
        if first is None:
            continue
        has_qid = b"qid:" in first
        rest = itertools.chain([(block, first_line)], blocks)
        workers = _worker_count(path)
        if workers > 1:
            yield from _parse_in_workers(rest, has_qid, path, workers, values_dtype)
        else:
            for block, first_line in rest:
                yield _parse_block(block, first_line, has_qid, path, values_dtype)
        return


def _reported(blocks, on_block):
    for block, first_line in blocks:
        if on_block is not None:
            on_block(len(block))
        yield block, first_line


def _without_bom(blocks):
    """``blocks`` with a UTF-8 byte-order mark at the start of the file dropped (Windows
    editors write one); after `_reported`, so progress still counts every byte."""
    for block, first_line in blocks:
        if first_line == 1 and block.startswith(_UTF8_BOM):
            block = block[len(_UTF8_BOM) :]
        yield block, first_line


def _worker_count(path: Path) -> int:
    """Processes to parse ``path`` with: one per core, or 1 (this process) for small files,
    where processes cannot be forked or started (inside a pool's worker), and when other work
    keeps the cores busy (`_busy_cores` above cores - 1): the workers spend ~20 % more
    CPU than one process (sending blocks and results), which only pays on cores of their own."""
    if multiprocessing.current_process().daemon or not sys.platform.startswith("linux"):
        return 1  # a pool's worker may not start processes; fork is safe on Linux only
    try:
        if path.stat().st_size < PARALLEL_MIN_BYTES:
            return 1
    except OSError:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = min(cores or 1, MAX_WORKERS)
    if cores < 2 or _busy_cores() > cores - 1:
        return 1
    return cores


def _busy_cores() -> float:
    """Cores other processes keep busy now: the kernel's count of runnable tasks less this one
    (``/proc/loadavg``); elsewhere the 1-minute load average, which lags: right after a CPU-bound
    step of this very process it still reads about one busy core."""
    try:
        running = Path("/proc/loadavg").read_text().split()[3].split("/")[0]
        return float(int(running) - 1)
    except (OSError, IndexError, ValueError):
        return os.getloadavg()[0]


def _parse_in_workers(blocks, has_qid: bool, path: Path, workers: int, values_dtype):
    """`_parse_block` of every block, in file order, by ``workers`` forked processes holding at
    most two blocks each. A block they refuse is parsed again here by `_parse_slow`, so every
    error names the file and line exactly as in one process."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    pending: collections.deque = collections.deque()
    try:
        for block, first_line in blocks:
            future = pool.submit(_parse_quick, block, first_line, has_qid, values_dtype)
            pending.append((future, block, first_line))
            if len(pending) >= 2 * workers:
                yield _finish(*pending.popleft(), has_qid, path, values_dtype)
        while pending:
            yield _finish(*pending.popleft(), has_qid, path, values_dtype)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _finish(future, block: bytes, first_line: int, has_qid: bool, path: Path, dtype) -> _Parsed:
    parsed = future.result()
    if parsed is None:
        parsed = _parse_slow(block, first_line, has_qid, path)
    return _as_dtype(parsed, dtype)


def _parse_quick(block: bytes, first_line: int, has_qid: bool, dtype=np.float64) -> _Parsed | None:
    """The vectorized parses of one block (in a worker process), values as ``dtype``; None
    sends it to the slow path, which names the bad line."""
    parsed = _parse_dense(block, first_line, has_qid)
    if parsed is None:
        parsed = _parse_fast(block, first_line, has_qid)
    return None if parsed is None else _as_dtype(parsed, dtype)


def _parse_block(block: bytes, first_line: int, has_qid: bool, path: Path, dtype) -> _Parsed:
    """The fastest parse that accepts ``block``: dense lines, then any lines, then the line
    by line reference (which raises at the first bad line)."""
    parsed = _parse_quick(block, first_line, has_qid, dtype)
    return (
        _as_dtype(_parse_slow(block, first_line, has_qid, path), dtype)
        if parsed is None
        else parsed
    )


def _as_dtype(parsed: _Parsed, dtype) -> _Parsed:
    """``parsed`` with its values as ``dtype`` (range-checked already: float32 holds them)."""
    return replace(parsed, values=parsed.values.astype(dtype, copy=False))


def _parse_dense(block: bytes, first_line: int, has_qid: bool) -> _Parsed | None:
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
    head = 2 if has_qid else 1
    # The letters of "qid:" appear nowhere else, so blanking them leaves the qid as a token.
    n_qid = n if has_qid else 0
    if n == 0 or len(colon) % n or any(block.count(c) != n_qid for c in (b"q", b"i", b"d")):
        return None
    per_line = len(colon) // n
    n_pairs = per_line - has_qid
    if n_pairs < 0:
        return None
    line_start = np.concatenate(([0], newline[:-1] + 1))
    space = raw <= 32  # blanks, tabs, CR and LF: the other control bytes were refused
    if np.any(space[line_start]):
        return None  # a blank line or leading blanks: the general path numbers them
    if per_line:
        by_line = colon.reshape(n, per_line)
        first = by_line[:, 0]
        if np.any(first <= line_start) or np.any(by_line[:, -1] >= newline):
            return None  # not exactly per_line colons on every line
        if np.any(space[colon - 1]) or np.any(space[colon + 1]):
            return None
        # Whether a blank lies between each colon and the next (the last segment holds an LF).
        if not np.all(np.logical_or.reduceat(space, colon)):
            return None  # two colons in one word
        if has_qid:
            if (
                np.any(raw[first - 1] != ord("d"))
                or np.any(raw[first - 2] != ord("i"))
                or np.any(raw[first - 3] != ord("q"))
                or np.any(first - 4 <= line_start)
                or np.any(~space[first - 4])
            ):
                return None
        elif not np.all(
            np.logical_or.reduceat(space, np.stack([line_start, first], 1).ravel())[::2]
        ):
            return None  # the label word holds a colon
    if n_pairs > _MAX_DENSE_PAIRS:
        return None
    text = block.translate(_SEPARATORS_QID if has_qid else _SEPARATORS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            table = np.loadtxt(
                io.BytesIO(text), dtype=_dense_dtype(has_qid, n_pairs), comments=None, ndmin=1
            )
    except (ValueError, Warning):  # a token that is no number (no integer), a column count off
        return None
    if table.shape != (n,):
        return None
    # Every field is 8 bytes: the records are rows of one [n, fields] table, read both ways.
    as_float = table.view(np.float64).reshape(n, head + 2 * n_pairs)
    as_int = table.view(np.int64).reshape(n, head + 2 * n_pairs)
    labels = as_float[:, 0]
    qids = as_int[:, 1].astype(np.float64) if has_qid else np.zeros(0)
    values = as_float[:, head + 1 :: 2].ravel()
    if not _numbers_ok(labels, qids, values):
        return None
    line_numbers = np.arange(first_line, first_line + n, dtype=np.int64)
    labels, qids = np.ascontiguousarray(labels), np.ascontiguousarray(qids)
    if n_pairs <= MAX_FEATURE_INDEX and np.array_equal(
        as_int[:, head::2], np.broadcast_to(np.arange(1, n_pairs + 1), (n, n_pairs))
    ):
        return _Parsed(labels, qids, None, None, values, line_numbers, has_qid, n_pairs)  # type: ignore[arg-type]
    cols = as_int[:, head::2].ravel()
    rows = np.repeat(np.arange(n, dtype=np.int64), n_pairs)
    if not _indices_ok(rows, cols):
        return None
    return _Parsed(labels, qids, rows, cols.astype(np.int64) - 1, values, line_numbers, has_qid)


@functools.lru_cache(maxsize=8)
def _dense_dtype(has_qid: bool, n_pairs: int) -> np.dtype:
    """Record of one dense line: float64 label and values, int64 qid and indices. numpy's
    integer reader takes ``[+-]?<digits>`` only, so ``qid:1.0`` and ``1.0:<value>`` are
    refused here as on the slow path (reading float columns would take them as 1), and it
    reads integers faster than floats: ~40 % off `np.loadtxt` on an MSLR block."""
    head = 2 if has_qid else 1
    kinds = ["f8", "i8"][:head] + ["i8", "f8"] * n_pairs
    return np.dtype([(f"f{i}", kind) for i, kind in enumerate(kinds)])


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
    decoded = _decimal_numbers(buf, starts, ends, cleaned)
    if decoded is None:
        return None
    numbers, integer_text = decoded
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
    # qid:1.0 and 1.0:<value> are refused as the slow path refuses them, whatever they equal.
    if not np.all(integer_text[index_tokens]) or (
        has_qid and not np.all(integer_text[first_token + 1])
    ):
        return None
    cols = numbers[index_tokens]
    values = numbers[value_tokens]
    labels = numbers[first_token]
    qids = numbers[first_token + 1] if has_qid else np.zeros(0)
    if not _numbers_ok(labels, qids, values):
        return None
    rows = np.searchsorted(first_token, index_tokens, side="right") - 1
    if not _indices_ok(rows, cols):
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


def _numbers_ok(labels: np.ndarray, qids: np.ndarray, values: np.ndarray) -> bool:
    """Labels and values within float32 (NaN fails too), qids integral and below `MAX_QID`:
    what the vectorized paths accept; the slow path names the line of anything else."""
    return bool(
        np.all(np.abs(values) <= FLOAT32_MAX)
        and np.all(np.abs(labels) <= FLOAT32_MAX)
        and not np.any(qids != np.floor(qids))
        and np.all(np.abs(qids) < MAX_QID)
    )


def _indices_ok(rows: np.ndarray, cols: np.ndarray) -> bool:
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


def _parse_slow(block: bytes, first_line: int, has_qid: bool, path: Path) -> _Parsed:
    """Line-by-line parse that raises `DataFormatError` at the first bad line."""
    labels, qids, rows, cols, values, line_numbers = [], [], [], [], [], []
    for offset, raw_line in enumerate(block.split(b"\n")[:-1]):
        number = first_line + offset
        data = raw_line.split(b"#", 1)[0]
        tokens = data.split()
        if (number == 1 and raw_line.startswith(_UTF16_BOMS)) or b"\0" in data:
            raise DataFormatError(path, number, _binary_problem(raw_line))
        if _UTF8_BOM in data:
            raise DataFormatError(
                path,
                number,
                "UTF-8 byte-order mark (EF BB BF) inside the file, where only text may be "
                "(files joined with cat?); remove it",
            )
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


def _binary_problem(line: bytes) -> str:
    """What a line holding NUL bytes (or opening with a UTF-16 byte-order mark) looks like:
    UTF-16 text of ASCII characters has a NUL beside every one, about half its bytes."""
    nul = line.count(b"\0")
    if line.startswith(_UTF16_BOMS) or 0.3 * len(line) <= nul <= 0.7 * len(line):
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
    try:
        data = query_path.read_bytes()
    except OSError as exc:
        raise DataFormatError(query_path, None, f"cannot be read ({exc.strerror})") from None
    if data.startswith(_UTF16_BOMS):
        raise DataFormatError(query_path, 1, _binary_problem(data.split(b"\n", 1)[0]))
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    sizes = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "\0" in line:
            raise DataFormatError(query_path, number, _binary_problem(line.encode()))
        if not line.strip():
            continue
        if not re.fullmatch(r"[0-9]+", line.strip()) or int(line) < 1:
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
