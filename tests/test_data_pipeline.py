"""Transforms, label scarcity and batches of whole QGs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scarce_ltr.data.batching import DeviceSplit, QueryGroupBatcher
from scarce_ltr.data.ranking_split import RankingSplit, concatenate
from scarce_ltr.data.scarcity import (
    ScarcityConfig,
    apply_scarcity,
    binarize_labels,
    draw_groups,
)
from scarce_ltr.data.transforms import fit_transform, signed_log1p


def make_split(sizes: list[int], n_features: int = 3, seed: int = 0) -> RankingSplit:
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return RankingSplit(
        rng.exponential(5.0, size=(n, n_features)).astype(np.float32),
        rng.integers(0, 5, size=n).astype(np.float32),
        offsets,
        np.arange(len(sizes), dtype=np.int64) + 100,
        "train",
    )


# ---- transforms -------------------------------------------------------------------------------


def test_standardize_uses_train_statistics_only() -> None:
    train, other = make_split([4, 6]), make_split([5], seed=1)
    transform = fit_transform("standardize", train)
    out = transform(train).features
    np.testing.assert_allclose(out.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=0), 1, atol=1e-4)
    expected = (other.features - train.features.mean(0)) / train.features.std(0)
    np.testing.assert_allclose(transform(other).features, expected, rtol=1e-4, atol=1e-5)


def test_signed_log1p_and_clip() -> None:
    np.testing.assert_allclose(signed_log1p(np.array([-3.0, 0.0, 3.0])), [-np.log(4), 0, np.log(4)])
    split = make_split([10])
    out = fit_transform("log1p-standardize", split, clip=0.5)(split).features
    assert out.max() <= 0.5 and out.min() >= -0.5


def test_per_group_standardize_and_constant_features() -> None:
    split = make_split([3, 5])
    features = split.features.copy()
    features[:, 2] = 7.0
    out = fit_transform("qg-standardize", split)(split.with_features(features)).features
    for g in range(2):
        block = out[split.group_slice(g)]
        np.testing.assert_allclose(block[:, :2].mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(block[:, :2].std(0), 1, atol=1e-4)
    np.testing.assert_array_equal(out[:, 2], 0)


def test_unknown_transform() -> None:
    with pytest.raises(ValueError, match="one of none, standardize"):
        fit_transform("bogus", make_split([2]))


# ---- scarcity ---------------------------------------------------------------------------------


def test_draws_are_nested_across_fractions_and_seeded() -> None:
    masks = [draw_groups(1000, f, seed=3, stream=1) for f in (0.001, 0.005, 0.1, 0.5)]
    assert [m.sum() for m in masks] == [1, 5, 100, 500]
    for small, large in zip(masks, masks[1:], strict=False):
        assert np.all(large[small])
    assert np.array_equal(masks[2], draw_groups(1000, 0.1, seed=3, stream=1))
    assert not np.array_equal(masks[2], draw_groups(1000, 0.1, seed=4, stream=1))
    assert draw_groups(5, 0.0001, seed=0, stream=1).sum() == 1


def test_validation_full_or_same_fraction() -> None:
    train, vali = make_split([3] * 200), make_split([3] * 50, seed=2)
    full = apply_scarcity(train, vali, ScarcityConfig(fraction=0.1), seed=0)
    same = apply_scarcity(train, vali, ScarcityConfig(fraction=0.1, val="same"), seed=0)
    assert full.train_labeled.sum() == 20 and full.vali_labeled.all()
    assert same.vali_labeled.sum() == 5
    assert np.array_equal(full.train_labeled, same.train_labeled)
    assert full.labeled_train().n_groups == 20
    assert ScarcityConfig(fraction=0.1, val="same").tag == "frac=0.1,val=same"


def test_a_fixed_label_seed_gives_every_run_seed_the_same_labels() -> None:
    train, vali = make_split([3] * 200), make_split([3] * 50, seed=2)
    fixed = ScarcityConfig(fraction=0.1, val="same", binary_tau=1.5, seed=7)
    runs = [apply_scarcity(train, vali, fixed, seed=s) for s in (0, 1)]
    assert np.array_equal(runs[0].train_labeled, runs[1].train_labeled)
    assert np.array_equal(runs[0].vali_labeled, runs[1].vali_labeled)
    assert np.array_equal(runs[0].train.labels, runs[1].train.labels)  # same Gumbel noise
    own = apply_scarcity(
        train, vali, ScarcityConfig(fraction=0.1, val="same", binary_tau=1.5), seed=7
    )
    assert np.array_equal(own.train_labeled, runs[0].train_labeled)
    assert fixed.tag == "tau=1.5,frac=0.1,val=same,labels=7"


def test_binary_labels_follow_the_gumbel_model() -> None:
    labels = np.repeat(np.arange(5.0), 40_000)
    clicks = binarize_labels(labels, tau=2.5, temperature=4.0, seed=0, stream=1)
    for r in range(5):
        rate = clicks[labels == r].mean()
        assert rate == pytest.approx(1 / (1 + np.exp(-4.0 * (r - 2.5))), abs=0.01)
    again = binarize_labels(labels, tau=2.5, temperature=4.0, seed=0, stream=1)
    assert np.array_equal(clicks, again)


def test_binary_setting_labels_only_groups_with_a_positive() -> None:
    train, vali, test_labels = make_split([5] * 100), make_split([5] * 30, seed=1), None
    setting = apply_scarcity(train, vali, ScarcityConfig(binary_tau=4.5), seed=0)
    assert set(np.unique(setting.train.labels)) <= {0.0, 1.0}
    assert np.array_equal(setting.train_labeled, setting.train.groups_with_relevant())
    assert 0 < setting.train_labeled.sum() < 100
    assert test_labels is None  # test keeps its graded labels: it never passes through here
    assert ScarcityConfig(binary_tau=4.5).tag == "tau=4.5"


def test_bad_scarcity_values() -> None:
    with pytest.raises(ValueError, match="scarcity.fraction"):
        ScarcityConfig(fraction=0)
    with pytest.raises(ValueError, match="scarcity.val"):
        ScarcityConfig(val="some")


# ---- batches ----------------------------------------------------------------------------------


def test_batches_hold_whole_groups_within_the_budget() -> None:
    split = make_split([3, 7, 2, 9, 4, 1, 12])
    batcher = QueryGroupBatcher(split, item_budget=10)
    seen = []
    for batch in batcher:
        b, length, d = batch.features.shape
        assert d == 3 and batch.mask.shape == (b, length)
        real = int(batch.mask.sum())
        assert real <= 10 or b == 1
        for row, g in enumerate(batch.groups.tolist()):
            size = int(split.group_sizes[g])
            assert int(batch.mask[row].sum()) == size
            np.testing.assert_array_equal(
                batch.features[row, :size].numpy(), split.features[split.group_slice(g)]
            )
            np.testing.assert_array_equal(
                batch.labels[row, :size].numpy(), split.labels[split.group_slice(g)]
            )
            assert not batch.mask[row, size:].any()
            assert torch.all(batch.features[row, size:] == 0)
        seen += batch.groups.tolist()
    assert sorted(seen) == list(range(7))
    assert len(batcher) == len(list(batcher))


def test_shuffle_is_seeded_per_epoch() -> None:
    split = make_split([2] * 30)
    batcher = QueryGroupBatcher(split, item_budget=8, shuffle=True, seed=1)
    order = lambda: [g for b in batcher for g in b.groups.tolist()]  # noqa: E731
    first = order()
    assert first == order()
    batcher.set_epoch(1)
    assert first != order()
    assert sorted(first) == list(range(30))


def test_length_buckets_cut_padding_and_keep_every_group_once() -> None:
    sizes = np.random.default_rng(0).lognormal(2.0, 1.0, 400).astype(int).clip(1, 200)
    split = make_split(sizes.tolist())

    def epoch(batcher: QueryGroupBatcher, number: int) -> tuple[list[list[int]], float]:
        batcher.set_epoch(number)
        batches = list(batcher)
        real = sum(int(b.mask.sum()) for b in batches)
        return [b.groups.tolist() for b in batches], sum(b.mask.numel() for b in batches) / real

    plain = QueryGroupBatcher(split, item_budget=64, shuffle=True, seed=3)
    bucketed = QueryGroupBatcher(split, item_budget=64, shuffle=True, seed=3, length_buckets=True)
    _, plain_padding = epoch(plain, 0)
    first, padding = epoch(bucketed, 0)
    assert padding < 1.3 < plain_padding
    assert sorted(g for b in first for g in b) == list(range(400))
    for groups in first:
        assert len(groups) == 1 or split.group_sizes[groups].sum() <= 64
    assert epoch(bucketed, 0)[0] == first  # seeded
    assert epoch(bucketed, 1)[0] != first  # another mix and order every epoch
    # Without it the plan is the one the batcher always made (no change to existing runs).
    assert epoch(plain, 0)[0] == _packed_in_shuffled_order(split, seed=3, budget=64)


def _packed_in_shuffled_order(split, *, seed: int, budget: int) -> list[list[int]]:
    """The plain plan, by hand: QGs in the epoch's shuffled order, packed up to the budget."""
    order = np.random.default_rng([seed, 0]).permutation(split.n_groups)
    batches, current, filled = [], [], 0
    for g in order.tolist():
        size = int(split.group_sizes[g])
        if current and filled + size > budget:
            batches.append(current)
            current, filled = [], 0
        current.append(g)
        filled += size
    batches.append(current)
    return batches


def test_truncation_and_ddp_shards() -> None:
    split = make_split([20, 3, 15, 4, 6, 8, 2])
    batcher = QueryGroupBatcher(split, item_budget=10, max_list_len=5, shuffle=True, seed=0)
    for batch in batcher:
        assert batch.mask.sum(dim=1).max() <= 5
    shards = [list(QueryGroupBatcher(split, item_budget=6, rank=r, world_size=2)) for r in range(2)]
    assert len(shards[0]) == len(shards[1]) > 0
    groups = [set(b.groups.tolist()) for shard in shards for b in shard]
    assert all(a.isdisjoint(b) for i, a in enumerate(groups) for b in groups[i + 1 :])


@pytest.mark.parametrize(
    "options",
    [{}, {"length_buckets": True}, {"max_list_len": 5}, {"rank": 1, "world_size": 2}],
)
def test_batches_gathered_from_a_device_copy_are_the_collated_ones(options) -> None:
    sizes = np.random.default_rng(1).integers(1, 30, 60).tolist()
    split = make_split(sizes)
    held = DeviceSplit.of(split, torch.device("cpu"))
    for epoch in (0, 1):
        host = QueryGroupBatcher(split, item_budget=40, shuffle=True, seed=5, **options)
        gathered = QueryGroupBatcher(
            split, item_budget=40, shuffle=True, seed=5, on_device=held, **options
        )
        host.set_epoch(epoch)
        gathered.set_epoch(epoch)
        pairs = list(zip(host, gathered, strict=True))
        assert pairs
        for a, b in pairs:
            for x, y in zip(a.tensors(), b.tensors(), strict=True):
                assert x.dtype == y.dtype and torch.equal(x, y)


def test_concatenate_and_subset() -> None:
    a, b = make_split([2, 3]), make_split([4], seed=1)
    both = concatenate([a, b], "all")
    assert both.n_groups == 3 and both.n_items == 9
    np.testing.assert_array_equal(both.offsets, [0, 2, 5, 9])
    sub = both.subset(np.array([2, 0]))
    np.testing.assert_array_equal(sub.features[:4], b.features)
    np.testing.assert_array_equal(sub.offsets, [0, 4, 6])


@pytest.mark.parametrize("kind", ["none", "log1p", "standardize", "log1p-standardize"])
@pytest.mark.parametrize("clip", [None, 1.5])
def test_the_blocked_threaded_transform_equals_the_whole_array_formula(kind, clip) -> None:
    """Bit for bit (signed zeros included), over the multi-threaded path (> 2 x 65536 rows)."""
    from scarce_ltr.data.ranking_split import RankingSplit
    from scarce_ltr.data.transforms import FeatureTransform

    rng = np.random.default_rng(0)
    n = 140_000
    x = (rng.standard_normal((n, 5)) * np.array([1e-3, 1, 30, 1e4, 1e7])).astype(np.float32)
    x[::5, 1], x[::7, 2] = -0.0, 0.0
    mean, std = rng.standard_normal(5), rng.random(5) + 0.1
    split = RankingSplit(x, np.zeros(n, np.float32), np.array([0, n]), np.array([0]), "t")
    got = FeatureTransform(kind, mean=mean, std=std, clip=clip)(split).features
    ref = x.astype(np.float64)
    if "log1p" in kind:
        ref = np.sign(ref) * np.log1p(np.abs(ref))
    if "standardize" in kind:
        ref = (ref - mean) / std
    ref = ref.astype(np.float32)
    if clip is not None:
        ref = np.clip(ref, -clip, clip)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
