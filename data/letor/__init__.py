"""Reading SVMlight / LETOR text into a `RankingSplit`.

Accepted lines: ``<label> qid:<int> <index>:<value> ... [# comment]`` with 1-based sparse indices
(absent features are 0), integer or float labels, CRLF or LF line ends, blank and comment-only
lines; plain or gzip-compressed. A carriage return without its line feed (old Mac OS's CR-only
line ends, or a stray one) is refused at its line: read as a space it made one line of many.
Also LightGBM-style files without ``qid:`` and a ``<file>.query`` file beside them holding one
QG size per line. A UTF-8 byte-order mark at the start of a file is
skipped (as most readers do); a NUL byte in a line, which binary and UTF-16 files are full of, is
named as such, and so is a byte-order mark in the middle (files joined with ``cat``).

Every value is checked against what it is stored as: labels and features must be finite in float32
(|x| <= 3.4e38; a larger value would turn into inf and then NaN in every split after standardising),
qids must be integers that float64 holds exactly (|qid| < 2**53), feature indices at most
`MAX_FEATURE_INDEX` (`parsed.py`; the features are dense). A qid or feature index must be written as
an integer (``[+-]?<digits>``): ``qid:1.0`` and ``1.0:<value>`` are refused by every path, as
scikit-learn's `load_svmlight_file` refuses them. A feature index given twice on one line is an
error: the format gives no meaning to it, and taking either value would be a guess. Before the dense
``[n_items, n_features]`` float32 array is allocated its size is checked against the memory
available (`memory.available_memory`): one stray large index would otherwise get the process killed
by the kernel instead of a message naming its line.

Parsing works over chunks of the file, three ways, the first that accepts a chunk wins. Chunks of
dense lines (every line the same features, no comment or blank line: MSLR, Yahoo) go through numpy's
C text reader after a check of the line structure (`dense.parse_dense`); other chunks through
vectorized numpy token code (`tokens.parse_fast`); a chunk either refuses is parsed again line by
line in Python (`lines.parse_slow`), which names the first bad line and says what was expected. All
three give values equal to ``float(token)`` and accept and refuse the same lines; the slow path is
the reference the tests compare the others with. Large files are parsed by forked worker processes
when cores are idle (`blocks.py`, which reads the file block by block).

This package's front is `read_letor` and `write_letor` (whole files) and `line_of_item`; the
QGs come from the qids or a ``.query`` file (`groups.py`); `stream.py` yields a file in pieces
of whole QGs for scoring, through the same parsers and messages.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor.blocks import open_text, parsed_blocks
from scarce_ltr.data.letor.groups import groups_from_qids, offsets_from_query_file
from scarce_ltr.data.letor.memory import check_memory
from scarce_ltr.data.letor.parsed import EXPECTED, parsed_width
from scarce_ltr.data.ranking_split import RankingSplit


def read_letor(path: str | Path, *, name: str | None = None) -> RankingSplit:
    """Parse one LETOR/SVMlight file (plain or ``.gz``) into dense float32 arrays."""
    path = Path(path)
    # float32 values at once (what they are stored as): half the memory while chunks pile up,
    # and half the bytes a worker sends back.
    chunks = list(parsed_blocks(path, None, values_dtype=np.float32))
    if not chunks or not any(len(c.labels) for c in chunks):
        raise DataFormatError(path, None, f"no data lines found ({EXPECTED})")
    labels = np.concatenate([c.labels for c in chunks])
    line_numbers = np.concatenate([c.line_numbers for c in chunks])
    has_qid = chunks[0].has_qid
    n_features = max((parsed_width(c) for c in chunks), default=0)
    check_memory(path, chunks, len(labels), n_features)
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
        offsets, qids = groups_from_qids(line_qids, line_numbers, path)
    else:
        offsets = offsets_from_query_file(path, len(labels))
        qids = np.arange(len(offsets) - 1, dtype=np.int64)
    return RankingSplit(
        features, labels.astype(np.float32), offsets, qids, name or split_name(path)
    )


def split_name(path: Path) -> str:
    return path.name.split(".")[0]


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
