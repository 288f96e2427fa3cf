"""Tests of the synthetic LTR generator: determinism, shapes, and the shape of real LTR data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.synthetic import SyntheticSpec, feature_kinds, generate, generate_with_oracle

SPEC = SyntheticSpec()


@pytest.fixture(scope="module")
def default() -> tuple[dict[str, RankingSplit], dict[str, np.ndarray]]:
    return generate_with_oracle(SPEC)


def _ndcg5(scores: np.ndarray, split: RankingSplit) -> float:
    return mean_ndcg(scores, split.labels, split.offsets, k=5, policy="skip")


def test_same_spec_gives_bit_identical_arrays(default) -> None:
    again = generate(SPEC)
    for name, split in default[0].items():
        for field in ("features", "labels", "offsets", "qids"):
            a, b = getattr(split, field), getattr(again[name], field)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (name, field)


def test_different_seeds_differ(default) -> None:
    other = generate(SyntheticSpec(seed=1))
    for name, split in default[0].items():
        assert split.features.shape[1] == other[name].features.shape[1]
        assert not np.array_equal(split.offsets, other[name].offsets)


def test_train_does_not_depend_on_the_size_of_test(default) -> None:
    smaller = generate(SyntheticSpec(n_test_groups=7))
    assert np.array_equal(default[0]["train"].features, smaller["train"].features)
    assert np.array_equal(default[0]["train"].labels, smaller["train"].labels)
    assert smaller["test"].n_groups == 7


def test_shapes_dtypes_and_offsets(default) -> None:
    splits, oracle = default
    assert set(splits) == {"train", "vali", "test"}
    n_groups = {"train": 300, "vali": 100, "test": 100}
    for name, split in splits.items():
        assert split.name == name
        assert split.n_groups == n_groups[name] and split.n_features == SPEC.n_features
        assert split.features.dtype == np.float32 and split.features.flags.c_contiguous
        assert split.labels.dtype == np.float32 and split.offsets.dtype == np.int64
        assert split.qids.dtype == np.int64 and len(np.unique(split.qids)) == split.n_groups
        assert split.offsets[0] == 0 and np.all(np.diff(split.offsets) > 0)
        assert oracle[name].shape == (split.n_items,)
    # Default size: a few thousand training items.
    assert 3000 < splits["train"].n_items < 10000
    all_qids = np.concatenate([s.qids for s in splits.values()])
    assert len(np.unique(all_qids)) == len(all_qids)


def test_group_sizes_vary_from_a_few_to_hundreds(default) -> None:
    sizes = default[0]["train"].group_sizes
    assert sizes.min() >= SPEC.min_group_size and sizes.max() <= SPEC.max_group_size
    assert sizes.min() <= 3 and sizes.max() >= 100
    big = generate(SyntheticSpec(n_train_groups=4000, mean_group_size=60.0, n_features=8))
    assert big["train"].group_sizes.mean() == pytest.approx(60.0, rel=0.05)


def test_labels_are_graded_mostly_zero_with_empty_groups(default) -> None:
    for split in default[0].values():
        counts = np.bincount(split.labels.astype(np.int64), minlength=5)
        assert set(np.unique(split.labels)) <= {0.0, 1.0, 2.0, 3.0, 4.0}
        assert len(counts) == 5 and counts[0] / split.n_items > 0.7
        assert np.all(counts[1:] > 0)
        without_relevant = 1.0 - split.groups_with_relevant().mean()
        assert 0.1 <= without_relevant <= 0.35


def test_features_are_non_negative_and_heavy_tailed(default) -> None:
    x = default[0]["train"].features
    assert np.all(np.isfinite(x)) and np.all(x >= 0)
    median = np.median(x, axis=0)
    ratio = x.max(axis=0)[median > 0] / median[median > 0]
    assert np.sum(ratio > 20) >= 5


def test_feature_kinds_have_their_shape(default) -> None:
    kinds = feature_kinds(SPEC)
    x, split = default[0]["train"].features, default[0]["train"]
    assert len(kinds) == SPEC.n_features
    assert sum(len(np.unique(x[:, j])) <= 3 for j in range(x.shape[1])) >= 2
    for j, kind in enumerate(kinds):
        if kind == "categorical":
            assert 2 <= len(np.unique(x[:, j])) <= 3
        if kind == "ratio":
            assert x[:, j].max() < 1.0
        if kind == "count":
            assert np.array_equal(x[:, j], np.round(x[:, j]))
        if kind == "query":  # constant within each QG
            first = x[split.offsets[:-1], j]
            assert np.array_equal(x[:, j], np.repeat(first, split.group_sizes))


def test_rare_extreme_values_in_vali_and_test(default) -> None:
    def groups_far_out(splits: dict[str, RankingSplit], name: str) -> set[int]:
        bulk_max = splits["train"].features.max(axis=0)
        far = (splits[name].features > 5 * bulk_max + 1).any(axis=1)
        return set(splits[name].group_index[far].tolist())

    for name in ("vali", "test"):
        expected = math.ceil(SPEC.outlier_group_rate * default[0][name].n_groups)
        assert len(groups_far_out(default[0], name)) == expected
    assert groups_far_out(default[0], "train") == set()
    clean = generate(SyntheticSpec(outlier_group_rate=0.0))
    assert groups_far_out(clean, "test") == set()


def test_features_carry_relevance_but_no_single_feature_does(default) -> None:
    splits, oracle = default
    train, test = splits["train"], splits["test"]
    ridge = Ridge(alpha=1.0).fit(np.log1p(train.features), train.labels)
    linear = _ndcg5(ridge.predict(np.log1p(test.features)), test)
    chance = _ndcg5(np.random.default_rng(0).random(test.n_items), test)
    best_single = max(
        _ndcg5(sign * test.features[:, j], test) for j in range(test.n_features) for sign in (1, -1)
    )
    knows_z = _ndcg5(oracle["test"], test)
    assert linear > chance + 0.2
    assert best_single < linear - 0.05
    # Knowing the latent ranks far better than a linear model: there is structure to learn.
    assert knows_z > linear + 0.15


@pytest.mark.parametrize(
    "field, value",
    [
        ("n_train_groups", 0),
        ("n_features", 5),
        ("latent_dim", 2),
        ("mean_group_size", 500.0),
        ("frac_relevant", 0.0),
        ("outlier_group_rate", 1.5),
        ("label_noise", -1.0),
        ("seed", 1.5),
        ("n_vali_groups", True),
    ],
)
def test_spec_rejects_bad_values(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        SyntheticSpec(**{field: value})
