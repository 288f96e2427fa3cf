"""Pretraining losses against naive implementations, padding invariance, and every objective's
loss falling on a toy problem."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from scarce_ltr.core.config import available, load_config
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.objectives import OBJECTIVES, build_objective
from scarce_ltr.pretrain.objectives.base import NEG
from scarce_ltr.pretrain.objectives.scarf import scarf_loss
from scarce_ltr.pretrain.objectives.simclr import simclr_loss
from scarce_ltr.pretrain.objectives.simclr_rank import _InQueryInfoNCE, simclr_rank_loss
from scarce_ltr.pretrain.objectives.simsiam import simsiam_loss

METHODS = tuple(OBJECTIVES)

TAU = 0.3


def _naive_infonce(anchor: int, pool: torch.Tensor, positive: int, tau: float) -> float:
    """-cos(anchor, positive)/tau + log sum over pool rows except the anchor, in plain Python."""
    unit = [row / row.norm() for row in pool]
    sims = [float(unit[anchor] @ unit[j]) / tau for j in range(len(pool))]
    denominator = sum(math.exp(s) for j, s in enumerate(sims) if j != anchor)
    return -sims[positive] + math.log(denominator)


def _naive_simclr_rank(z0, z1, sizes: list[int], tau: float) -> float:
    """Eq. 3 with a Python loop over QGs and items: each item's l^0 + l^1, averaged over the
    items of QGs with >= 2 items."""
    total, count = 0.0, 0
    for q, n in enumerate(sizes):
        if n < 2:
            continue
        pool = torch.cat([z0[q, :n], z1[q, :n]]).double()
        for i in range(n):
            total += _naive_infonce(i, pool, n + i, tau) + _naive_infonce(n + i, pool, i, tau)
            count += 1
    return total / count


def _padded(sizes: list[int], width: int, dim: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    z0 = torch.randn(len(sizes), width, dim, generator=gen)
    z1 = z0 + 0.5 * torch.randn(len(sizes), width, dim, generator=gen)
    mask = torch.arange(width)[None, :] < torch.tensor(sizes)[:, None]
    return z0, z1, mask


def test_simclr_rank_matches_a_per_group_loop():
    sizes = [5, 1, 3, 17, 2, 9]  # a one-item QG and lengths in several buckets
    z0, z1, mask = _padded(sizes, 20, 8, seed=0)
    loss = simclr_rank_loss(z0, z1, mask, temperature=TAU)
    assert float(loss) == pytest.approx(_naive_simclr_rank(z0, z1, sizes, TAU), abs=1e-5)


def test_simclr_rank_ignores_padding_width_and_other_groups():
    sizes = [4, 6, 3]
    z0, z1, mask = _padded(sizes, 6, 5, seed=1)
    per_item = simclr_rank_loss(z0, z1, mask, temperature=TAU, reduction="none")
    # Wider padding, filled with garbage.
    pad = torch.full((3, 7, 5), 99.0)
    wide = simclr_rank_loss(
        torch.cat([z0, pad], 1),
        torch.cat([z1, -pad], 1),
        F.pad(mask, (0, 7)),
        temperature=TAU,
        reduction="none",
    )
    torch.testing.assert_close(wide[:, :6], per_item, atol=1e-6, rtol=0)
    assert float(simclr_rank_loss(z0, z1, mask, temperature=TAU)) == pytest.approx(
        float(per_item.sum() / mask.sum()), abs=1e-6
    )
    # Other QGs' contents change: the first QG's item losses and gradients do not.
    z0b, z1b = z0.clone(), z1.clone()
    z0b[1:] = torch.randn_like(z0b[1:])
    z1b[1:] = torch.randn_like(z1b[1:])
    other = simclr_rank_loss(z0b, z1b, mask, temperature=TAU, reduction="none")
    torch.testing.assert_close(other[0], per_item[0], atol=1e-6, rtol=0)
    grads = []
    for a, b in ((z0, z1), (z0b, z1b)):
        a = a.clone().requires_grad_(True)
        simclr_rank_loss(a, b, mask, temperature=TAU, reduction="none")[0].sum().backward()
        grads.append(a.grad[0])
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("tau", [0.1, 0.02], ids=["fixed-shift", "row-max"])
def test_simclr_rank_hand_written_backward_is_autograds(tau: float) -> None:
    """The in-QG InfoNCE's own forward and backward against autograd through the plain formula
    (float64, unit-norm rows, padding slots), and torch's numerical gradient check."""
    torch.manual_seed(0)
    b, slots, dim = 3, 5, 4
    z = F.normalize(torch.randn(b, 2 * slots, dim, dtype=torch.float64), dim=-1)
    real = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    padding = torch.where(torch.cat([real, real], 1), 0.0, NEG).double()[:, None, :]
    anchors = torch.cat([real, real], 1)
    # An arbitrary upstream gradient, 0 at padded anchors (whose loss is "anything": the caller
    # keeps real items only).
    weights = torch.rand(b, 2 * slots, dtype=torch.float64) * anchors

    def plain(z: torch.Tensor) -> torch.Tensor:
        logits = torch.baddbmm(padding, z, z.transpose(1, 2), alpha=1.0 / tau)
        logits = logits.masked_fill(torch.eye(2 * slots, dtype=torch.bool), NEG)
        index = torch.arange(2 * slots)
        positive = logits[:, index, (index + slots) % (2 * slots)]
        return torch.logsumexp(logits, dim=2) - positive

    ours_z = z.clone().requires_grad_()
    ours = _InQueryInfoNCE.apply(ours_z, padding, tau)
    (ours * weights).sum().backward()
    plain_z = z.clone().requires_grad_()
    (plain(plain_z) * weights).sum().backward()
    torch.testing.assert_close(ours[anchors], plain(z)[anchors], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours_z.grad, plain_z.grad, rtol=1e-10, atol=1e-10)
    check = z.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: _InQueryInfoNCE.apply(x, padding, tau)[anchors], (check,)
    )


def test_simclr_rank_one_item_groups_give_zero_and_no_nan():
    z0, z1, mask = _padded([1, 1], 3, 4, seed=2)
    z0.requires_grad_(True)
    loss = simclr_rank_loss(z0, z1, mask, temperature=TAU)
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.isfinite(z0.grad).all()


def test_simclr_matches_the_naive_batch_wide_loss():
    gen = torch.Generator().manual_seed(3)
    z0, z1 = torch.randn(7, 6, generator=gen), torch.randn(7, 6, generator=gen)
    pool = torch.cat([z0, z1]).double()
    naive = [_naive_infonce(i, pool, (i + 7) % 14, TAU) for i in range(14)]
    got = simclr_loss(z0, z1, temperature=TAU, reduction="none")
    torch.testing.assert_close(
        got.double(), torch.tensor(naive, dtype=torch.float64), atol=1e-5, rtol=0
    )
    assert float(simclr_loss(z0, z1, temperature=TAU)) == pytest.approx(sum(naive) / 7, abs=1e-5)


def test_scarf_and_simsiam_losses_by_hand():
    gen = torch.Generator().manual_seed(4)
    a, p = torch.randn(5, 3, generator=gen), torch.randn(5, 3, generator=gen)
    sims = F.normalize(a, dim=1) @ F.normalize(p, dim=1).T
    expected = -(torch.diag(sims) - torch.logsumexp(sims, dim=1)).mean()
    assert float(scarf_loss(a, p, temperature=1.0)) == pytest.approx(float(expected), abs=1e-6)
    same = simsiam_loss(a, a, a, a)
    assert float(same) == pytest.approx(-1.0, abs=1e-6)


def test_methods_registry_and_configs_agree():
    assert set(METHODS) == set(OBJECTIVES) == set(available("pretrain"))
    for method in METHODS:
        from scarce_ltr.core.config import CONFIG_ROOT

        cfg, _ = load_config(
            PretrainConfig, [], stage_file=CONFIG_ROOT / "pretrain" / f"{method}.yaml"
        )
        assert cfg.method == method


def _toy_batch(seed: int):
    """QGs of items around a few centres in 10 dimensions, padded to 12."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.tensor([12, 7, 9, 3, 12, 5, 10, 8])
    centres = 2.0 * torch.randn(4, 10, generator=gen)
    which = torch.randint(4, (8, 12), generator=gen)
    features = centres[which] + 0.3 * torch.randn(8, 12, 10, generator=gen)
    mask = torch.arange(12)[None, :] < sizes[:, None]
    return features * mask[..., None], mask


@pytest.mark.parametrize("method", METHODS)
def test_every_objective_loss_falls_on_a_toy_problem(method):
    torch.manual_seed(0)
    overrides = [f"method={method}", "encoder.width=16", "encoder.hidden=32", "encoder.n_blocks=1"]
    overrides += ["encoder.dropout=0.0"]
    # the view augmentation where the method reads it (another key set for it is refused)
    reads = OBJECTIVES[method].options.keys()
    views = ("augment.noise_scale=0.3", "augment.zero_p=0.1")
    overrides += [view for view in views if view.split("=")[0] in reads]
    cfg, _ = load_config(PretrainConfig, overrides)
    objective = build_objective(cfg, n_features=10)
    optimizer = torch.optim.Adam(objective.parameters(), lr=3e-3)
    features, mask = _toy_batch(0)
    losses = []
    for step in range(40):
        gen = torch.Generator().manual_seed(step)
        loss = objective(features, mask, generator=gen)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first, (method, losses)


@pytest.mark.parametrize("method", METHODS)
def test_item_path_equals_the_padded_path(method, monkeypatch):
    """Item-wise encoders take the gathered items; a context-aware one the padded batch."""
    overrides = [f"method={method}", "encoder.width=16", "encoder.hidden=32", "encoder.n_blocks=1"]
    cfg, _ = load_config(PretrainConfig, [*overrides, "encoder.dropout=0.0"])
    objective = build_objective(cfg, n_features=10)
    features, mask = _toy_batch(1)
    items = objective(features, mask, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(type(objective), "itemwise", property(lambda self: False))
    padded = objective(features, mask, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(items, padded, atol=1e-5, rtol=1e-5)
