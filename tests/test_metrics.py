"""NDCG: hand-computed values, torch against numpy, numpy against LightGBM and sklearn."""

from __future__ import annotations

import math

import lightgbm
import numpy as np
import pytest
import torch
from sklearn.metrics import ndcg_score

from scarce_ltr.core.metrics import (
    evaluate_ranking,
    mean_ndcg,
    mean_ndcg_at,
    ndcg_per_group,
    precision_per_group,
)
from scarce_ltr.core.metrics_torch import ideal_dcg_torch, mean_ndcg_torch, ndcg_torch

POLICIES = ("skip", "one", "zero")
FILL = {"skip": math.nan, "one": 1.0, "zero": 0.0}
D3 = 1.0 / math.log2(3.0)  # discount of rank 2

# Five QGs: a plain one, two tied items, a single item, no relevant item, no item at all.
HAND_SCORES = np.array([0.1, 0.3, 0.2, 0.5, 0.5, 7.0, 0.3, 0.2, 0.1])
HAND_LABELS = np.array([2.0, 0.0, 1.0, 0.0, 1.0, 3.0, 0.0, 0.0, 0.0])
HAND_OFFSETS = np.array([0, 3, 5, 6, 9, 9])


def hand_expected(k: int, policy: str) -> np.ndarray:
    """NDCG@k of the hand QGs, worked out on paper."""
    # QG 0 ranks its items 1, 2, 0 (labels 0, 1, 2); the ideal order has labels 2, 1, 0.
    dcg = [0.0, D3, D3 + 3.0 / 2.0][min(k, 3) - 1]
    ideal = [3.0, 3.0 + D3, 3.0 + D3][min(k, 3) - 1]
    # QG 1: equal scores keep input order, so the relevant item sits at rank 2.
    tie = 0.0 if k == 1 else D3
    return np.array([dcg / ideal, tie, 1.0, FILL[policy], FILL[policy]])


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("k", [1, 2, 3, 10])
def test_hand_computed_values(k: int, policy: str) -> None:
    got = ndcg_per_group(HAND_SCORES, HAND_LABELS, HAND_OFFSETS, k=k, policy=policy)
    np.testing.assert_allclose(got, hand_expected(k, policy), rtol=0, atol=1e-12)
    mean = mean_ndcg(HAND_SCORES, HAND_LABELS, HAND_OFFSETS, k=k, policy=policy)
    assert mean == pytest.approx(np.nanmean(hand_expected(k, policy)), abs=1e-12)


def test_k_past_the_list_length_is_clipped_not_padded() -> None:
    at_3 = ndcg_per_group(HAND_SCORES, HAND_LABELS, HAND_OFFSETS, k=3)
    at_100 = ndcg_per_group(HAND_SCORES, HAND_LABELS, HAND_OFFSETS, k=100)
    np.testing.assert_array_equal(at_3, at_100)
    assert at_3[0] == pytest.approx((D3 + 1.5) / (3.0 + D3), abs=1e-12)


def test_ties_follow_input_order_even_at_minus_infinity() -> None:
    scores = np.array([-np.inf, -np.inf, 1.0, 0.5, 0.5])
    labels = np.array([0.0, 2.0, 1.0, 1.0, 0.0])
    got = ndcg_per_group(scores, labels, np.array([0, 3, 5]), k=3)
    # QG 0 ranks its items 2, 0, 1 (labels 1, 0, 2); QG 1 keeps its tied items in input order.
    np.testing.assert_allclose(got, [(1.0 + 3.0 / 2.0) / (3.0 + D3), 1.0], atol=1e-12)


def test_mean_over_selected_groups_and_nan_when_nothing_is_left() -> None:
    per_group = ndcg_per_group(HAND_SCORES, HAND_LABELS, HAND_OFFSETS, k=3)
    args = (HAND_SCORES, HAND_LABELS, HAND_OFFSETS)
    by_index = mean_ndcg(*args, k=3, groups=np.array([0, 2]))
    by_mask = mean_ndcg(*args, k=3, groups=np.array([True, False, True, False, False]))
    assert by_index == by_mask == pytest.approx((per_group[0] + 1.0) / 2.0)
    assert math.isnan(mean_ndcg(*args, k=3, groups=[3, 4]))
    assert mean_ndcg(*args, k=3, policy="one", groups=[3, 4]) == 1.0
    assert math.isnan(mean_ndcg(*args, k=3, groups=np.zeros(5, dtype=bool)))


def test_evaluate_ranking_reports_every_cutoff_and_the_outliers() -> None:
    outliers = np.array([True, True, False, True, False])
    report = evaluate_ranking(
        HAND_SCORES, HAND_LABELS, HAND_OFFSETS, ks=(1, 3), outlier_groups=outliers
    )
    assert set(report) == {
        "ndcg@1",
        "ndcg@3",
        "outlier_ndcg@1",
        "outlier_ndcg@3",
        "err@1",
        "err@3",
        "outlier_err@1",
        "outlier_err@3",
        "precision@1",
        "precision@3",
        "outlier_precision@1",
        "outlier_precision@3",
        "mrr",
        "map",
        "outlier_mrr",
        "outlier_map",
        "n_groups_evaluated",
        "n_outlier_groups",
    }
    assert report["ndcg@3"] == pytest.approx(np.nanmean(hand_expected(3, "skip")))
    assert report["outlier_ndcg@1"] == pytest.approx(0.0)  # QGs 0 and 1 both miss at rank 1
    assert report["n_groups_evaluated"] == 3
    assert report["n_outlier_groups"] == 2  # QG 3 has no relevant item, so it is skipped
    plain = evaluate_ranking(HAND_SCORES, HAND_LABELS, HAND_OFFSETS, policy="zero")
    cutoffs = {f"{metric}@{k}" for metric in ("ndcg", "err", "precision") for k in (1, 3, 5, 10)}
    assert set(plain) == cutoffs | {"mrr", "map", "n_groups_evaluated"}
    assert plain["n_groups_evaluated"] == 5


def test_bad_arguments_raise_clear_errors() -> None:
    args = (HAND_SCORES, HAND_LABELS, HAND_OFFSETS)
    with pytest.raises(ValueError, match="'skip', 'one', 'zero'"):
        ndcg_per_group(*args, k=3, policy="ignore")
    with pytest.raises(ValueError, match="'skip', 'one', 'zero'"):
        mask = torch.ones(1, 2, dtype=torch.bool)
        ndcg_torch(torch.zeros(1, 2), torch.zeros(1, 2), mask, k=1, policy="max")
    with pytest.raises(ValueError, match="k"):
        ndcg_per_group(*args, k=0)
    with pytest.raises(ValueError, match="offsets"):
        ndcg_per_group(*args[:2], np.array([0, 3, 8]), k=3)
    with pytest.raises(ValueError, match="NaN"):
        ndcg_per_group(np.where(HAND_SCORES > 5, np.nan, HAND_SCORES), *args[1:], k=3)


def random_groups(
    rng: np.random.Generator, n_groups: int, max_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat QGs with many score ties, some infinite scores and some QGs without relevant items."""
    sizes = rng.integers(0, max_size + 1, n_groups)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    n_items = int(offsets[-1])
    has_relevant = np.repeat(rng.random(n_groups) > 0.2, sizes)
    labels = rng.integers(0, 5, n_items) * has_relevant
    scores = rng.integers(-3, 4, n_items).astype(np.float64)
    scores[rng.random(n_items) < 0.05] = -np.inf
    scores[rng.random(n_items) < 0.05] = np.inf
    return scores, labels.astype(np.float64), offsets


def pad(
    scores: np.ndarray,
    labels: np.ndarray,
    offsets: np.ndarray,
    width: int,
    rng: np.random.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[n_groups, width]`` rows, each QG's items in order at random slots, garbage elsewhere."""
    n_groups = len(offsets) - 1
    padded_scores = rng.choice([np.nan, np.inf, -np.inf, 1e9], size=(n_groups, width))
    padded_labels = rng.choice([np.nan, 9.0, -1.0], size=(n_groups, width))
    mask = np.zeros((n_groups, width), dtype=bool)
    for g in range(n_groups):
        size = offsets[g + 1] - offsets[g]
        slots = np.sort(rng.choice(width, size=size, replace=False))
        padded_scores[g, slots] = scores[offsets[g] : offsets[g + 1]]
        padded_labels[g, slots] = labels[offsets[g] : offsets[g + 1]]
        mask[g, slots] = True
    return torch.from_numpy(padded_scores), torch.from_numpy(padded_labels), torch.from_numpy(mask)


@pytest.mark.parametrize("policy", POLICIES)
def test_torch_matches_numpy_on_padded_batches(policy: str) -> None:
    rng = np.random.default_rng(0)
    scores, labels, offsets = random_groups(rng, n_groups=64, max_size=12)
    padded = pad(scores, labels, offsets, width=12, rng=rng)
    for k in (1, 3, 5, 10, 20):
        want = ndcg_per_group(scores, labels, offsets, k=k, policy=policy)
        got = ndcg_torch(*padded, k=k, policy=policy)
        assert got.dtype == torch.float64
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-9)
        got_mean = mean_ndcg_torch(*padded, k=k, policy=policy).item()
        assert got_mean == pytest.approx(mean_ndcg(scores, labels, offsets, k=k, policy=policy))


def test_torch_is_padding_and_batch_order_invariant() -> None:
    rng = np.random.default_rng(1)
    scores, labels, offsets = random_groups(rng, n_groups=32, max_size=10)
    narrow = pad(scores, labels, offsets, width=10, rng=rng)
    wide = pad(scores, labels, offsets, width=23, rng=rng)
    perm = torch.from_numpy(rng.permutation(32))
    shuffled = [t[perm] for t in narrow]
    for k in (1, 5, 10):
        base = ndcg_torch(*narrow, k=k, policy="zero")
        torch.testing.assert_close(ndcg_torch(*wide, k=k, policy="zero"), base, rtol=0, atol=1e-12)
        torch.testing.assert_close(ndcg_torch(*shuffled, k=k, policy="zero"), base[perm])
        ideal = ideal_dcg_torch(narrow[1], narrow[2], k=k)
        torch.testing.assert_close(
            ideal_dcg_torch(wide[1], wide[2], k=k), ideal, rtol=0, atol=1e-12
        )


def test_torch_accepts_float32_and_integer_labels() -> None:
    rng = np.random.default_rng(2)
    scores, labels, offsets = random_groups(rng, n_groups=16, max_size=8)
    padded_scores, padded_labels, mask = pad(scores, labels, offsets, width=8, rng=rng)
    int_labels = torch.nan_to_num(padded_labels).clamp(min=0).long()
    got = ndcg_torch(padded_scores.float(), int_labels, mask, k=5, policy="one")
    assert got.dtype == torch.float32
    want = ndcg_per_group(scores, labels, offsets, k=5, policy="one")
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-5)


def lightgbm_split(
    rng: np.random.Generator, sizes: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Continuous features and integer labels 0..4 loosely tied to the first feature."""
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    features = rng.normal(size=(int(offsets[-1]), 5))
    noisy = features[:, 0] + 0.7 * rng.normal(size=len(features)) + 1.5
    return features, np.clip(np.round(noisy), 0, 4), offsets


def test_numpy_matches_lightgbm_ndcg_under_policy_one() -> None:
    rng = np.random.default_rng(3)
    train_x, train_y, train_offsets = lightgbm_split(rng, list(rng.integers(5, 30, 40)))
    # Valid QGs: one without relevant item, several shorter than 10, one with a single item,
    # and one whose first three items are copies (equal scores) with rising labels.
    valid_x, valid_y, valid_offsets = lightgbm_split(rng, [12, 3, 1, 20, 8, 15, 7, 6])
    valid_y[valid_offsets[0] : valid_offsets[1]] = 0.0
    tied = slice(valid_offsets[7], valid_offsets[7] + 3)
    valid_x[tied] = valid_x[valid_offsets[7]]
    valid_y[tied] = [0.0, 1.0, 3.0]

    params = {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": [1, 3, 5, 10],
        "verbosity": -1,
        "deterministic": True,
        "num_threads": 1,
        "min_data_in_leaf": 5,
    }
    train = lightgbm.Dataset(train_x, train_y, group=np.diff(train_offsets))
    valid = lightgbm.Dataset(valid_x, valid_y, group=np.diff(valid_offsets), reference=train)
    recorded: dict = {}
    booster = lightgbm.train(
        params,
        train,
        num_boost_round=8,
        valid_sets=[valid],
        valid_names=["vali"],
        callbacks=[lightgbm.record_evaluation(recorded)],
    )
    scores = booster.predict(valid_x)
    assert len(np.unique(scores[tied])) == 1  # the tie really is there
    for k in (1, 3, 5, 10):
        ours = mean_ndcg(scores, valid_y, valid_offsets, k=k, policy="one")
        assert ours == pytest.approx(recorded["vali"][f"ndcg@{k}"][-1], abs=1e-9)


def test_numpy_matches_sklearn_ndcg_score_per_query_under_policy_zero() -> None:
    rng = np.random.default_rng(4)
    sizes = rng.integers(2, 15, 30)  # sklearn refuses lists of one item
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    labels = rng.integers(0, 5, int(offsets[-1])).astype(np.float64)
    labels[offsets[3] : offsets[5]] = 0.0
    scores = rng.normal(size=len(labels))  # continuous: sklearn averages over tied scores
    for k in (1, 3, 5, 10, 20):
        ours = ndcg_per_group(scores, labels, offsets, k=k, policy="zero")
        theirs = [
            ndcg_score((2.0 ** labels[a:b] - 1.0)[None], scores[a:b][None], k=k)
            for a, b in zip(offsets[:-1], offsets[1:], strict=True)
        ]
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


# ---- MRR, MAP, ERR@k ----------------------------------------------------------------------------


def hand_other_metrics(policy: str) -> dict[str, np.ndarray]:
    """MRR, MAP, ERR@2, ERR@3 of the hand QGs, worked out on paper (max grade 3: R = gain / 8).

    QG 0 ranks labels 0, 1, 2: first relevant at rank 2; AP = (1/2 + 2/3) / 2; R = 0, 1/8, 3/8.
    QG 1 (tie, input order) ranks labels 0, 1. QG 2 is one item of label 3 (R = 7/8). QGs 3 and 4
    have no relevant item: the policy's value, as for NDCG.
    """
    f = FILL[policy]
    err3 = 1 / 16 + (1 - 1 / 8) * (3 / 8) / 3
    return {
        "mrr": np.array([0.5, 0.5, 1.0, f, f]),
        "map": np.array([(0.5 + 2 / 3) / 2, 0.5, 1.0, f, f]),
        "err@2": np.array([1 / 16, 1 / 16, 7 / 8, f, f]),
        "err@3": np.array([err3, 1 / 16, 7 / 8, f, f]),
    }


@pytest.mark.parametrize("policy", POLICIES)
def test_mrr_map_err_hand_computed(policy: str) -> None:
    from scarce_ltr.core.metrics import err_per_group, map_per_group, mrr_per_group

    want = hand_other_metrics(policy)
    args = (HAND_SCORES, HAND_LABELS, HAND_OFFSETS)
    got = {
        "mrr": mrr_per_group(*args, policy=policy),
        "map": map_per_group(*args, policy=policy),
        "err@2": err_per_group(*args, k=2, policy=policy),
        "err@3": err_per_group(*args, k=3, max_grade=3, policy=policy),
    }
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-12, err_msg=key)
    report = evaluate_ranking(*args, ks=[2, 3], policy=policy)
    for key in want:
        assert report[key] == pytest.approx(np.nanmean(want[key]), abs=1e-12), key
    assert report["n_groups_evaluated"] == (3 if policy == "skip" else 5)
    # a higher max grade lowers every stop probability: R = 7/16 for label 3
    qg2 = err_per_group(*args, k=1, max_grade=4, policy=policy)[2]
    assert qg2 == pytest.approx(7 / 16, abs=1e-12)
    with pytest.raises(ValueError, match="max_grade"):
        err_per_group(*args, k=1, max_grade=2)


@pytest.mark.parametrize("policy", POLICIES)
def test_outlier_mrr_map_err_average_the_outlier_qgs_only(policy: str) -> None:
    """QGs 0, 2 and 3 are outliers: QG 0 (MRR 1/2, AP 7/12, ERR@1 0, ERR@3 11/64), QG 2 (one
    item of label 3: 1, 1, 7/8, 7/8) and QG 3 (no relevant item: the policy's value)."""
    outliers = np.array([True, False, True, True, False])
    report = evaluate_ranking(
        HAND_SCORES, HAND_LABELS, HAND_OFFSETS, ks=(1, 3), policy=policy, outlier_groups=outliers
    )
    f = FILL[policy]
    want = {
        "outlier_mrr": [0.5, 1.0, f],
        "outlier_map": [7 / 12, 1.0, f],
        "outlier_err@1": [0.0, 7 / 8, f],
        "outlier_err@3": [11 / 64, 7 / 8, f],
    }
    for key, values in want.items():
        assert report[key] == pytest.approx(np.nanmean(values), abs=1e-12), key
    if policy == "skip":
        assert report["outlier_mrr"] == pytest.approx(0.75, abs=1e-12)  # (1/2 + 1) / 2
        assert report["n_outlier_groups"] == 2
    # No outlier QG with a relevant item: NaN under skip, as Outlier-NDCG.
    none = evaluate_ranking(HAND_SCORES, HAND_LABELS, HAND_OFFSETS, ks=(3,), outlier_groups=[3, 4])
    for key in ("outlier_ndcg@3", "outlier_err@3", "outlier_mrr", "outlier_map"):
        assert math.isnan(none[key]), key


def _naive_other(scores, labels, offsets, k: int, max_grade: float) -> list[tuple]:
    out = []
    for g in range(len(offsets) - 1):
        s, y = scores[offsets[g] : offsets[g + 1]], labels[offsets[g] : offsets[g + 1]]
        order = sorted(range(len(s)), key=lambda i: (-s[i], i))
        ranked = [y[i] for i in order]
        if not any(v > 0 for v in ranked):
            out.append((math.nan, math.nan, math.nan, math.nan))
            continue
        mrr = next(1 / (r + 1) for r, v in enumerate(ranked) if v > 0)
        hits, ap = 0, 0.0
        for r, v in enumerate(ranked):
            if v > 0:
                hits += 1
                ap += hits / (r + 1)
        err, reach = 0.0, 1.0
        for r, v in enumerate(ranked[:k]):
            stop = (2**v - 1) / 2**max_grade
            err += reach * stop / (r + 1)
            reach *= 1 - stop
        top = ranked[:k]  # k clipped to the list
        out.append((mrr, ap / hits, err, sum(v > 0 for v in top) / len(top)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mrr_map_err_match_a_naive_loop(seed: int) -> None:
    from scarce_ltr.core.metrics import err_per_group, map_per_group, mrr_per_group

    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 12, size=40)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    labels = rng.integers(0, 5, size=offsets[-1]) * (rng.random(offsets[-1]) < 0.4)
    scores = rng.integers(0, 4, size=offsets[-1]).astype(float)  # many ties
    want = np.array(_naive_other(scores, labels, offsets, k=5, max_grade=4), dtype=float)
    args = (scores, labels, offsets)
    np.testing.assert_allclose(mrr_per_group(*args), want[:, 0], atol=1e-12)
    np.testing.assert_allclose(map_per_group(*args), want[:, 1], atol=1e-12)
    got = err_per_group(*args, k=5, max_grade=4)
    np.testing.assert_allclose(got, want[:, 2], atol=1e-12)
    np.testing.assert_allclose(precision_per_group(*args, k=5), want[:, 3], atol=1e-12)


def test_precision_hand_computed() -> None:
    """The docstring's example: labels [1, 0, 2] in score order: P@1 1, P@2 1/2, P@5 2/3 (k is
    clipped to the 3 items, as NDCG's is); a QG without a relevant item takes the policy."""
    scores, labels = np.array([3.0, 2.0, 1.0, 5.0, 4.0]), np.array([1, 0, 2, 0, 0])
    offsets = np.array([0, 3, 5])
    for k, value in ((1, 1.0), (2, 0.5), (5, 2 / 3)):
        got = precision_per_group(scores, labels, offsets, k=k, policy="zero")
        np.testing.assert_allclose(got, [value, 0.0], atol=1e-12)
    assert math.isnan(precision_per_group(scores, labels, offsets, k=2)[1])  # skip


@pytest.mark.parametrize("policy", POLICIES)
def test_mean_ndcg_at_equals_mean_ndcg_for_every_k(policy: str) -> None:
    """One sort for several cutoffs gives each cutoff's `mean_ndcg` exactly (ties, empty QGs)."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = rng.integers(1, 30, size=rng.integers(1, 40))
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        scores = rng.normal(size=offsets[-1]).round(1)
        labels = rng.integers(0, 5, size=offsets[-1]) * (rng.random(offsets[-1]) < 0.5)
        at = mean_ndcg_at(scores, labels, offsets, ks=(1, 3, 5, 10), policy=policy)
        for k in (1, 3, 5, 10):
            want = mean_ndcg(scores, labels, offsets, k=k, policy=policy)
            assert at[k] == want or (np.isnan(at[k]) and np.isnan(want))
