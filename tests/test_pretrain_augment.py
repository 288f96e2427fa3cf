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


def test_subtab_subsets_overlap_and_cover_every_feature():
    members = feature_subsets(40, subsets=4, overlap=0.75, seed=0)
    assert members.shape == (4, 40) and members.any(0).all()
    sizes = members.sum(1)
    assert sizes.min() > 10  # a block (10) widened by the overlap
    assert (members[0] & members[1]).any()
    features, mask = _batch()
    kept = keep_features(features, mask, columns=torch.tensor([0, 2]))
    assert torch.all(kept[..., [1, 3, 4]] == 0)
    torch.testing.assert_close(kept[..., [0, 2]], features[..., [0, 2]])
