"""scarce_ltr.api.ndcg_scorer in scikit-learn's searches, and predict without qid refused where
a score depends on the QG (attention over the QG's items)."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score

from scarce_ltr.api import NDCGScorer, PretrainedRanker, TreeRanker, ndcg_scorer
from scarce_ltr.core.metrics import mean_ndcg

SIZE = 10


def _data(seed: int, n_groups: int):
    rng = np.random.default_rng(seed)
    n = n_groups * SIZE
    x = rng.normal(size=(n, 6))
    y = np.clip(np.round(x[:, 0] + rng.normal(size=n)), 0, 3).astype(int)
    return x, y, np.repeat(np.arange(n_groups), SIZE)


def test_scorer_is_mean_ndcg_at_k_over_qgs() -> None:
    x, y, qid = _data(0, 30)
    ranker = TreeRanker(n_estimators=10, verbose=-1).fit(x, y, qid)
    offsets = np.arange(0, len(y) + 1, SIZE)
    for k in (1, 3, 10):
        expected = mean_ndcg(ranker.predict(x), y, offsets, k=k, policy="skip")
        assert ndcg_scorer(k=k)(ranker, x, y, qid=qid) == pytest.approx(expected, abs=0)
    # rows in any order, and LightGBM's group sizes, give the same value
    shuffle = np.random.default_rng(1).permutation(len(y))
    scorer = ndcg_scorer(k=3)
    assert scorer(ranker, x[shuffle], y[shuffle], qid=qid[shuffle]) == scorer(ranker, x, y, qid=qid)
    assert scorer(ranker, x, y, group=[SIZE] * 30) == scorer(ranker, x, y, qid=qid)
    assert ndcg_scorer(k=5)(ranker, x, y, qid=qid) == ranker.score(x, y, qid)
    with pytest.raises(ValueError, match="needs qid"):
        scorer(ranker, x, y)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        ndcg_scorer(k=0)
    with pytest.raises(ValueError, match="none of the 30 QGs"):
        scorer(ranker, x, np.zeros_like(y), qid=qid)
    assert NDCGScorer(3, policy="one")(ranker, x, np.zeros_like(y), qid=qid) == 1.0


def test_scorer_in_a_search_gets_qid_by_routing() -> None:
    x, y, qid = _data(2, 40)
    with sklearn.config_context(enable_metadata_routing=True):
        ranker = TreeRanker(n_estimators=10, verbose=-1).set_fit_request(qid=True)
        search = GridSearchCV(
            ranker, {"num_leaves": [3, 15]}, cv=GroupKFold(n_splits=3), scoring=ndcg_scorer(k=10)
        )
        search.fit(x, y, qid=qid, groups=qid)
        assert np.isfinite(search.best_score_) and search.best_params_["num_leaves"] in (3, 15)
        scores = cross_val_score(
            ranker,
            x,
            y,
            cv=GroupKFold(n_splits=3),
            scoring=ndcg_scorer(k=1),
            params={"qid": qid, "groups": qid},
        )
        assert len(scores) == 3 and np.all((scores >= 0) & (scores <= 1))


def test_predict_without_qid_is_refused_for_attention() -> None:
    x, y, qid = _data(3, 12)
    v = _data(4, 6)
    attention = {
        "encoder__kind": "attention",
        "encoder__width": 8,
        "encoder__hidden": 16,
        "encoder__n_blocks": 1,
        "encoder__n_heads": 2,
    }
    ranker = PretrainedRanker(None, "full", epochs=1, head_hidden=8, verbose=False, **attention)
    ranker.fit(x, y, qid, eval_set=v)
    with pytest.raises(ValueError, match="predict needs qid .*attends over the items of a QG"):
        ranker.predict(v[0])
    assert ranker.predict(v[0], v[2]).shape == (len(v[1]),)
    mlp = PretrainedRanker(
        None,
        "full",
        epochs=1,
        head_hidden=8,
        verbose=False,
        encoder__width=8,
        encoder__hidden=16,
        encoder__n_blocks=1,
    ).fit(x, y, qid, eval_set=v)
    assert mlp.predict(v[0]).shape == (len(v[1]),)  # an item-wise encoder scores each item alone
