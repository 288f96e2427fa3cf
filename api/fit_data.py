"""fit's arguments as the stages take them: in-memory splits and the labeled QGs as a mask.

`read` checks every input (nothing runs before) and returns a `FitData`: ``train`` holds every
given QG, labeled and unlabeled, by ascending qid (a ``./run.sh`` data set's own order when its
qids ascend, so a fit on its arrays is the command's run on the same draw), ``labeled`` which of
them carry labels (an unlabeled QG's labels are 0 and never read: no stage trains on them), and
``vali`` the eval set (or a seeded `HOLDOUT_SHARE` of the labeled QGs when none is given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scarce_ltr.api import inputs
from scarce_ltr.data.ranking_split import QidGroups, RankingSplit, concatenate

HOLDOUT_SHARE = 0.2  # of the labeled QGs, for validation when fit gets no eval_set
_HOLDOUT_STREAM = 27


@dataclass(frozen=True)
class FitData:
    """What a fit trains on, and what predict needs to read new rows as fit read these."""

    train: RankingSplit  # every given QG, by ascending qid
    labeled: np.ndarray  # [train.n_groups] bool
    vali: RankingSplit
    names: list[str] | None  # a DataFrame's columns
    categories: dict
    medians: np.ndarray | None  # missing='median': the train medians imputed
    policy: str  # the missing-value policy taken
    config: dict[str, Any]  # the keywords, categorical columns added

    @property
    def splits(self) -> dict[str, RankingSplit]:
        """The stages' ``data``: ``train`` and ``vali`` (no test: nothing is scored on it)."""
        return {"train": self.train, "vali": self.vali}

    @property
    def n_labeled(self) -> int:
        return int(self.labeled.sum())

    @property
    def fraction(self) -> float:
        """The share of labeled QGs: the config's ``scarcity.fraction``, a record only (the
        stages label the mask's QGs, not a draw)."""
        return self.n_labeled / self.train.n_groups


def read(est: Any, X, y, qid, group, unlabeled, sets: list, categorical_feature,
         config: dict[str, Any]) -> FitData:  # fmt: skip
    """Check and group fit's arguments (``sets``: `lgbm.eval_sets`'); ``est`` says which
    missing-value policy, label kind and categorical columns its model takes."""
    policy = est._missing_policy()
    labeled = inputs.as_features(X, arg="X")
    names, categories = labeled.names, labeled.categories
    pieces = {"X": labeled}
    if unlabeled is not None:
        x_u, qid_u = _pair(unlabeled)
        pieces["unlabeled X"] = inputs.as_features(
            x_u, arg="unlabeled X", columns=names, categories=categories
        )
    if sets:
        pieces["eval_set X"] = inputs.as_features(
            sets[0].X, arg="eval_set X", columns=names, categories=categories
        )
    width = labeled.values.shape[1]
    for arg, piece in pieces.items():
        if piece.values.shape[1] != width:
            raise ValueError(f"{arg} has {piece.values.shape[1]} features; X has {width}")
    cat_columns = inputs.categorical_columns(categorical_feature, categories, names, width)
    if cat_columns:
        config = est._with_categorical(config, cat_columns)
    raw = [inputs.query_ids(qid, group, len(labeled.values))]
    if unlabeled is not None:
        raw.append(inputs.as_raw_qids(qid_u, len(pieces["unlabeled X"].values),
                                      arg="unlabeled qid"))  # fmt: skip
    qids = inputs.codes(*raw)
    integer = est._integer_labels()
    splits = {"train": _split(labeled, y, qids[0], "", integer=integer)}
    if unlabeled is not None:
        splits["unlabeled"] = _split(pieces["unlabeled X"], None, qids[1], "unlabeled ")
        _check_disjoint(raw, qids)
    if sets:
        v = sets[0]
        raw_v = inputs.query_ids(v.qid, v.group, len(pieces["eval_set X"].values),
                                 what="eval_set ")  # fmt: skip
        splits["vali"] = _split(pieces["eval_set X"], v.y, inputs.codes(raw_v)[0],
                                "eval_set ", integer=integer)  # fmt: skip
    if splits["train"].n_items == 0:
        raise ValueError("the labeled set is empty: X, y and qid have no row")
    every = np.concatenate([splits[s].features for s in splits if s != "vali"])
    inputs.check_columns(inputs.Features(every, names), arg="X and unlabeled X")
    medians = None
    if policy == "median":
        medians = np.nanmedian(every, axis=0).astype(np.float32)
        splits = {k: s.with_features(inputs.impute(s.features, medians)) for k, s in splits.items()}
    for arg, split in zip(("X", "unlabeled X", "eval_set X"), splits.values(), strict=False):
        inputs.check_missing(inputs.Features(split.features, names), policy, arg=arg)
    if "vali" not in splits:
        seed = int(config.get("seed", 0))
        splits["train"], splits["vali"] = holdout(splits["train"], seed=seed)
    for name in ("train", "vali"):
        if not splits[name].groups_with_relevant().any():
            what = "y" if name == "train" else "eval_set's y"
            raise ValueError(f"{what} has no label above 0: no QG has a relevant item")
    train, mask = with_unlabeled(splits["train"], splits.get("unlabeled"))
    return FitData(train, mask, splits["vali"], names, categories, medians, policy, config)


def with_unlabeled(
    labeled: RankingSplit, unlabeled: RankingSplit | None
) -> tuple[RankingSplit, np.ndarray]:
    """The train split of every QG by ascending qid (the unlabeled ones with label 0), and
    ``[n_groups]`` bool: which are ``labeled``'s."""
    if unlabeled is None:
        return labeled, np.ones(labeled.n_groups, dtype=bool)
    unlabeled = unlabeled.with_labels(np.zeros(unlabeled.n_items, dtype=np.float32))
    both = concatenate([labeled, unlabeled], "train")
    order = np.argsort(both.qids, kind="stable")
    return both.subset(order), order < labeled.n_groups


def holdout(labeled: RankingSplit, *, seed: int) -> tuple[RankingSplit, RankingSplit]:
    """``(train, vali)``: a seeded `HOLDOUT_SHARE` of the labeled QGs held out for validation."""
    n = labeled.n_groups
    if n < 2:
        raise ValueError(
            "one labeled QG cannot be both trained and validated on: give eval_set=(X, y, qid) "
            "or more labeled QGs"
        )
    n_vali = min(n - 1, max(1, round(HOLDOUT_SHARE * n)))
    chosen = np.zeros(n, dtype=bool)
    chosen[np.random.default_rng([seed, _HOLDOUT_STREAM]).permutation(n)[:n_vali]] = True
    train, vali = labeled.subset(np.flatnonzero(~chosen)), labeled.subset(np.flatnonzero(chosen))
    return train, RankingSplit(vali.features, vali.labels, vali.offsets, vali.qids, "vali")


def _split(
    features: inputs.Features, y, qids: np.ndarray, what: str, *, integer: str | None = None
) -> RankingSplit:
    """Rows grouped stably by qid (numbered, `inputs.codes`; QGs by ascending qid) as a split;
    ``integer``: the model that takes integer labels only (`inputs.as_labels`)."""
    n = len(features.values)
    if y is None:
        labels = np.zeros(n, dtype=np.float32)
    else:
        labels = inputs.as_labels(y, n, arg=f"{what}y", integer=integer)
    groups = QidGroups(qids)
    return RankingSplit(
        features.values[groups.order], labels[groups.order], groups.offsets, groups.qids,
        "vali" if what == "eval_set " else "train",
    )  # fmt: skip


def _check_disjoint(raw: list[np.ndarray], numbers: list[np.ndarray]) -> None:
    both = np.intersect1d(numbers[0], numbers[1])
    if len(both):
        value = raw[0][int(np.flatnonzero(numbers[0] == both[0])[0])]
        raise ValueError(
            f"qid {value!r} is in both the labeled and the unlabeled rows: a QG is labeled or not"
        )


def _pair(value) -> tuple:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError("unlabeled must be a pair (X_u, qid_u)")
    return tuple(value)
