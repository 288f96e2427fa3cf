"""The cheap dropout masks: rate, scale, independence, determinism, and the module's modes."""

import math

import pytest
import torch

from scarce_ltr.core.dropout import Dropout, drop_levels, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.5, 0.7])
def test_drop_rate_within_binomial_error_in_every_lane(p):
    n = 400_000
    mask = keep_mask((n,), p, generator=torch.Generator().manual_seed(0))
    dropped = (mask == 0).float()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(dropped.mean().item() - p) < 5 * sigma
    # Each 16-bit lane of a word (every 4th position) keeps the rate: no biased sign bit.
    lanes = dropped.view(-1, 4).mean(0)
    assert torch.all((lanes - p).abs() < 5 * math.sqrt(p * (1 - p) / (n / 4)))


def test_kept_entries_are_scaled_to_an_unbiased_expectation():
    mask = keep_mask((1000,), 0.1, generator=torch.Generator().manual_seed(1))
    kept = mask[mask != 0]
    q = drop_levels(0.1) / 2**16
    assert abs(q - 0.1) <= 2**-17
    assert torch.allclose(kept, torch.full_like(kept, 1 / (1 - q)))


def test_masks_are_independent_across_positions_and_steps():
    gen = torch.Generator().manual_seed(2)
    n, p = 200_000, 0.5
    a = (keep_mask((n,), p, generator=gen) > 0).float()
    b = (keep_mask((n,), p, generator=gen) > 0).float()
    bound = 5 / math.sqrt(n)

    def corr(x, y):
        return torch.corrcoef(torch.stack([x, y]))[0, 1].item()

    assert abs(corr(a, b)) < bound  # the next step's mask
    assert abs(corr(a[:-1], a[1:])) < bound  # neighbouring positions (same word)
    assert abs(corr(a[:-4], a[4:])) < bound  # the same lane of neighbouring words


def test_a_fixed_seed_gives_the_same_masks():
    def draw():
        return keep_mask((7, 33), 0.3, generator=torch.Generator().manual_seed(3))

    assert torch.equal(draw(), draw())
    torch.manual_seed(4)
    x = torch.ones(5, 9)
    first = Dropout(0.3).train()(x)
    torch.manual_seed(4)
    assert torch.equal(first, Dropout(0.3).train()(x))


def test_module_modes_and_gradient():
    x = torch.randn(64, 16, requires_grad=True)
    layer = Dropout(0.4)
    assert layer.eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    torch.manual_seed(5)
    y = layer.train()(x)
    y.sum().backward()
    mask = y.detach() / x.detach()
    assert torch.allclose(x.grad, mask)  # the gradient is the mask itself
    scale = 2**16 / (2**16 - drop_levels(0.4))
    assert torch.all((mask == 0) | ((mask - scale).abs() < 1e-5))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        keep_mask((3,), 1.0)


def test_odd_sizes_and_state_dict():
    mask = keep_mask((3, 5, 7), 0.2, generator=torch.Generator().manual_seed(6))
    assert mask.shape == (3, 5, 7) and mask.dtype == torch.float32
    assert Dropout(0.2).state_dict() == {}
