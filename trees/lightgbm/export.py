"""A LightGBM booster that takes raw features: split thresholds mapped back through the transform.

A bundle's booster was trained on transformed features. Every transform the data layer fits is,
per feature, monotone increasing (signed log1p, standardization with a positive std, clipping is
monotone non-decreasing), so ``transform(x) <= t`` holds exactly when ``x <= inverse(t)``: mapping
each split's threshold ``t`` to ``inverse(t)`` gives a booster that scores raw features the same
way, loadable by any LightGBM (Python, C API, CLI) without this project. The exceptions, refused
with a message: ``qg-standardize`` (depends on the whole QG), PCA columns (mix features),
categorical splits, and splits that treat zero as missing (zero moves under the transform).

Items whose transformed value rounds (in float32) onto a threshold may go the other way; LightGBM
puts thresholds between the distinct values it saw, so that is rare, and `export` counts it.
"""

from __future__ import annotations

import re

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.data.transforms import FeatureTransform

_MAX = float(np.finfo(np.float64).max)
_CATEGORICAL = 1
_MISSING_ZERO = 1  # decision_type bits 2-3: 0 None, 1 Zero, 2 NaN


def inverse_transform(
    transform: FeatureTransform, t: np.ndarray, feature: np.ndarray
) -> np.ndarray:
    """Raw values ``x`` with ``transform(x) == t`` for ``t`` on the given features (float64)."""
    if transform.kind == "qg-standardize":
        raise UserError(
            "transform qg-standardize depends on every item of a QG: a tree's split on one "
            "feature has no raw threshold; export the bundle's booster with format=lightgbm only "
            "for runs with transform none, standardize, log1p or log1p-standardize"
        )
    x = np.asarray(t, dtype=np.float64)
    if transform.clip is not None:
        # Values at or beyond the clip all map onto it: the split sends all of them one way.
        x = np.where(x >= transform.clip, np.inf, np.where(x < -transform.clip, -np.inf, x))
    if transform.kind in ("standardize", "log1p-standardize"):
        x = x * transform.std[feature] + transform.mean[feature]
    if transform.kind in ("log1p", "log1p-standardize"):
        with np.errstate(over="ignore"):
            x = np.sign(x) * np.expm1(np.abs(x))
    return np.clip(x, -_MAX, _MAX)


def raw_feature_model(model_text: str, transform: FeatureTransform) -> str:
    """LightGBM's ``model.txt`` with every numerical threshold and feature range mapped to raw
    feature values (see the module docstring)."""
    lines = model_text.split("\n")
    split_feature: np.ndarray | None = None
    for i, line in enumerate(lines):
        key, _, value = line.partition("=")
        if key == "split_feature":
            split_feature = np.array(value.split(), dtype=np.int64)
        elif key == "decision_type":
            decision = np.array(value.split(), dtype=np.int64)
            if np.any(decision & _CATEGORICAL):
                raise UserError(
                    "the booster has categorical splits; format=lightgbm maps numerical ones only"
                )
            if np.any(((decision >> 2) & 3) == _MISSING_ZERO):
                raise UserError(
                    "the booster treats zero as missing (zero_as_missing): zero is not zero "
                    "after the transform, so its splits have no raw equivalent"
                )
        elif key == "threshold" and value:
            assert split_feature is not None, "threshold before split_feature"
            t = np.array(value.split(), dtype=np.float64)
            lines[i] = "threshold=" + " ".join(
                map(repr, inverse_transform(transform, t, split_feature).tolist())
            )
        elif key == "feature_infos":
            lines[i] = "feature_infos=" + " ".join(
                _raw_range(info, j, transform) for j, info in enumerate(value.split(" "))
            )
    return _with_tree_sizes("\n".join(lines))


def _raw_range(info: str, feature: int, transform: FeatureTransform) -> str:
    match = re.fullmatch(r"\[(.+):(.+)\]", info)
    if not match:
        return info  # "none": the feature is unused
    bounds = np.array([float(match[1]), float(match[2])])
    low, high = inverse_transform(transform, bounds, np.array([feature, feature])).tolist()
    return f"[{low!r}:{high!r}]"


def _with_tree_sizes(text: str) -> str:
    """The header's ``tree_sizes`` (bytes of each ``Tree=`` block) recomputed for new text."""
    starts = [m.start() for m in re.finditer(r"^Tree=\d+$", text, flags=re.MULTILINE)]
    end = text.find("end of trees")
    if not starts or end < 0:
        raise UserError("the booster's model text has no trees; is it a LightGBM model.txt?")
    bounds = [*starts, end]
    sizes = [len(text[a:b].encode()) for a, b in zip(bounds, bounds[1:], strict=False)]
    return re.sub(
        r"^tree_sizes=.*$",
        "tree_sizes=" + " ".join(map(str, sizes)),
        text,
        count=1,
        flags=re.MULTILINE,
    )
