"""NDCG@k as a scikit-learn scorer, and the rankers whose scores need the QG they are given.

``scoring=ndcg_scorer(k=10)`` in ``GridSearchCV``, ``cross_val_score`` or ``cross_validate``
scores each fold's estimator by its mean NDCG@k over the fold's QGs (`core.metrics.mean_ndcg`:
gain 2^y - 1, the project's convention), with ``qid`` (or ``group``) routed to it by
scikit-learn's metadata routing (``sklearn.set_config(enable_metadata_routing=True)``); the
scorer requests both itself. It scores any ranker whose ``predict`` takes ``(X, qid)``
(`PretrainedRanker`, `TreeRanker`) or ``(X)`` (``lightgbm.LGBMRanker``).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from sklearn.utils.metadata_routing import MetadataRequest

from scarce_ltr.api import inputs
from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.data.ranking_split import QidGroups

POLICIES = ("skip", "zero", "one")


class NDCGScorer:
    """``scorer(estimator, X, y, qid=...)``: the mean NDCG@``k`` of ``estimator.predict`` over
    the QGs of ``qid`` (or ``group`` sizes). ``policy``: a QG without a relevant item is left
    out (``skip``, the project's), counts 0 (``zero``, scikit-learn's ``ndcg_score``) or 1
    (``one``, LightGBM's ``ndcg@k``). No QG left to average is a `ValueError`, never a NaN
    (`GridSearchCV` would rank a NaN last without a word)."""

    def __init__(self, k: int = 5, *, policy: str = "skip") -> None:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"k must be a positive integer (the rank of NDCG@k), got {k!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.k = int(k)
        self.policy = policy

    def __repr__(self) -> str:
        return f"ndcg_scorer(k={self.k}, policy={self.policy!r})"

    def __call__(self, estimator: Any, X, y, qid=None, group=None) -> float:
        n = _n_rows(X)
        if qid is None and group is None:
            raise ValueError(
                f"ndcg@{self.k} needs qid (or group): NDCG is a mean over QGs. Route it: "
                "sklearn.set_config(enable_metadata_routing=True) and pass qid=... to the "
                "search's fit (the scorer requests it)"
            )
        labels = inputs.as_labels(y, n)
        ids = inputs.codes(inputs.query_ids(qid, group, n))[0]
        if "qid" in inspect.signature(estimator.predict).parameters:
            scores = estimator.predict(X, ids)
        else:  # LightGBM's LGBMRanker scores each row alone
            scores = estimator.predict(X)
        groups = QidGroups(ids)
        scores = np.asarray(scores, dtype=np.float64)[groups.order]
        value = mean_ndcg(scores, labels[groups.order], groups.offsets, k=self.k,
                          policy=self.policy)  # fmt: skip
        if np.isnan(value):
            raise ValueError(
                f"ndcg@{self.k}: none of the {groups.n_groups} QGs has a relevant item (label > "
                "0), and policy='skip' leaves every one out; use policy='zero' or 'one' to "
                "count them"
            )
        return float(value)

    def get_metadata_routing(self) -> MetadataRequest:
        """``qid`` and ``group`` requested for ``score``: the search routes them here."""
        request = MetadataRequest(owner=type(self).__name__)
        for name in ("qid", "group"):
            request.score.add_request(param=name, alias=True)
        return request


def ndcg_scorer(k: int = 5, *, policy: str = "skip") -> NDCGScorer:
    """A scikit-learn scorer of mean NDCG@``k`` over QGs (see `NDCGScorer`)."""
    return NDCGScorer(k, policy=policy)


def looks_across_qg(ranker: Any) -> str | None:
    """Why a bundle's score of an item depends on the other items of its QG (a QG-wise
    transform, attention over the QG's items, here or in gbdt-ssl's encoder); None when each
    item is scored alone."""
    from torch import nn

    if getattr(ranker.transform, "kind", None) == "qg-standardize":
        return "its transform qg-standardize standardizes each QG"
    model = ranker.model
    modules = [getattr(model, "module", None)]
    modules.append(getattr(getattr(model, "embedding", None), "encoder", None))
    attention = (nn.TransformerEncoder, nn.TransformerEncoderLayer, nn.MultiheadAttention)
    for module in modules:
        if isinstance(module, nn.Module) and any(
            isinstance(m, attention) for m in module.modules()
        ):
            return "its model attends over the items of a QG"
    return None


def _n_rows(x) -> int:
    shape = getattr(x, "shape", None)
    return int(shape[0]) if shape is not None else len(x)
