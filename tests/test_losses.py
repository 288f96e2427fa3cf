"""Ranking losses: against naive per-QG loops, padding invariance, empty QGs, a toy problem."""

from __future__ import annotations

import math

import pytest
import torch

from scarce_ltr.core.metrics_torch import mean_ndcg_torch
from scarce_ltr.finetune.losses import LOSSES

TOL = dict(rtol=1e-5, atol=1e-6)


# ---- naive references: one QG at a time, Python loops over pairs -------------------------------


def _gain(y: float) -> float:
    return 2.0**y - 1.0


def _ideal(labels: list[float], k: int | None) -> float:
    best = sorted(labels, reverse=True)[: k or len(labels)]
    return sum(_gain(y) / math.log2(r + 2) for r, y in enumerate(best))


def naive_lambdarank(s: torch.Tensor, y: list[float], sigma: float, k: int | None):
    order = sorted(range(len(y)), key=lambda i: (-float(s[i].detach()), i))
    rank = {item: r for r, item in enumerate(order)}

    def disc(i: int) -> float:
        r = rank[i]
        return 0.0 if k is not None and r >= k else 1.0 / math.log2(r + 2)

    ideal, total, pairs = _ideal(y, k), s.sum() * 0.0, 0
    for i in range(len(y)):
        for j in range(len(y)):
            if y[i] > y[j]:
                w = abs(_gain(y[i]) - _gain(y[j])) * abs(disc(i) - disc(j)) / ideal
                total = total + w * torch.log1p(torch.exp(-sigma * (s[i] - s[j])))
                pairs += 1
    return total, pairs > 0


def naive_ranknet(s: torch.Tensor, y: list[float], sigma: float):
    terms = [
        torch.log1p(torch.exp(-sigma * (s[i] - s[j])))
        for i in range(len(y))
        for j in range(len(y))
        if y[i] > y[j]
    ]
    return (sum(terms) / len(terms), True) if terms else (s.sum() * 0.0, False)


def naive_softmax(s: torch.Tensor, y: list[float]):
    if sum(y) <= 0:
        return s.sum() * 0.0, False
    log_p = torch.log_softmax(s, dim=0)
    return -sum(y[i] / sum(y) * log_p[i] for i in range(len(y))), True


def naive_approx_ndcg(s: torch.Tensor, y: list[float], temperature: float):
    if max(y) <= 0:
        return s.sum() * 0.0, False
    dcg = 0.0
    for i in range(len(y)):
        rank = 1.0 + sum(
            (torch.sigmoid((s[j] - s[i]) / temperature) for j in range(len(y)) if j != i),
            start=s[i] * 0.0,
        )
        dcg = dcg + _gain(y[i]) / torch.log2(1.0 + rank)
    return 1.0 - dcg / _ideal(y, None), True


NAIVE = {
    "lambdarank": lambda s, y: naive_lambdarank(s, y, sigma=1.0, k=None),
    "ranknet": lambda s, y: naive_ranknet(s, y, sigma=1.0),
    "softmax": naive_softmax,
    "approx-ndcg": lambda s, y: naive_approx_ndcg(s, y, temperature=0.1),
}


def groups() -> list[tuple[list[float], list[float]]]:
    """(scores, labels) of QGs of various shapes: ties, no relevant item, one item."""
    g = torch.Generator().manual_seed(0)
    out = []
    for size, labels in [
        (6, [0, 2, 1, 0, 3, 1]),
        (3, [0, 0, 0]),  # no relevant item
        (4, [1, 1, 0, 2]),
        (1, [2]),  # a single item: no pair
        (5, [1, 1, 1, 1, 1]),  # relevant, but no ordered pair
    ]:
        scores = torch.randn(size, generator=g).tolist()
        scores[0] = scores[-1]  # a tie in score
        out.append((scores, [float(v) for v in labels]))
    return out


def pad(qgs, width: int, *, shuffle: bool = False, fill: float = float("nan")):
    """``[B, width]`` scores, labels, mask; padding holds ``fill``, real items maybe scattered."""
    b = len(qgs)
    scores = torch.full((b, width), fill)
    labels = torch.full((b, width), fill)
    mask = torch.zeros(b, width, dtype=torch.bool)
    g = torch.Generator().manual_seed(1)
    for row, (s, y) in enumerate(qgs):
        slots = torch.randperm(width, generator=g)[: len(s)] if shuffle else torch.arange(len(s))
        slots = slots.sort().values  # keep input order (ties break by it)
        scores[row, slots] = torch.tensor(s)
        labels[row, slots] = torch.tensor(y)
        mask[row, slots] = True
    return scores.requires_grad_(True), labels, mask


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_matches_naive_per_group_loop(name: str) -> None:
    qgs = groups()
    scores, labels, mask = pad(qgs, 6, fill=0.0)
    loss = LOSSES[name](scores, labels, mask=mask)
    loss.backward()
    per_group = []
    leaves = []
    for s, y in qgs:
        leaf = torch.tensor(s, requires_grad=True)
        value, active = NAIVE[name](leaf, y)
        leaves.append(leaf)
        if active:
            per_group.append(value)
    reference = sum(per_group) / len(per_group)
    reference.backward()
    assert torch.allclose(loss, reference.detach(), **TOL)
    for row, leaf in enumerate(leaves):
        n = len(leaf)
        expected = leaf.grad if leaf.grad is not None else torch.zeros(n)  # inactive QG
        assert torch.allclose(scores.grad[row, :n], expected, **TOL)
        assert torch.all(scores.grad[row, n:] == 0)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_padding_invariance(name: str) -> None:
    qgs = groups()
    compact = pad(qgs, 6, fill=0.0)
    wide = pad(qgs, 11, shuffle=True, fill=float("nan"))  # garbage padding anywhere in a row
    a = LOSSES[name](compact[0], compact[1], mask=compact[2])
    b = LOSSES[name](wide[0], wide[1], mask=wide[2])
    a.backward()
    b.backward()
    assert torch.allclose(a, b, **TOL)
    assert torch.allclose(compact[0].grad[compact[2]], wide[0].grad[wide[2]], **TOL)
    assert torch.all(wide[0].grad[~wide[2]] == 0)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_group_without_relevant_item_gives_no_gradient(name: str) -> None:
    scores, labels, mask = pad([([0.3, -1.0, 2.0], [0.0, 0.0, 0.0])], 4)
    loss = LOSSES[name](scores, labels, mask=mask)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(scores.grad == 0)
    # and it does not dilute the loss of the QGs that have one
    qg = ([0.5, 0.1, -0.2], [1.0, 0.0, 2.0])
    alone = LOSSES[name](*pad([qg], 3)[:2], mask=pad([qg], 3)[2])
    with_empty = pad([qg, ([0.0, 1.0, 2.0], [0.0, 0.0, 0.0])], 3)
    assert torch.allclose(alone, LOSSES[name](with_empty[0], with_empty[1], mask=with_empty[2]))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_lambdarank_truncation_matches_naive(k: int) -> None:
    qgs = [qg for qg in groups() if len(qg[0]) > 1]
    scores, labels, mask = pad(qgs, 6, fill=0.0)
    loss = LOSSES["lambdarank"](scores, labels, mask=mask, k=k)
    loss.backward()
    leaves = [torch.tensor(s, requires_grad=True) for s, _ in qgs]
    values = [naive_lambdarank(leaf, y, 1.0, k) for leaf, (_, y) in zip(leaves, qgs, strict=True)]
    reference = sum(v for v, active in values if active) / sum(a for _, a in values)
    reference.backward()
    assert torch.allclose(loss, reference.detach(), **TOL)
    for row, leaf in enumerate(leaves):
        expected = leaf.grad if leaf.grad is not None else torch.zeros(len(leaf))
        assert torch.allclose(scores.grad[row, : len(leaf)], expected, **TOL)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_decreases_on_toy_problem(name: str) -> None:
    g = torch.Generator().manual_seed(0)
    features = torch.randn(16, 10, 5, generator=g)
    true_w = torch.randn(5, generator=g)
    labels = (features @ true_w).clamp(min=0).round().clamp(max=3)
    mask = torch.ones(16, 10, dtype=torch.bool)
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    before = mean_ndcg_torch(model(features).squeeze(-1), labels, mask, k=5).item()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(60):
        loss = LOSSES[name](model(features).squeeze(-1), labels, mask=mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # softmax cross-entropy is bounded below by the entropy of its target, hence the margin
    assert losses[-1] < 0.8 * losses[0]
    after = mean_ndcg_torch(model(features).squeeze(-1), labels, mask, k=5).item()
    assert after > 0.9 > before


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_bad_shapes_and_mask(name: str) -> None:
    with pytest.raises(ValueError):
        LOSSES[name](torch.zeros(2, 3), torch.zeros(2, 4), mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError):
        LOSSES[name](torch.zeros(2, 3), torch.zeros(2, 3), mask=torch.ones(2, 3))
