"""Issue 62 item 6: no input blows up memory or time.

A LETOR line that never ends (valid lines, then hundreds of MB without a line feed: zeros, or
the NUL bytes of a sparse file) is refused at its line once it passes `blocks.MAX_LINE_BYTES`,
in time and memory linear in that bound (it took 31 s and 5.8 GB for 256 MB, gathering the line
block by block). The parses run in a child process under an address-space limit, so the test
fails, not the machine, where the bound is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor import blocks, read_letor
from scarce_ltr.data.letor.groups import query_sizes

VALID = b"1 qid:1 1:0.5 2:1\n0 qid:1 1:0.25 2:0\n2 qid:2 1:1 2:0.5\n"
LIMIT_BYTES = 2 << 30  # the child's address space: far below the 5.8 GB the old reader took

# Parse the file in argv[1] as training (read_letor) and as predict does (stream_letor); print
# each error's message and the seconds it took, as JSON.
CHILD = """
import json, sys, time, resource
from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor import read_letor
from scarce_ltr.data.letor.stream import stream_letor
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
out = []
for read in (read_letor, lambda p: list(stream_letor(p, n_features=2, too_wide="x"))):
    start = time.perf_counter()
    try:
        read(sys.argv[1])
        out.append(["no error", 0.0])
    except DataFormatError as exc:
        out.append([str(exc), time.perf_counter() - start])
print(json.dumps(out))
"""


def _parse_in_child(path: Path) -> list[tuple[str, float]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", CHILD, str(path), str(LIMIT_BYTES)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


@pytest.mark.parametrize("kind", ["zeros", "sparse"])
def test_a_line_that_never_ends_is_refused_at_its_line_quickly(tmp_path: Path, kind) -> None:
    path = tmp_path / "train.txt"
    size = 256 << 20
    with open(path, "wb") as f:
        f.write(VALID)
        if kind == "zeros":
            block = b"0" * (1 << 20)
            for _ in range(size >> 20):
                f.write(block)
        else:
            f.truncate(len(VALID) + size)  # a hole: NUL bytes that take no disk
    start = time.perf_counter()
    for message, seconds in _parse_in_child(path):
        assert message.startswith(f"{path}:4: ") and "longer than" in message, message
        assert seconds < 10, seconds
    assert time.perf_counter() - start < 60


def test_the_bound_is_generous_and_a_long_line_below_it_is_read(tmp_path, monkeypatch) -> None:
    assert blocks.MAX_LINE_BYTES >= 8 << 20  # 1000 times the widest public LETOR line
    monkeypatch.setattr(blocks, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(blocks, "CHUNK_BYTES", 1000)  # the line spans several blocks
    wide = b"1 qid:3 " + b" ".join(b"%d:1" % i for i in range(1, 700))  # 4093 bytes
    path = tmp_path / "f.txt"
    path.write_bytes(VALID + wide + b"\n")
    split = read_letor(path)
    assert split.features.shape == (4, 699) and split.features[3].sum() == 699
    path.write_bytes(VALID + wide + b" 700:1\n")  # 4099 bytes
    with pytest.raises(DataFormatError, match=r"f\.txt:4: .*longer than 4,096 bytes"):
        read_letor(path)


def test_a_query_file_line_of_many_digits_is_one_line(tmp_path: Path) -> None:
    """A ``.query`` line of thousands of digits (Python refuses int() of such strings) names
    the file and line, not a traceback."""
    path = tmp_path / "train.txt"
    path.write_bytes(b"1 1:0.5\n0 1:0.25\n")
    (tmp_path / "train.txt.query").write_bytes(b"1\n" + b"9" * 5000 + b"\n")
    with pytest.raises(DataFormatError, match=r"train\.txt\.query:2: '9{40}\.\.\.' is not a "):
        query_sizes(path)
    (tmp_path / "train.txt.query").write_bytes(b"1\n" + b"0" * 5000 + b"1\n")
    assert query_sizes(path).tolist() == [1, 1]
