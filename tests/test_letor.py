"""The LETOR/SVMlight reader, its binary cache, and the real OHSUMED files."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.cache import cache_dir_for, load_split
from scarce_ltr.data.letor import blocks, read_letor, write_letor
from scarce_ltr.data.letor.lines import parse_slow
from scarce_ltr.data.letor.tokens import parse_fast
from scarce_ltr.data.ranking_split import RankingSplit

OHSUMED = Path(__file__).resolve().parents[2] / "shared" / "data" / "ohsumed-letor3" / "Fold1"


def write(tmp_path: Path, text: str, name: str = "f.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def test_sparse_lines_comments_crlf_and_float_labels(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# a header comment\r\n"
        "2 qid:7 1:0.5 3:2 # docid = 1\r\n"
        "\r\n"
        "0.5 qid:7 2:1e-3\r\n"
        "1 qid:3 3:-4 1:1\r\n",
    )
    split = read_letor(path)
    np.testing.assert_array_equal(split.labels, [2, 0.5, 1])
    np.testing.assert_array_equal(split.qids, [7, 3])
    np.testing.assert_array_equal(split.offsets, [0, 2, 3])
    expected = np.array([[0.5, 0, 2], [0, 1e-3, 0], [1, 0, -4]], dtype=np.float32)
    np.testing.assert_array_equal(split.features, expected)


def test_gzip_and_plain_give_the_same_arrays(tmp_path: Path) -> None:
    text = "1 qid:1 1:1 2:2\n0 qid:1 2:3\n3 qid:2 1:4\n"
    plain = read_letor(write(tmp_path, text))
    zipped = tmp_path / "f.txt.gz"
    zipped.write_bytes(gzip.compress(text.encode()))
    packed = read_letor(zipped)
    for key in ("features", "labels", "offsets", "qids"):
        np.testing.assert_array_equal(getattr(plain, key), getattr(packed, key))


def test_fast_path_equals_line_by_line_reference(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lines = []
    for q in range(40):
        for _ in range(rng.integers(1, 30)):
            idx = np.sort(rng.choice(50, size=rng.integers(0, 12), replace=False)) + 1
            pairs = " ".join(f"{i}:{rng.normal() * 10:.5g}" for i in idx)
            lines.append(f"{rng.integers(0, 5)} qid:{q * 3} {pairs} # c{q}".rstrip())
    block = ("\n".join(lines) + "\n").encode()
    fast = parse_fast(block, 1, True)
    slow = parse_slow(block, 1, True, Path("x"))
    assert fast is not None
    for key in ("labels", "qids", "rows", "cols", "values", "line_numbers"):
        np.testing.assert_array_equal(getattr(fast, key), getattr(slow, key))


def test_lightgbm_style_file_with_query_file(tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:1\n0 2:1\n2 1:3\n")
    (tmp_path / "f.txt.query").write_text("2\n1\n")
    split = read_letor(path)
    np.testing.assert_array_equal(split.offsets, [0, 2, 3])
    assert split.n_features == 2


def test_query_file_that_does_not_add_up(tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:1\n0 2:1\n2 1:3\n")
    (tmp_path / "f.txt.query").write_text("2\n2\n")
    with pytest.raises(DataFormatError, match="add up to 4"):
        read_letor(path)


def test_missing_query_file(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"no f\.txt\.query"):
        read_letor(write(tmp_path, "1 1:1\n"))


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("1 qid:1 1:1\nx qid:1 1:2\n", 2, "bad label 'x'"),
        ("1 qid:1 1:1\n1 1:2\n", 2, "missing qid"),
        ("1 qid:a 1:1\n", 1, "qid 'a' is not an integer"),
        ("1 qid:1.5 1:1\n", 1, "qid '1.5' is not an integer"),
        ("1 qid:1 0:1\n", 1, "feature index 0"),
        ("1 qid:1 -2:1\n", 1, "feature index -2"),
        ("1 qid:1 1:nan\n", 1, "expected a finite number"),
        ("1 qid:1 1:inf\n", 1, "expected a finite number"),
        ("nan qid:1 1:1\n", 1, "expected a finite number"),
        ("1 qid:1 1:1\n1 qid:1 a:1\n", 2, "bad feature 'a:1'"),
        ("1 qid:1 1:1\n1 qid:1 1:1:2\n", 2, "bad value of feature 1 '1:2'"),
        ("1 qid:1 1:1\n1 qid:1 12\n", 2, "bad feature '12'"),
        ("1 qid:1 1:1\n1 qid:2 1:1\n1 qid:1 1:1\n", 3, "qid 1 appears again"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DataFormatError, match=message) as info:
        read_letor(path)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_missing_empty_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="file not found"):
        read_letor(tmp_path / "nope.txt")
    with pytest.raises(DataFormatError, match="no data lines"):
        read_letor(write(tmp_path, "# only a comment\n\n"))
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(gzip.compress(b"1 qid:1 1:1\n" * 100)[:40])
    with pytest.raises(DataFormatError, match="cannot be read"):
        read_letor(broken)


def test_error_in_a_later_chunk_names_the_right_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(blocks, "CHUNK_BYTES", 64)
    lines = [f"1 qid:{i // 3} 1:{i}" for i in range(50)]
    lines[37] = "1 qid:12 1:oops"
    with pytest.raises(DataFormatError, match="oops") as info:
        read_letor(write(tmp_path, "\n".join(lines) + "\n"))
    assert info.value.line == 38


def test_small_chunks_give_the_same_split(tmp_path: Path, monkeypatch) -> None:
    text = "".join(f"{i % 3} qid:{i // 4} 1:{i} 3:{i * 0.5}\n" for i in range(100))
    whole = read_letor(write(tmp_path, text))
    monkeypatch.setattr(blocks, "CHUNK_BYTES", 50)
    pieces = read_letor(write(tmp_path, text, "g.txt"))
    np.testing.assert_array_equal(whole.features, pieces.features)
    np.testing.assert_array_equal(whole.offsets, pieces.offsets)


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    features = rng.random((7, 4)).astype(np.float32)
    split = RankingSplit(
        features, np.array([0, 1, 2, 0, 0, 4, 1], np.float32), np.array([0, 3, 7]), np.array([5, 9])
    )
    write_letor(split, tmp_path / "rt.txt.gz")
    back = read_letor(tmp_path / "rt.txt.gz")
    np.testing.assert_allclose(back.features, features, rtol=1e-5)
    np.testing.assert_array_equal(back.qids, [5, 9])


def test_cache_is_memory_mapped_and_invalidated_on_change(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 1:1\n0 qid:1 2:2\n")
    cache = tmp_path / "cache"
    first = load_split(path, name="train", cache_root=cache)
    again = load_split(path, name="train", cache_root=cache)
    assert isinstance(again.features, np.memmap)
    np.testing.assert_array_equal(first.features, again.features)
    path.write_text("1 qid:1 1:5\n0 qid:2 2:2\n3 qid:2 1:1\n")
    os.utime(path, ns=(1, 10**18))
    changed = load_split(path, name="train", cache_root=cache)
    assert changed.n_items == 3 and changed.n_groups == 2


def test_bad_file_leaves_no_cache_behind(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 1:1\n0 qid:1 2:x\n")
    cache = tmp_path / "cache"
    with pytest.raises(DataFormatError):
        load_split(path, name="train", cache_root=cache)
    leftovers = list(cache.iterdir()) if cache.exists() else []
    assert leftovers == []
    assert not cache_dir_for(path.resolve(), cache).exists()


@pytest.mark.skipif(not OHSUMED.is_dir(), reason="../shared/data/ohsumed-letor3 is not there")
def test_ohsumed_counts() -> None:
    expected = {"train": (63, 9219), "vali": (21, 3538), "test": (22, 3383)}
    for split_name, (groups, items) in expected.items():
        split = read_letor(OHSUMED / f"{split_name}.txt.gz")
        assert (split.n_groups, split.n_items, split.n_features) == (groups, items, 45)
    train = read_letor(OHSUMED / "train.txt.gz")
    assert set(np.unique(train.labels)) == {0.0, 1.0, 2.0}
    assert (~train.groups_with_relevant()).sum() == 1
