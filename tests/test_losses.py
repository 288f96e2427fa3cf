"""Ranking losses: against naive per-QG loops, padding invariance, empty QGs, a toy problem."""

from __future__ import annotations

import math

import pytest
import torch

from scarce_ltr.core.metrics_torch import mean_ndcg_torch
from scarce_ltr.losses import LOSSES

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


def _rank_of(s: torch.Tensor) -> dict[int, int]:
    """0-based rank of each item by descending score, ties by input order."""
    order = sorted(range(len(s)), key=lambda i: (-float(s[i].detach()), i))
    return {item: r for r, item in enumerate(order)}


def naive_lambdaloss(s: torch.Tensor, y: list[float], sigma: float, k: int | None, mu: float):
    rank = {i: r + 1 for i, r in _rank_of(s).items()}  # 1-based
    top = k or len(y)
    ideal, total, pairs = _ideal(y, top), s.sum() * 0.0, 0
    for i in range(len(y)):
        for j in range(len(y)):
            if y[i] > y[j] and rank[i] <= top and rank[j] <= top:
                gap = abs(rank[i] - rank[j])
                delta = 1 / math.log2(1 + gap) - 1 / math.log2(2 + gap)
                lam = abs(1 / math.log2(1 + rank[i]) - 1 / math.log2(1 + rank[j]))
                w = (mu * delta + lam) * abs(_gain(y[i]) - _gain(y[j])) / ideal
                total = total - w * torch.log2(torch.sigmoid(sigma * (s[i] - s[j])))
                pairs += 1
    return total, pairs > 0


def naive_listmle(s: torch.Tensor, y: list[float]):
    if max(y) <= 0:
        return s.sum() * 0.0, False
    order = sorted(range(len(y)), key=lambda i: (-y[i], -float(s[i].detach()), i))
    total = s.sum() * 0.0
    for pos, item in enumerate(order):
        rest = torch.stack([s[j] for j in order[pos:]])
        total = total + torch.logsumexp(rest, dim=0) - s[item]
    return total, True


def naive_listnet(s: torch.Tensor, y: list[float]):
    if max(y) <= 0:
        return s.sum() * 0.0, False
    target = torch.softmax(torch.tensor(y), dim=0)
    log_p = torch.log_softmax(s, dim=0)
    return -sum(target[i] * log_p[i] for i in range(len(y))), True


def naive_rmse(s: torch.Tensor, y: list[float]):
    if max(y) <= 0:
        return s.sum() * 0.0, False
    mse = sum((s[i] - y[i]) ** 2 for i in range(len(y))) / len(y)
    return torch.sqrt(mse.clamp(min=1e-12)), True


def naive_neural_ndcg(s: torch.Tensor, y: list[float], temperature: float, k: int | None):
    if max(y) <= 0:
        return s.sum() * 0.0, False
    n = len(y)
    rows = []
    for i in range(1, n + 1):
        logits = [
            ((n + 1 - 2 * i) * s[j] - sum(abs(s[j] - s[m]) for m in range(n))) / temperature
            for j in range(n)
        ]
        rows.append(torch.softmax(torch.stack(logits), dim=0))
    p = torch.stack(rows)
    for _ in range(50):  # Sinkhorn, the loss's fixed iteration count
        p = p / p.sum(dim=0, keepdim=True)
        p = p / p.sum(dim=1, keepdim=True)
    top = min(k or n, n)
    gains = torch.tensor([_gain(v) for v in y])
    dcg = sum((p[i] * gains).sum() / math.log2(i + 2) for i in range(top))
    return 1.0 - dcg / _ideal(y, top), True


NAIVE = {
    "lambdaloss": lambda s, y: naive_lambdaloss(s, y, sigma=1.0, k=None, mu=10.0),
    "listmle": naive_listmle,
    "listnet": naive_listnet,
    "rmse": naive_rmse,
    "neural-ndcg": lambda s, y: naive_neural_ndcg(s, y, temperature=1.0, k=None),
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


@pytest.mark.parametrize(
    ("name", "options", "naive"),
    [
        ("lambdaloss", {"k": 2, "mu": 3.0, "sigma": 2.0},
         lambda s, y: naive_lambdaloss(s, y, 2.0, 2, 3.0)),
        ("lambdaloss", {"k": 3, "mu": 0.0}, lambda s, y: naive_lambdaloss(s, y, 1.0, 3, 0.0)),
        ("neural-ndcg", {"k": 2, "temperature": 0.5}, lambda s, y: naive_neural_ndcg(s, y, 0.5, 2)),
    ],
)  # fmt: skip
def test_truncated_listwise_losses_match_naive(name: str, options: dict, naive) -> None:
    qgs = [qg for qg in groups() if len(qg[0]) > 1]
    scores, labels, mask = pad(qgs, 6, fill=0.0)
    loss = LOSSES[name](scores, labels, mask=mask, **options)
    loss.backward()
    leaves = [torch.tensor(s, requires_grad=True) for s, _ in qgs]
    values = [naive(leaf, y) for leaf, (_, y) in zip(leaves, qgs, strict=True)]
    reference = sum(v for v, active in values if active) / sum(a for _, a in values)
    reference.backward()
    assert torch.allclose(loss, reference.detach(), **TOL)
    for row, leaf in enumerate(leaves):
        expected = leaf.grad if leaf.grad is not None else torch.zeros(len(leaf))
        assert torch.allclose(scores.grad[row, : len(leaf)], expected, **TOL)


@pytest.mark.parametrize(
    ("name", "scores", "labels", "options", "expected"),
    [  # the docstring examples, computed by hand
        ("neural-ndcg", [1.0, 0.0], [1.0, 0.0], {}, 1 - (0.7310586 + 0.2689414 / math.log2(3))),
        ("lambdaloss", [0.0, 0.0], [1.0, 0.0], {"mu": 0.0}, 1 - 1 / math.log2(3)),
        ("lambdaloss", [0.0, 0.0], [1.0, 0.0], {"mu": 1.0}, 2 * (1 - 1 / math.log2(3))),
        ("listmle", [0.0, 0.0], [1.0, 0.0], {}, math.log(2)),
        ("listmle", [2.0, 0.0], [1.0, 0.0], {}, math.log(1 + math.exp(-2))),
        ("listnet", [0.0, 0.0], [1.0, 0.0], {}, math.log(2)),
        ("rmse", [1.0, 0.0], [2.0, 0.0], {}, math.sqrt(0.5)),
    ],
)
def test_hand_computed_values(name, scores, labels, options, expected) -> None:
    mask = torch.ones(1, 2, dtype=torch.bool)
    value = LOSSES[name](torch.tensor([scores]), torch.tensor([labels]), mask=mask, **options)
    assert value.item() == pytest.approx(expected, abs=1e-6)


def test_loss_config_passes_only_set_options() -> None:
    from scarce_ltr.finetune.config import LossConfig

    # temperature None: each loss keeps its own default (approx-ndcg 0.1, neural-ndcg 1.0)
    assert LossConfig(name="neural-ndcg").build().keywords == {}
    assert LossConfig(name="neural-ndcg", temperature=0.5, k=5).build().keywords == {
        "temperature": 0.5,
        "k": 5,
    }
    assert LossConfig(name="lambdaloss").build().keywords == {"sigma": 1.0, "mu": 10.0}
    with pytest.raises(ValueError, match="loss.mu"):
        LossConfig(name="lambdaloss", mu=-1.0)


def test_an_option_no_loss_in_use_takes_is_refused() -> None:
    from scarce_ltr.finetune.config import LossConfig

    # every refusal's form, core.registry (tests/test_loss_options.py: every loss and key)
    said = r"loss\.k=5: loss\.name=softmax does not read it \(read with loss\.name=lambdarank, "
    with pytest.raises(ValueError, match=said):
        LossConfig(name="softmax", k=5).check_taken(["softmax"])
    LossConfig(name="softmax", k=5).check_taken(["softmax", "lambdarank"])  # a searched loss's
    LossConfig(name="listnet", sigma=1.0).check_taken(["listnet"])  # the default: nothing set
    said = r"deep\.loss\.mu=3\.0: none of deep\.loss\.name=lambdarank, softmax reads it"
    with pytest.raises(ValueError, match=said):
        LossConfig(mu=3.0).check_taken(["lambdarank", "softmax"], prefix="deep.")


def test_every_loss_option_is_a_loss_key() -> None:
    # a loss declares its options in its signature; each needs its loss.<option> key
    from dataclasses import fields

    from scarce_ltr.finetune.config import LossConfig

    keys = {f.name for f in fields(LossConfig)} - {"name"}
    assert LOSSES.reads("lambdarank") == ("sigma", "k") and LOSSES.reads("softmax") == ()
    assert set().union(*(LOSSES.reads(name) for name in LOSSES)) == keys


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_extreme_scores_give_finite_values_and_gradients(name: str) -> None:
    # every real score far below the padding's 0, and far apart from each other
    scores = torch.tensor([[-500.0, -600.0, 0.0], [300.0, -300.0, 0.0]], requires_grad=True)
    labels = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    loss = LOSSES[name](scores, labels, mask=mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.all(torch.isfinite(scores.grad))
    assert torch.all(scores.grad[~mask] == 0)
