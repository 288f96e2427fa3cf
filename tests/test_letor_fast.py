"""The LETOR reader's quick paths (numpy's text reader for dense blocks, forked workers) give
exactly what the line-by-line reference gives, and refuse what they cannot number."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor import blocks, read_letor
from scarce_ltr.data.letor.dense import parse_dense
from scarce_ltr.data.letor.lines import parse_slow
from scarce_ltr.data.letor.parsed import Parsed
from scarce_ltr.data.letor.tokens import parse_fast

KEYS = ("labels", "qids", "rows", "cols", "values", "line_numbers")


def assert_same(a: Parsed, b: Parsed) -> None:
    """Equal dtypes, shapes and bits (so -0.0 and the last ulp count)."""
    for key in KEYS:
        x, y = getattr(a, key), getattr(b, key)
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert x.tobytes() == y.tobytes(), key


def token(rng: np.random.Generator) -> str:
    """A number written the many ways files write them."""
    x = float(rng.normal() * 10.0 ** rng.integers(-8, 9))
    kind = rng.integers(0, 9)
    if kind == 0:
        return repr(x)  # 17 significant digits
    if kind == 1:
        return f"{x:.6e}"
    if kind == 2:
        return f"{x:.3E}".replace("E+0", "e")  # 1.234E-05, 1.234e5
    if kind == 3:
        return str(int(rng.integers(-1000, 1000)))
    if kind == 4:
        return f"{x:.4f}".lstrip("0") or "0"
    if kind == 5:
        return f"+{abs(x):.5g}"
    if kind == 6:
        return "-0" if rng.random() < 0.5 else "0"
    if kind == 7:
        return f"{int(abs(x))}."
    return f"{x:.6g}"


def dense_block(rng: np.random.Generator, *, qid: bool, n_lines: int = 60, width: int = 7) -> bytes:
    lines = []
    for i in range(n_lines):
        head = f"{rng.integers(0, 5)}" + (f" qid:{i // 4}" if qid else "")
        pairs = " ".join(f"{j + 1}:{token(rng)}" for j in range(width))
        sep = "\t" if i % 7 == 3 else " "
        end = " \r\n" if i % 5 == 2 else "\n"
        lines.append(f"{head}{sep}{pairs}{end}")
    return "".join(lines).encode()


@pytest.mark.parametrize("qid", [True, False])
def test_dense_path_equals_reference_bit_for_bit(qid: bool) -> None:
    rng = np.random.default_rng(1)
    for first_line in (1, 1000):
        block = dense_block(rng, qid=qid)
        dense = parse_dense(block, first_line, qid)
        assert dense is not None and dense.width == 7
        slow = parse_slow(block, first_line, qid, Path("x"))
        assert_same(dense.filled(), slow)
        assert_same(parse_fast(block, first_line, qid), slow)


def test_dense_lines_out_of_order_take_the_general_branch() -> None:
    block = b"1 qid:1 3:1.5 1:2 2:-0\n0 qid:1 2:7 3:1e-300 1:5\n"
    dense = parse_dense(block, 4, True)
    assert dense is not None and dense.width is None
    assert_same(dense, parse_slow(block, 4, True, Path("x")))


@pytest.mark.parametrize(
    "text",
    [
        "1 qid:1 1:1\n# a comment\n2 qid:1 1:2\n",  # comment line
        "1 qid:1 1:1\n\n2 qid:1 1:2\n",  # blank line
        " 1 qid:1 1:1\n",  # leading blank
        "1 qid:1 1:1 2:2\n2 qid:1 1:2\n",  # ragged
        "1 qid:1 1:2:3 4 2:5\n",  # a word with two colons, one with none
        "d qid:1 1:1d5\n",  # letters of qid elsewhere
        "1 qid:1 1:inf\n",
        "1 qid:1 1:1e999\n",
        "1 qid:1 1:1_0\n",
        "1 qid:1 1:0x10\n",
        "1 2 qid:1 1:3\n",  # qid not the second word
        "1 qid:1 1 :2\n",
        "1 qid:1 1: 2\n",
        "1 qid:1 1:2 1:3\n",  # a feature given twice
        "1 qid:1 0:2\n",
        "1 qid:1.5 1:2\n",
        "1 qid:1 1:\xe92\n",
    ],
)
def test_dense_path_refuses_what_it_cannot_vouch_for(text: str) -> None:
    block = text.encode("latin-1")
    assert parse_dense(block, 1, True) is None


def test_dense_path_refuses_colons_in_the_label_without_qid() -> None:
    assert parse_dense(b"1:1 2:3\n", 1, False) is None
    assert parse_dense(b"1:1 2:3 4\n", 1, False) is None  # field count as if valid
    assert parse_dense(b"1 qid:2 1:3\n", 1, False) is None
    assert parse_dense(b"1 1:3\n", 1, False) is not None


def many_blocks(tmp_path: Path, monkeypatch, lines: list[str]) -> Path:
    """A file cut into blocks of a few lines each, read by two forked workers."""
    monkeypatch.setattr(blocks, "CHUNK_BYTES", 600)
    monkeypatch.setattr(blocks, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(blocks, "_worker_count", lambda path: 2)
    path = tmp_path / "f.txt"
    path.write_text("".join(lines))
    return path


def test_workers_give_the_same_split_and_chunks(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(2)
    lines = dense_block(rng, qid=True, n_lines=300).decode().splitlines(keepends=True)
    lines[40:40] = ["# a comment in the middle\n", "\n", "3 qid:10 2:1 5:2\n"]  # a sparse block
    path = many_blocks(tmp_path, monkeypatch, lines)
    parallel = read_letor(path)
    seen: list[int] = []
    chunks = list(blocks.parse_chunks(path, seen.append))
    monkeypatch.setattr(blocks, "_worker_count", lambda path: 1)
    serial = read_letor(path)
    for key in ("features", "labels", "offsets", "qids"):
        np.testing.assert_array_equal(getattr(parallel, key), getattr(serial, key))
    assert sum(seen) == path.stat().st_size and len(chunks) > 10
    for chunk, again in zip(chunks, blocks.parse_chunks(path), strict=True):
        assert_same(chunk, again)


@pytest.mark.parametrize("bad", ["1 qid:40 1:oops 2:1", "1 qid:40 1:1 1:2", "1 qid:40 1:1:1"])
def test_worker_errors_name_the_file_and_line(tmp_path: Path, monkeypatch, bad: str) -> None:
    lines = [f"{i % 3} qid:{i // 5} 1:{i} 2:{i * 0.25}\n" for i in range(400)]
    lines[217] = bad + "\n"  # far past the first block
    path = many_blocks(tmp_path, monkeypatch, lines)
    with pytest.raises(DataFormatError) as info:
        read_letor(path)
    assert info.value.line == 218
    assert str(info.value).startswith(f"{path}:218: ")


def test_a_caller_that_stops_early_leaves_no_worker_behind(tmp_path: Path, monkeypatch) -> None:
    lines = [f"{i % 3} qid:{i // 5} 1:{i} 2:{i * 0.25}\n" for i in range(400)]
    path = many_blocks(tmp_path, monkeypatch, lines)
    chunks = blocks.parse_chunks(path)
    assert len(next(chunks).labels) > 0
    chunks.close()  # shuts the pool down
    assert not multiprocessing.active_children()


def test_small_files_and_busy_machines_parse_in_this_process(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "f.txt"
    path.write_text("1 qid:1 1:1\n")
    assert blocks._worker_count(path) == 1  # below PARALLEL_MIN_BYTES
    monkeypatch.setattr(blocks, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(blocks, "_busy_cores", lambda: 99.0)
    assert blocks._worker_count(path) == 1
    monkeypatch.setattr(blocks, "_busy_cores", lambda: 0.0)
    cores = min(len(os.sched_getaffinity(0)), blocks.MAX_WORKERS)
    assert blocks._worker_count(path) == (cores if cores >= 2 else 1)


def test_busy_cores_are_the_runnable_tasks_less_this_one(monkeypatch) -> None:
    """/proc/loadavg's 4th field counts runnable tasks with this one; without the file, the
    1-minute load average stands in."""
    real = blocks.Path.read_text

    def loadavg(path, *args, **kwargs):
        if str(path) == "/proc/loadavg":
            return "0.52 0.40 0.33 3/215 12345\n"
        return real(path, *args, **kwargs)

    monkeypatch.setattr(blocks.Path, "read_text", loadavg)
    assert blocks._busy_cores() == 2.0

    def unreadable(path, *args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(blocks.Path, "read_text", unreadable)
    monkeypatch.setattr(blocks.os, "getloadavg", lambda: (1.25, 1.0, 0.5))
    assert blocks._busy_cores() == 1.25
