"""A LETOR file read block by block and each block parsed, in this process or in forked workers.

Blocks end at a line boundary (`CHUNK_BYTES` each); every block goes to the fastest parser that
accepts it: `data.letor.dense`, then `data.letor.tokens`, then the line-by-line reference
`data.letor.lines`, which names the first bad line. Files of `PARALLEL_MIN_BYTES` or more are
parsed by one forked process per idle core, a few blocks ahead; a block a worker refuses is
parsed again here, so every error names the file and line as in one process.
"""

from __future__ import annotations

import collections
import gzip
import io
import itertools
import multiprocessing
import os
import re
import sys
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.core.files import special_kind
from scarce_ltr.data.letor.dense import parse_dense
from scarce_ltr.data.letor.lines import parse_slow
from scarce_ltr.data.letor.parsed import UTF8_BOM, Parsed
from scarce_ltr.data.letor.tokens import parse_fast

CHUNK_BYTES = 16 << 20
# The longest line read (32 MiB, thousands of times the widest public LETOR line, Yahoo's ~10 KB;
# every one of the 1,000,000 feature indices allowed at once fits): a file whose line never ends
# (binary, sparse, line ends lost) is refused at its line after reading about this much, where
# gathering the line took time and memory growing with its square.
MAX_LINE_BYTES = 32 << 20
PARALLEL_MIN_BYTES = 64 << 20  # smaller files parse in the calling process
MAX_WORKERS = 8


def open_text(path: Path) -> io.BufferedIOBase:
    """Open a file for binary reading, decompressing gzip when its magic bytes say so."""
    if not path.is_file():
        kind = special_kind(path, follow=True)  # a FIFO, a device: said, not "not found"
        raise DataFormatError(path, None, f"{kind}, not a file" if kind else "file not found")
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
                joined, block = len(rest), rest + block
                _refuse_lone_cr(block, line_number, path)
                cut = block.rfind(b"\n") + 1
                # the line begun in ``rest``: up to its end here, else all of the block
                end = block.find(b"\n", joined) if cut else len(block)
                _refuse_long_line(block, end, line_number, path)
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


def _refuse_long_line(block: bytes, length: int, line: int, path: Path) -> None:
    """A `DataFormatError` at ``line`` when the first ``length`` bytes of ``block``, one line
    (or its start: no line feed yet), pass `MAX_LINE_BYTES`."""
    if length <= MAX_LINE_BYTES:
        return
    why = (
        "it holds NUL bytes: the file is binary, or a sparse or cut copy"
        if block.find(b"\0", 0, length) >= 0
        else "the file is not LETOR text, or its line ends were lost"
    )
    raise DataFormatError(
        path,
        line,
        f"a line longer than {MAX_LINE_BYTES:,} bytes with no line end (far beyond any LETOR "
        f"line): {why}",
    )


# A carriage return that is no part of a CRLF line end: old Mac OS's line end (CR only), or a
# stray one that readers split lines at (Python's universal newlines), where this parser does not.
_LONE_CR = re.compile(rb"\r(?!\n)")


def _refuse_lone_cr(block: bytes, first_line: int, path: Path) -> None:
    """A `DataFormatError` at the line of the first lone CR of ``block``: CR-only line ends would
    make one line of many (a comment on the first swallowing the rest). About 0.8 ms per MB of a
    CRLF file (1-2 % of its parse), 0.03 ms per MB of a LF one."""
    if b"\r" not in block:  # memchr: 0.5 ms per 16 MB
        return
    found = _LONE_CR.search(block)
    if found is None or found.end() == len(block):  # a CR at the end: its LF may come next
        return
    line = first_line + block.count(b"\n", 0, found.start())
    raise DataFormatError(
        path,
        line,
        "a carriage return (CR) ends a line without a line feed: old Mac OS line endings (CR "
        "only) or a stray CR, which this reader does not split lines at; convert the file to "
        "LF or CRLF line endings (tr '\\r' '\\n' < old > new)",
    )


def parse_chunks(path: Path, on_block=None):
    """The parsed items of ``path``, block by block (`Parsed`); ``on_block(n_bytes)``, when
    given, hears of each block read (a progress bar). Files of `PARALLEL_MIN_BYTES` or more are
    parsed by one forked process per idle core (`_worker_count`), a few blocks ahead."""
    for parsed in parsed_blocks(path, on_block):
        yield parsed.filled()


def parsed_blocks(path: Path, on_block, *, values_dtype=np.float64):
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
        if first_line == 1 and block.startswith(UTF8_BOM):
            block = block[len(UTF8_BOM) :]
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
    most two blocks each. A block they refuse is parsed again here by `parse_slow`, so every
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


def _finish(future, block: bytes, first_line: int, has_qid: bool, path: Path, dtype) -> Parsed:
    parsed = future.result()
    if parsed is None:
        parsed = parse_slow(block, first_line, has_qid, path)
    return _as_dtype(parsed, dtype)


def _parse_quick(block: bytes, first_line: int, has_qid: bool, dtype=np.float64) -> Parsed | None:
    """The vectorized parses of one block (in a worker process), values as ``dtype``; None
    sends it to the slow path, which names the bad line."""
    parsed = parse_dense(block, first_line, has_qid)
    if parsed is None:
        parsed = parse_fast(block, first_line, has_qid)
    return None if parsed is None else _as_dtype(parsed, dtype)


def _parse_block(block: bytes, first_line: int, has_qid: bool, path: Path, dtype) -> Parsed:
    """The fastest parse that accepts ``block``: dense lines, then any lines, then the line
    by line reference (which raises at the first bad line)."""
    parsed = _parse_quick(block, first_line, has_qid, dtype)
    return (
        _as_dtype(parse_slow(block, first_line, has_qid, path), dtype) if parsed is None else parsed
    )


def _as_dtype(parsed: Parsed, dtype) -> Parsed:
    """``parsed`` with its values as ``dtype`` (range-checked already: float32 holds them)."""
    return replace(parsed, values=parsed.values.astype(dtype, copy=False))
