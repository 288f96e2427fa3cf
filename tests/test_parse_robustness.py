"""Issue 25, robustness round 2: the LETOR reader and its cache on input that used to crash,
confuse or go stale — a feature index too large for memory, several processes building one
cache entry, an edit that keeps size and mtime, a BOM, NUL bytes or UTF-16, ``qid:1.0``, and
errors far into a file read in many chunks."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pytest
from tiny import start_together

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data import cache
from scarce_ltr.data.cache import load_split
from scarce_ltr.data.letor import blocks, memory, read_letor
from scarce_ltr.data.letor.dense import parse_dense
from scarce_ltr.data.letor.lines import parse_slow
from scarce_ltr.data.letor.tokens import parse_fast

PATHS = ("dense", "fast", "slow")


def write(tmp_path: Path, data: str | bytes, name: str = "f.txt") -> Path:
    path = tmp_path / name
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


def force(monkeypatch, path: str) -> None:
    """Parse every block by one path only: the quicker ones refuse everything."""
    if path in ("fast", "slow"):
        monkeypatch.setattr(blocks, "parse_dense", lambda *args: None)
    if path == "slow":
        monkeypatch.setattr(blocks, "parse_fast", lambda *args: None)


def dense_lines(n: int, width: int = 3) -> list[str]:
    return [
        f"{i % 3} qid:{i // 4} "
        + " ".join(f"{j + 1}:{(i * width + j) * 0.25}" for j in range(width))
        + "\n"
        for i in range(n)
    ]


# (3) A feature index the dense array has no memory for.


def test_a_feature_index_beyond_memory_is_refused_before_allocating(
    tmp_path: Path, monkeypatch
) -> None:
    path = write(tmp_path, "1 qid:1 1:1 2:2\n0 qid:1 3:1 999999:0.5\n2 qid:2 1:3\n")
    monkeypatch.setattr(memory, "available_memory", lambda: 1 << 20)
    with pytest.raises(DataFormatError) as info:
        read_letor(path)
    message = str(info.value)
    assert info.value.line == 2  # the line holding the largest index
    assert message.startswith(f"{path}:2: ")
    assert "11.4 MiB" in message and "1.0 MiB" in message  # 3 x 999,999 x 4 bytes
    assert "999,999" in message and "renumber" in message


def test_a_file_larger_than_memory_says_so(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, "".join(dense_lines(40)))
    monkeypatch.setattr(memory, "available_memory", lambda: 100)
    with pytest.raises(DataFormatError, match=r"f.txt:1: .*480 B.*more memory"):
        read_letor(path)


def test_three_lines_with_index_999999_still_load(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 1:1\n0 qid:1 999999:0.5\n2 qid:2 1:3\n")
    split = read_letor(path)
    assert split.features.shape == (3, 999_999) and split.features[1, -1] == 0.5


def test_index_999999_on_more_lines_than_memory_holds_is_refused(tmp_path: Path) -> None:
    """The real figure, no monkeypatch: twice the lines the machine's memory holds."""
    available = memory.available_memory()
    if available is None:
        pytest.skip("no figure for available memory on this system")
    n_lines = max(5000, 2 * available // (999_999 * 4))
    path = write(tmp_path, "".join(f"0 qid:{i // 10} 999999:1\n" for i in range(n_lines)))
    with pytest.raises(DataFormatError, match=r"f.txt:1: .*GiB.*renumber"):
        read_letor(path)


def test_available_memory_is_a_positive_figure() -> None:
    available = memory.available_memory()
    assert available is None or available > 0


# (5) Several processes building one cache entry at once.


def _load_in_child(path: Path, root: Path, out: Path, start) -> None:
    start.wait()
    split = load_split(path, name="train", cache_root=root)
    np.save(out, np.asarray(split.features))


def test_processes_starting_together_on_a_new_file_all_succeed_with_one_parse(
    tmp_path: Path, monkeypatch
) -> None:
    path = write(tmp_path, "".join(dense_lines(200)))
    marker = tmp_path / "parses"
    real_read = cache.read_letor

    def counted_read(*args, **kwargs):
        with open(marker, "a") as f:
            f.write("parse\n")
        split = real_read(*args, **kwargs)
        time.sleep(0.3)  # widen the window in which the others look at the entry
        return split

    monkeypatch.setattr(cache, "read_letor", counted_read)
    root = tmp_path / "cache"
    outs = [tmp_path / f"out{i}.npy" for i in range(4)]
    assert start_together(_load_in_child, [(path, root, o) for o in outs]) == [0, 0, 0, 0]
    assert marker.read_text().count("parse") == 1
    expected = read_letor(path).features
    for out in outs:
        np.testing.assert_array_equal(np.load(out), expected)
    assert sorted(p.name for p in root.iterdir()) == [cache.cache_dir_for(path, root).name]


def _load_repeatedly(path: Path, root: Path, failures) -> None:
    for _ in range(15):
        try:
            split = load_split(path, name="train", cache_root=root)
            assert np.all(split.features[:, 0] == split.features[0, 0])  # one version whole
        except Exception as exc:  # noqa: BLE001 -- every failure is counted by the parent
            failures.put(f"{type(exc).__name__}: {exc}")


def test_loads_while_the_file_is_edited_never_find_the_cache_gone(tmp_path: Path) -> None:
    """Readers and rebuilds interleave: before the entry lock a rebuild could remove the
    folder between a reader's freshness check and its open (``features.npy: No such file``)."""

    def text(version: int) -> str:
        return "".join(f"{i % 3} qid:{i // 5} 1:{version} 2:{i}\n" for i in range(2000))

    path = write(tmp_path, text(0))
    root = tmp_path / "cache"
    ctx = multiprocessing.get_context("fork")
    failures = ctx.Queue()
    readers = [ctx.Process(target=_load_repeatedly, args=(path, root, failures)) for _ in range(4)]
    for p in readers:
        p.start()
    for version in range(1, 15):
        (tmp_path / "next.txt").write_text(text(version))
        os.replace(tmp_path / "next.txt", path)  # an atomic edit, as an editor saves
        time.sleep(0.02)
    for p in readers:
        p.join(60)
    assert [p.exitcode for p in readers] == [0, 0, 0, 0]
    assert failures.empty(), failures.get()
    assert load_split(path, name="train", cache_root=root).features[0, 0] == 14


# (6) An edit that keeps the size and the modification time.


def test_an_edit_keeping_size_and_mtime_is_parsed_again(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 1:1.5 2:2\n0 qid:1 1:3 2:4\n")
    root = tmp_path / "cache"
    before = os.stat(path)
    assert load_split(path, name="train", cache_root=root).features[0, 0] == 1.5
    path.write_text("1 qid:1 1:7.5 2:2\n0 qid:1 1:3 2:4\n")  # same size (cp -p, rsync -t)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert load_split(path, name="train", cache_root=root).features[0, 0] == 7.5


def test_a_query_file_edit_keeping_size_and_mtime_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:1\n0 1:2\n2 1:3\n1 1:4\n")
    query = write(tmp_path, "1\n3\n", "f.txt.query")
    root = tmp_path / "cache"
    before = os.stat(query)
    assert load_split(path, name="train", cache_root=root).offsets.tolist() == [0, 1, 4]
    query.write_text("3\n1\n")
    os.utime(query, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert load_split(path, name="train", cache_root=root).offsets.tolist() == [0, 3, 4]


# (7) Byte-order marks, NUL bytes, UTF-16.


@pytest.mark.parametrize("path_kind", PATHS)
@pytest.mark.parametrize("qid", [True, False])
def test_a_utf8_bom_is_skipped(tmp_path: Path, monkeypatch, path_kind: str, qid: bool) -> None:
    text = "1 qid:1 1:1.5 2:2\n0 qid:1 1:3 2:4\n" if qid else "1 1:1.5 2:2\n0 1:3 2:4\n"
    if not qid:
        write(tmp_path, "2\n", "f.txt.query")
    force(monkeypatch, path_kind)
    split = read_letor(write(tmp_path, b"\xef\xbb\xbf" + text.encode()))
    np.testing.assert_array_equal(split.features, [[1.5, 2], [3, 4]])
    np.testing.assert_array_equal(split.labels, [1, 0])


@pytest.mark.parametrize("path_kind", PATHS)
def test_a_bom_in_the_middle_is_named(tmp_path: Path, monkeypatch, path_kind: str) -> None:
    force(monkeypatch, path_kind)
    path = write(tmp_path, b"1 qid:1 1:1\n\xef\xbb\xbf0 qid:1 1:3\n")
    with pytest.raises(DataFormatError, match=r"f.txt:2: .*byte-order mark"):
        read_letor(path)


@pytest.mark.parametrize("path_kind", PATHS)
@pytest.mark.parametrize("line", [b"1 qid:1 1:3\x002:4\n", b"1 qid:1 1:3 2:4\x00\n", b"\x00\x00\n"])
def test_a_nul_byte_is_named(tmp_path: Path, monkeypatch, path_kind: str, line: bytes) -> None:
    force(monkeypatch, path_kind)
    path = write(tmp_path, b"0 qid:1 1:1 2:2\n1 qid:1 1:2 2:3\n" + line)
    with pytest.raises(DataFormatError) as info:
        read_letor(path)
    assert info.value.line == 3
    assert "NUL byte" in str(info.value) and "binary" in str(info.value)


def test_a_nul_byte_in_a_comment_is_only_a_comment(tmp_path: Path) -> None:
    split = read_letor(write(tmp_path, b"0 qid:1 1:1 # doc\x00id\n1 qid:1 1:2\n"))
    assert split.n_items == 2


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("path_kind", PATHS)
def test_a_utf16_file_is_named_as_such(
    tmp_path: Path, monkeypatch, encoding: str, path_kind: str
) -> None:
    force(monkeypatch, path_kind)
    path = write(tmp_path, "0 qid:1 1:1 2:2\n1 qid:1 1:2 2:3\n".encode(encoding))
    with pytest.raises(DataFormatError, match=r"f.txt:1: .*UTF-16.*UTF-8"):
        read_letor(path)


@pytest.mark.parametrize("data", ["\ufeff1\n2\n".encode(), "1\n2\n".encode("utf-16")])
def test_a_query_file_with_a_bom_or_in_utf16(tmp_path: Path, data: bytes) -> None:
    path = write(tmp_path, "1 1:1\n0 1:2\n2 1:3\n")
    write(tmp_path, data, "f.txt.query")
    if data.startswith(b"\xef\xbb\xbf"):
        assert read_letor(path).offsets.tolist() == [0, 1, 3]
    else:
        with pytest.raises(DataFormatError, match=r"f.txt.query:1: .*UTF-16"):
            read_letor(path)


# (7) qid:1.0 and 1.0:<value>: one outcome whatever the path.


@pytest.mark.parametrize(
    "line, accepted",
    [
        ("1 qid:1.0 1:2 2:3", False),
        ("1 qid:1. 1:2 2:3", False),
        ("1 qid:1e0 1:2 2:3", False),
        ("1 qid:+1 1:2 2:3", True),
        ("1 qid:01 1:2 2:3", True),
        ("1 qid:1 1.0:2 2:3", False),
        ("1 qid:1 1e0:2 2:3", False),
        ("1 qid:1 +1:2 2:3", True),
        ("1 qid:1 01:2 2:3", True),
    ],
)
def test_integer_tokens_are_judged_alike_by_every_path(line: str, accepted: bool) -> None:
    block = f"0 qid:1 1:1 2:2\n{line}\n".encode()
    dense = parse_dense(block, 1, True)
    fast = parse_fast(block, 1, True)
    if accepted:
        slow = parse_slow(block, 1, True, Path("x"))
        for quick in (dense, fast):
            assert quick is not None
            np.testing.assert_array_equal(quick.filled().qids, slow.qids)
            np.testing.assert_array_equal(quick.filled().cols, slow.cols)
    else:
        assert dense is None and fast is None
        with pytest.raises(DataFormatError, match=r"x:2: .*(not an integer|bad feature)"):
            parse_slow(block, 1, True, Path("x"))


# (7) An error far into the file names its own line, in every path and chunking.

BAD_LINES = [
    "1 qid:40 1:oops 2:1",  # a bad value
    "1 qid:40 1:1 1:2",  # a feature twice
    "1 qid:4.0 1:1 2:1",  # a qid written as a float
    "1 qid:40 1.0:1 2:1",  # an index written as a float
    "1 1:1 2:1",  # no qid
    "1 qid:40 1:1e39 2:1",  # beyond float32
    "1 qid:40 0:1 2:1",  # index 0
    "1 qid:40 1:1 2:1\x00",  # a NUL byte
]


@pytest.mark.parametrize("bad", BAD_LINES)
@pytest.mark.parametrize("path_kind", PATHS)
def test_errors_name_their_line_across_chunk_boundaries(
    tmp_path: Path, monkeypatch, bad: str, path_kind: str
) -> None:
    force(monkeypatch, path_kind)
    lines = [f"{i % 3} qid:{i // 5} 1:{i} 2:{i * 0.25}\n" for i in range(300)]
    lines[20:20] = ["# a comment\n", "\n"]  # blank and comment lines count as lines
    assert sum(len(line) for line in lines[:130]) > 2 * 600  # several chunks before
    for workers, chunk in ((1, 97), (1, 4096), (2, 600)):
        monkeypatch.setattr(blocks, "_worker_count", lambda path, n=workers: n)
        monkeypatch.setattr(blocks, "CHUNK_BYTES", chunk)
        for where in (130, 150, 151, len(lines) - 1):
            bad_lines = [*lines]
            bad_lines[where] = bad + "\n"
            path = write(tmp_path, "".join(bad_lines))
            with pytest.raises(DataFormatError) as info:
                read_letor(path)
            assert info.value.line == where + 1, (workers, chunk, where, str(info.value))
            assert str(info.value).startswith(f"{path}:{where + 1}: ")


def test_the_cache_folder_respects_the_umask(tmp_path) -> None:
    """Built in a temp folder and renamed into place: mkdir's mode, not mkdtemp's 0o700, so a
    teammate sharing LTR_CACHE_DIR reads it."""
    import os
    import stat

    from scarce_ltr.data.cache import load_split

    source = tmp_path / "train.txt"
    source.write_text("1 qid:1 1:0.5 2:1\n0 qid:1 1:0.2 2:0\n")
    old = os.umask(0o022)
    try:
        load_split(source, name="train", cache_root=tmp_path / "cache")
    finally:
        os.umask(old)
    (entry,) = (tmp_path / "cache").iterdir()
    assert stat.S_IMODE(entry.stat().st_mode) == 0o755
    assert {stat.S_IMODE(p.stat().st_mode) for p in entry.iterdir()} == {0o644}
