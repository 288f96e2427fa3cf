"""A LightGBM ``model.txt`` checked in Python before LightGBM reads it.

LightGBM's own parser trusts its input: a truncated or edited model text can make it read past
the end of the string (a segmentation fault) or throw inside an OpenMP loop (``terminate``, the
process aborts with code 134); neither can be caught. `checked_model_text` reads the text the
way LightGBM will (header ``key=value`` lines, ``Tree=<i>`` blocks of at most 22 ``key=value``
lines closed by a blank line, ``end of trees``, then the importances, parameters and pandas
lines) and refuses, with the line, anything LightGBM could not parse into a sound model: a
missing or extra number in an array, a child index outside its tree or a node reached twice (a
cycle would never end a prediction), a split feature beyond ``max_feature_idx``. What it passes
is the text unchanged, so a valid model loads and scores exactly as before. It costs about
0.25-0.35 s on a 4.2 MB model (300 trees of 127 leaves, 136 features), whose LightGBM load takes
0.08-0.14 s; loading in a child process instead would cost about 2 s of CPU (importing LightGBM).
`tests/test_bundle_safety.py` holds the cases; a fuzz of about 10,000 truncations and 10,000 random
edits of a model passed every text it did not refuse to LightGBM without an abort.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError

_FLOAT = r"-?(?:\d+(?:\.\d+)?(?:e[-+]\d+)?|inf|nan)"  # how LightGBM writes (%.17g)
_INT = r"-?\d{1,10}"
_FLOATS = re.compile(rf"{_FLOAT}(?: {_FLOAT})*")
_INTS = re.compile(rf"{_INT}(?: {_INT})*")
_OBJECTIVE = re.compile(r"[a-z_]+(?: [a-z_]+:[-+.0-9eE]+)*")
_PARAMETER = re.compile(r"\[\w+: [^\n]*\]")
_MAX_FEATURES = 10_000_000
_MAX_LEAVES = 131_072  # LightGBM's own limit on num_leaves
_TREE_LINES = 22  # LightGBM reads at most this many lines of a tree block
# Per tree: key -> (element type, length: "leaves" or "nodes"); the first group is required
# when the tree has a split.
_NODE_ARRAYS = {"left_child": int, "right_child": int, "split_feature": int, "threshold": float}
_OPTIONAL = {
    "split_gain": (float, "nodes"),
    "internal_count": (int, "nodes"),
    "internal_value": (float, "nodes"),
    "internal_weight": (float, "nodes"),
    "decision_type": (int, "nodes"),
    "leaf_weight": (float, "leaves"),
    "leaf_count": (int, "leaves"),
}


_LOOKED_AT = {"left_child", "right_child", "split_feature", "decision_type", "cat_boundaries"}


class _Bad(Exception):
    def __init__(self, line: int, what: str) -> None:
        super().__init__(f"line {line}: {what}")


def checked_model_text(data: bytes, path: Path) -> str:
    """``data`` as text when LightGBM can load it safely; `UserError` naming ``path`` and the
    line otherwise."""
    try:
        text = data.decode("ascii")
        if "\r" in text or "\0" in text:
            raise _Bad(
                text[: max(text.find("\r"), text.find("\0")) + 1].count("\n") + 1,
                "a carriage return or NUL byte",
            )
        _check(text.split("\n"))
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path}: not a LightGBM model (line {line}: a byte that is not ASCII)"
        ) from None
    except _Bad as exc:
        raise UserError(f"{path}: not a LightGBM model ({exc})") from None
    return text


def _check(lines: list[str]) -> None:
    if not lines or lines[0] != "tree":
        raise _Bad(1, "the first line is not 'tree'")
    i = 1
    header: dict[str, str] = {}
    while i < len(lines) and not lines[i].startswith("Tree="):
        if lines[i] == "end of trees":
            raise _Bad(i + 1, "no tree before 'end of trees'")
        if lines[i]:
            key, sep, value = lines[i].partition("=")
            if not sep or not key:
                raise _Bad(i + 1, "not a key=value line")
            header[key] = value
        i += 1
    n_features = _header(header)
    starts = []
    while i < len(lines) and lines[i].startswith("Tree="):
        starts.append(i)
        i = _tree(lines, i, n_features)
        while i < len(lines) and lines[i] == "":
            i += 1
    if i >= len(lines) or lines[i] != "end of trees":
        raise _Bad(min(i, len(lines)) + 1, "'Tree=<i>' or 'end of trees' expected")
    if not starts:
        raise _Bad(i + 1, "no tree")
    if "tree_sizes" in header:
        _sizes(header["tree_sizes"], lines, [*starts, i])
    _tail(lines, i + 1)


def _sizes(value: str, lines: list[str], starts: list[int]) -> None:
    """LightGBM finds each tree at the offsets ``tree_sizes`` gives (in parallel, where an error
    aborts the process): they must be the trees' sizes."""
    offset = np.cumsum([0] + [len(line) + 1 for line in lines[: starts[-1]]])[starts]
    if not _INTS.fullmatch(value) or value.split(" ") != [str(n) for n in np.diff(offset)]:
        raise _Bad(1, "tree_sizes are not the sizes of the trees")


def _header(header: dict[str, str]) -> int:
    for key in ("num_class", "num_tree_per_iteration", "max_feature_idx", "feature_names"):
        if key not in header:
            raise _Bad(1, f"the header has no {key}")
    for key in ("num_class", "num_tree_per_iteration"):
        if header[key] != "1":
            raise _Bad(1, f"{key}={header[key]}; a ranking model has 1")
    if not re.fullmatch(r"\d{1,8}", header["max_feature_idx"]):
        raise _Bad(1, f"max_feature_idx={header['max_feature_idx'][:20]!r} is not a count")
    n_features = int(header["max_feature_idx"]) + 1
    if n_features > _MAX_FEATURES:
        raise _Bad(1, f"max_feature_idx={n_features - 1} is above {_MAX_FEATURES}")
    for key in ("feature_names", "feature_infos"):
        if key in header and len(header[key].split(" ")) != n_features:
            raise _Bad(1, f"{key} does not name max_feature_idx + 1 = {n_features} features")
    if "objective" in header and not _OBJECTIVE.fullmatch(header["objective"]):
        raise _Bad(1, f"objective={header['objective'][:40]!r} is not an objective")
    if "label_index" in header and not re.fullmatch(r"\d{1,8}", header["label_index"]):
        raise _Bad(1, "label_index is not a count")
    return n_features


def _tree(lines: list[str], start: int, n_features: int) -> int:
    """Check the tree block at ``lines[start]`` (``Tree=<i>``); the index after its blank line."""
    if not re.fullmatch(r"Tree=\d{1,9}", lines[start]):
        raise _Bad(start + 1, "'Tree=<i>' expected")
    fields: dict[str, tuple[int, str]] = {}
    i = start + 1
    while i < len(lines) and lines[i] != "":
        key, sep, value = lines[i].partition("=")
        if not sep or not key:
            raise _Bad(i + 1, "not a key=value line in a tree")
        fields[key] = (i + 1, value)
        i += 1
    if i >= len(lines):
        raise _Bad(i, "the tree is cut off (no blank line after it)")
    if i - start - 1 > _TREE_LINES:
        raise _Bad(start + 1, f"a tree of more than {_TREE_LINES} lines")
    leaves = _count(fields, "num_leaves", start)
    n_cat = _count(fields, "num_cat", start)
    if not 1 <= leaves <= _MAX_LEAVES:
        raise _Bad(fields["num_leaves"][0], f"num_leaves={leaves} is not in 1..{_MAX_LEAVES}")
    if "is_linear" in fields and fields["is_linear"][1] != "0":
        raise _Bad(fields["is_linear"][0], "a linear tree (this version reads constant leaves)")
    if "shrinkage" in fields:
        _array(fields, "shrinkage", float, 1)
    _array(fields, "leaf_value", float, leaves, required=start)
    for key, (kind, length) in _OPTIONAL.items():
        # A one-leaf tree (nothing to split: LightGBM learned a constant) has empty arrays.
        if key in fields and not (leaves == 1 and fields[key][1] == ""):
            _array(fields, key, kind, leaves if length == "leaves" else leaves - 1)
    if leaves > 1:
        arrays = {
            k: _array(fields, k, t, leaves - 1, required=start) for k, t in _NODE_ARRAYS.items()
        }
        _structure(arrays, fields, leaves, n_features)
        if n_cat > 0:
            _categories(fields, n_cat, start)
    return i + 1


def _count(fields: dict, key: str, start: int) -> int:
    if key not in fields:
        raise _Bad(start + 1, f"the tree has no {key}")
    line, value = fields[key]
    if not re.fullmatch(r"\d{1,9}", value):
        raise _Bad(line, f"{key}={value[:20]!r} is not a count")
    return int(value)


def _array(fields: dict, key: str, kind: type, length: int, required: int = -1) -> np.ndarray:
    if key not in fields:
        if required >= 0:
            raise _Bad(required + 1, f"the tree has no {key}")
        return np.zeros(0)
    line, value = fields[key]
    if not (_INTS if kind is int else _FLOATS).fullmatch(value):
        raise _Bad(
            line, f"{key} holds something that is not {'an integer' if kind is int else 'a number'}"
        )
    found = value.count(" ") + 1
    if found != length:
        raise _Bad(line, f"{key} has {found} values, the tree needs {length}")
    # Only the children, features and decision types are looked at: the pattern checks the rest.
    return np.array(value.split(" "), dtype=np.int64) if key in _LOOKED_AT else np.zeros(0)


def _structure(arrays: dict, fields: dict, leaves: int, n_features: int) -> None:
    """Every child points inside the tree, and every node but the root and every leaf is the
    child of exactly one node: what a prediction walks from the root is a tree, and ends."""
    children = np.concatenate([arrays["left_child"], arrays["right_child"]])
    nodes = leaves - 1
    if children.min() < -leaves or children.max() >= nodes:
        raise _Bad(fields["left_child"][0], "a child index outside the tree")
    internal = np.bincount(children[children >= 0], minlength=nodes)
    outer = np.bincount(~children[children < 0], minlength=leaves)
    if internal[0] != 0 or (internal[1:] != 1).any() or (outer != 1).any():
        raise _Bad(fields["left_child"][0], "the children do not form a tree")
    feature = arrays["split_feature"]
    if feature.min() < 0 or feature.max() >= n_features:
        raise _Bad(fields["split_feature"][0], f"a split feature outside 0..{n_features - 1}")
    if "decision_type" in fields:
        decision = _array(fields, "decision_type", int, nodes)
        if decision.min() < 0 or decision.max() > 127:
            raise _Bad(fields["decision_type"][0], "a decision type outside 0..127")


def _categories(fields: dict, n_cat: int, start: int) -> None:
    bounds = _array(fields, "cat_boundaries", int, n_cat + 1, required=start)
    if bounds[0] != 0 or (np.diff(bounds) < 0).any():
        raise _Bad(fields["cat_boundaries"][0], "cat_boundaries do not rise from 0")
    _array(fields, "cat_threshold", int, int(bounds[-1]), required=start)


def _tail(lines: list[str], i: int) -> None:
    """After ``end of trees``: blank lines, ``feature_importances:`` with ``name=count`` lines,
    ``parameters:`` ... ``end of parameters``, ``pandas_categorical:<json>``."""
    section = ""
    for n in range(i, len(lines)):
        line = lines[n]
        if line == "":
            continue
        if section == "parameters":
            if line == "end of parameters":
                section = "done"
            elif not _PARAMETER.fullmatch(line):
                raise _Bad(n + 1, "not a '[key: value]' parameter line")
        elif line == "feature_importances:" and section == "":
            section = "importances"
        elif line == "parameters:" and section in ("", "importances"):
            section = "parameters"
        elif section == "importances" and re.fullmatch(r"[^=]+=\d{1,12}", line):
            continue
        elif line.startswith("pandas_categorical:") and section != "pandas":
            try:
                json.loads(line[len("pandas_categorical:") :])
            except (ValueError, RecursionError):
                raise _Bad(n + 1, "pandas_categorical is not JSON") from None
            section = "pandas"
        else:
            raise _Bad(n + 1, "unexpected line after 'end of trees'")
    if section == "parameters":
        raise _Bad(len(lines), "the parameters are cut off (no 'end of parameters')")
