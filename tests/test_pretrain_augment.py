"""Augmentations: reproducible from a seed, padding untouched and irrelevant, rates as asked."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch.nn import functional as F

from scarce_ltr.pretrain.augmentations import (
    compose,
    corrupt,
    gaussian_noise,
    keep_features,
    marginal_corruption,
    mixup_noise,
    scarf_corruption,
    swap_noise,
    view_augmentation,
    zero_features,
)
from scarce_ltr.pretrain.objectives.subtab import feature_subsets

AUGMENTATIONS = {
    "zero": partial(zero_features, p=0.3),
    "noise": partial(gaussian_noise, scale=1.0),
    "corrupt": partial(corrupt, p=0.5),
    "mixup": partial(mixup_noise, alpha=0.5),
    "composed": view_augmentation(zero_p=0.2, noise_scale=0.5),
}


def _batch(width: int = 6):
    gen = torch.Generator().manual_seed(0)
    sizes = torch.tensor([6, 2, 4])
    mask = torch.arange(width)[None, :] < sizes[:, None]
    features = torch.randn(3, width, 5, generator=gen) * mask[..., None]
    return features, mask


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", AUGMENTATIONS)
def test_reproducible_from_the_seed(name):
    augment = AUGMENTATIONS[name]
    features, mask = _batch()
    a = augment(features, mask, generator=_gen(1))
    b = augment(features, mask, generator=_gen(1))
    c = augment(features, mask, generator=_gen(2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("name", AUGMENTATIONS)
def test_padding_stays_zero_and_does_not_matter(name):
    augment = AUGMENTATIONS[name]
    features, mask = _batch()
    out = augment(features, mask, generator=_gen(3))
    assert torch.all(out[~mask] == 0)
    wide_features = F.pad(features, (0, 0, 0, 4), value=7.0)  # garbage in the padding
    wide = augment(wide_features, F.pad(mask, (0, 4)), generator=_gen(3))
    torch.testing.assert_close(wide[:, :6], out)
    assert torch.all(wide[:, 6:] == 0)


@pytest.mark.parametrize("name", AUGMENTATIONS)
def test_items_form_equals_the_padded_form(name):
    augment = AUGMENTATIONS[name]
    features, mask = _batch()
    padded = augment(features, mask, generator=_gen(4))
    items = augment(features[mask], None, generator=_gen(4))
    torch.testing.assert_close(items, padded[mask])


def test_rates_and_scales():
    features = torch.ones(1, 20000, 4)
    mask = torch.ones(1, 20000, dtype=torch.bool)
    zeroed = zero_features(features, mask, p=0.3, generator=_gen(0))
    assert float((zeroed == 0).float().mean()) == pytest.approx(0.3, abs=0.01)
    noisy = gaussian_noise(features, mask, scale=2.0, generator=_gen(0))
    assert float((noisy - 1).std()) == pytest.approx(2.0, abs=0.05)
    assert torch.equal(view_augmentation()(features, mask, generator=_gen(0)), features)


def test_marginal_corruption_draws_from_the_same_feature_of_real_items():
    features, mask = _batch()
    features = features + 10 * torch.arange(5.0)  # column j lives near 10 * j
    features = features * mask[..., None]
    out, drawn = marginal_corruption(features, mask, p=0.7, generator=_gen(0))
    real = features[mask]
    for j in range(5):
        column = set(real[:, j].tolist())
        assert set(out[mask][:, j].tolist()) <= column  # never padding zeros, never other columns
    assert drawn[mask].float().mean() > 0.4 and not drawn[~mask].any()
    unchanged = ~drawn[mask]
    assert torch.equal(out[mask][unchanged], real[unchanged])


def test_mixup_keeps_at_least_alpha_of_the_item():
    features, mask = _batch()
    same = mixup_noise(features, mask, alpha=1.0, generator=_gen(0))
    torch.testing.assert_close(same, features)
    mixed = mixup_noise(features, mask, alpha=0.5, generator=_gen(0))
    assert not torch.allclose(mixed, features)


def test_compose_applies_in_order():
    features, mask = _batch()
    composed = compose(partial(zero_features, p=0.5), partial(gaussian_noise, scale=1.0))
    gen_a, gen_b = _gen(5), _gen(5)
    by_hand = gaussian_noise(
        zero_features(features, mask, p=0.5, generator=gen_b), mask, scale=1.0, generator=gen_b
    )
    torch.testing.assert_close(composed(features, mask, generator=gen_a), by_hand)


def test_subtab_subsets_are_subtabs_equal_overlapping_blocks():
    members = feature_subsets(136, subsets=4, overlap=0.75)
    assert members.shape == (4, 136) and members.any(0).all()
    assert members.sum(1).tolist() == [59, 59, 59, 59]  # 34 + floor(0.75 * 34)
    starts = [int(torch.nonzero(m)[0, 0]) for m in members]
    assert starts == [0, 9, 43, 77] and bool(members[3, 135])
    assert [int((members[k] & members[k + 1]).sum()) for k in range(3)] == [50, 25, 25]
    assert not feature_subsets(46, subsets=4, overlap=0.75)[:, 44:].any()  # SubTab drops 2
    features, mask = _batch()
    kept = keep_features(features, mask, columns=torch.tensor([0, 2]))
    assert torch.all(kept[..., [1, 3, 4]] == 0)
    torch.testing.assert_close(kept[..., [0, 2]], features[..., [0, 2]])


@pytest.mark.parametrize("rate", [0.3, 0.6, 0.9])
def test_scarf_corrupts_exactly_floor_c_d_features_from_the_training_set(rate):
    features, mask = _batch()
    n_features = features.shape[-1]
    rows = torch.arange(50, dtype=torch.float32)[:, None]
    table = 1000.0 + 100.0 * rows + torch.arange(n_features, dtype=torch.float32)[None, :]
    out = scarf_corruption(features, mask, rate=rate, table=table, generator=_gen(3))
    changed = (out != features)[mask]
    assert changed.sum(1).tolist() == [int(rate * n_features)] * int(mask.sum())
    donors = out[mask][changed]
    columns = torch.nonzero(changed)[:, 1]
    assert torch.all(donors >= 1000) and torch.all(donors % 100 == columns)  # same feature
    assert len(torch.unique((donors - 1000) // 100)) > 1  # rows of the table, not one
    assert torch.all(out[~mask] == 0)


def test_swap_noise_swaps_within_each_feature_of_the_batch():
    features, mask = _batch()
    out = swap_noise(features, mask, p=0.5, generator=_gen(4))
    items, noisy = features[mask], out[mask]
    for j in range(items.shape[1]):  # a feature's values come from the same feature
        assert set(noisy[:, j].tolist()) <= set(items[:, j].tolist())
    share = float((noisy != items).float().mean())
    assert 0.2 < share < 0.6  # p = 0.5 less the swaps that land on an equal value
