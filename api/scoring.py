"""NDCG@k as a scikit-learn scorer, and the rankers whose scores need the QG they are given.

``scoring=ndcg_scorer(k=10)`` in ``GridSearchCV``, ``cross_val_score`` or ``cross_validate``
scores each fold's estimator by its mean NDCG@k over the fold's QGs (`core.metrics.mean_ndcg`:
gain 2^y - 1, the project's convention), with ``qid`` (or ``group``) routed to it by
scikit-learn's metadata routing (``sklearn.set_config(enable_metadata_routing=True)``); the
scorer requests both itself. It scores any ranker whose ``predict`` takes ``(X, qid)``
(`PretrainedRanker`, `TreeRanker`) or ``(X)`` (``lightgbm.LGBMRanker``). `Scores` is the
estimators' own ``predict`` and ``score``.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from sklearn.utils.metadata_routing import MetadataRequest

from scarce_ltr.api import inputs
from scarce_ltr.api.stages import leaves
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


class Scores:
    """``predict`` and ``score`` of a `scarce_ltr.api.base.Ranker` (``ranker_`` its model)."""

    def predict(self, X, qid=None, *, group=None) -> np.ndarray:
        """``[n_items]`` float64 scores of raw ``X``, in the input order; ``qid`` (any
        hashable ids) in any order, or LightGBM's ``group`` sizes (neither: all rows are one
        QG, refused where a score depends on the QG: attention, qg-standardize). A
        DataFrame's columns are matched by name."""
        ranker = self._fitted()
        features = self._features(X)
        n = len(features)
        if qid is None and group is None:
            why = looks_across_qg(ranker)  # a tree or an MLP scores each item alone
            if why is not None:
                raise ValueError(
                    f"predict needs qid (or group): {why}, so all rows as one QG would be "
                    "silently wrong scores; pass the QG of each row"
                )
            qids = np.zeros(n, dtype=np.int64)
        else:
            qids = inputs.codes(inputs.query_ids(qid, group, n))[0]
        groups = QidGroups(qids)
        scores = ranker.predict(features[groups.order], groups.item_qids())
        return groups.to_input_order(scores)

    def score(self, X, y, qid=None, *, group=None, sample_weight=None) -> float:
        """Mean NDCG@5 over the QGs of ``(X, y, qid)`` (`scarce_ltr.core.metrics`: gain
        2^y - 1, QGs without a relevant item skipped unless ``metrics__policy`` says).
        ``qid`` is required: scikit-learn's tools pass it with metadata routing.
        ``sample_weight``: scikit-learn's score argument; None only (QGs count the same).
        When no QG has a relevant item and the policy skips them, there is no NDCG to average:
        a `ValueError`, never a NaN (GridSearchCV would rank it silently)."""
        self._fitted()
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported: every QG counts the same in NDCG")
        n = self._features(X).shape[0]  # a sparse matrix has no len
        if qid is None and group is None:
            raise ValueError(
                f"score needs qid (or group): NDCG is a mean over QGs. In scikit-learn's tools "
                f"(GridSearchCV, cross_val_score, Pipeline) route it: sklearn.set_config("
                f"enable_metadata_routing=True) and {type(self).__name__}(...)"
                ".set_score_request(qid=True)"
            )
        labels = inputs.as_labels(y, n)
        qids = inputs.codes(inputs.query_ids(qid, group, n))[0]
        groups = QidGroups(qids)
        scores = self.predict(X, qids)[groups.order]
        config = getattr(self, "_config", None) or self.config_params()
        policy = dict(leaves(config)).get("metrics.policy", "skip")
        value = mean_ndcg(scores, labels[groups.order], groups.offsets, k=5, policy=policy)
        if np.isnan(value):  # policy skip, and every QG skipped: DESIGN.md's "no defined NDCG"
            raise ValueError(
                f"score: none of the {groups.n_groups} QGs of y has a relevant item (label > 0), "
                "so NDCG@5 is undefined for each and metrics__policy='skip' (the default) leaves "
                "every one out; score QGs that have one, or fit with metrics__policy='zero' "
                "(scikit-learn's ndcg_score: 0) or 'one' (LightGBM's: 1) to count them"
            )
        return value

    def _features(self, X) -> np.ndarray:
        names = getattr(self, "feature_names_in_", None)
        columns = None if names is None else [str(n) for n in names]
        features = inputs.as_features(
            X,
            arg="X",
            columns=columns if inputs.is_dataframe(X) else None,
            categories=getattr(self, "categories_", None) or {},
        )
        if features.values.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {features.values.shape[1]} features; the ranker was fit on "
                f"{self.n_features_in_}"
            )
        values = features.values
        if self.medians_ is not None:
            values = inputs.impute(values, self.medians_)
        inputs.check_missing(inputs.Features(values, features.names), self.missing_)
        return values


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
