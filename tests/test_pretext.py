"""Rank-pretext and QG-bins (pretext tasks from the data's own structure), and SimCLR-Pretext
(SimCLR plus rank-pretext on one encoder): bins and grades by hand, the tasks' draw, padding
invariance, seeding, option checks, the loss falling on a toy pool, SimCLR-Pretext at weight 0
being SimCLR, and every method end to end with a resume after a crash."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from tiny import tiny_pretraining

from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.losses.lambdarank import lambdarank_loss
from scarce_ltr.pretrain.checkpoint import load_pretrained_encoder
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.objectives import build_objective
from scarce_ltr.pretrain.objectives.qg_bins import qg_bins_loss, qg_quantile_bins
from scarce_ltr.pretrain.objectives.rank_pretext import (
    N_GRADES,
    draw_tasks,
    rank_pretext_loss,
)
from scarce_ltr.pretrain.train import CHECKPOINT, CRASH_ENV, SimulatedCrash

METHODS = ("rank-pretext", "qg-bins", "simclr-pretext")
RANKED = ("rank-pretext", "simclr-pretext")  # the methods holding rank-pretext's tasks
CONTRAST = ("simclr-pretext",)  # the methods with SimCLR's views
SMALL = ["encoder.width=16", "encoder.hidden=32", "encoder.n_blocks=1", "encoder.dropout=0.0"]


def _config(method: str, *overrides: str) -> PretrainConfig:
    stage_file = CONFIG_ROOT / "pretrain" / f"{method}.yaml"
    return load_config(PretrainConfig, [*SMALL, *overrides], stage_file=stage_file)[0]


def _objective(method: str, *overrides: str, n_features: int = 6):
    return build_objective(_config(method, *overrides), n_features=n_features)


def _pool(seed: int, width: int = 9):
    """QGs of 9, 5, 2, 7 and 1 items, 6 features (a count-like one with ties, a constant one),
    padded to ``width``."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.tensor([9, 5, 2, 7, 1])
    features = torch.randn(5, width, 6, generator=gen)
    features[..., 4] = torch.randint(3, (5, width), generator=gen).float()  # ties
    features[..., 5] = 0.7  # constant everywhere: no bin or order to learn
    mask = torch.arange(width)[None, :] < sizes[:, None]
    return features * mask[..., None], mask


def _widened(features: torch.Tensor, mask: torch.Tensor, extra: int):
    """The same batch with ``extra`` more padded slots, filled with garbage."""
    garbage = torch.full((features.shape[0], extra, features.shape[2]), 123.0)
    wide_mask = torch.cat([mask, torch.zeros(mask.shape[0], extra, dtype=torch.bool)], 1)
    return torch.cat([features, garbage], 1), wide_mask


def test_qg_bins_by_hand():
    values = torch.tensor([[0.1, 0.5, 0.5, 0.9, -7.0]])[..., None]  # the last slot is padding
    mask = torch.tensor([[True, True, True, True, False]])
    bins, varies = qg_quantile_bins(values, mask, n_bins=2)
    # below = [0, 1, 1, 3] of 4 items: floor(2 * below / 4) = [0, 0, 0, 1]; the ties share bin 0
    assert bins[0, :, 0].tolist() == [0, 0, 0, 1, 0] and varies.tolist() == [[True]]
    distinct = torch.tensor([[[3.0], [1.0], [2.0], [0.0]]]).transpose(0, 1).reshape(1, 4, 1)
    bins, _ = qg_quantile_bins(distinct, torch.ones(1, 4, dtype=torch.bool), n_bins=4)
    assert bins[0, :, 0].tolist() == [3, 1, 2, 0]
    _, varies = qg_quantile_bins(
        torch.full((1, 3, 1), 2.0), torch.ones(1, 3, dtype=torch.bool), n_bins=4
    )
    assert varies.tolist() == [[False]]


def test_qg_bins_loss_by_hand_and_constant_features_left_out():
    logits = torch.zeros(3, 2, 4, requires_grad=True)
    bins = torch.tensor([[0, 3], [1, 2], [2, 0]])
    keep = torch.tensor([[True, False], [True, False], [True, False]])
    assert float(qg_bins_loss(logits, bins, keep).detach()) == pytest.approx(math.log(4))
    nothing = qg_bins_loss(logits, bins, torch.zeros_like(keep))
    nothing.backward()
    assert float(nothing.detach()) == 0.0 and torch.isfinite(logits.grad).all()
    # one QG whose every feature is constant: nothing to learn, 0
    objective = _objective("qg-bins")
    features = torch.full((1, 4, 6), 0.5)
    loss = objective(features, torch.ones(1, 4, dtype=torch.bool), generator=torch.Generator())
    assert float(loss.detach()) == 0.0


def test_rank_pretext_tasks_are_sparse_monotone_combinations_then_single_features():
    gen = torch.Generator().manual_seed(0)
    weights = draw_tasks(7, n_tasks=5, n_active=3, single_features=True, generator=gen)
    assert weights.shape == (7, 12)
    combos = weights[:, :5]
    assert ((combos != 0).sum(dim=0) == 3).all()
    torch.testing.assert_close(combos.abs().sum(dim=0), torch.ones(5))
    assert (combos < 0).any() and (combos > 0).any()  # random signs
    torch.testing.assert_close(weights[:, 5:], torch.eye(7))
    alone = draw_tasks(7, n_tasks=5, n_active=3, single_features=False, generator=gen)
    assert alone.shape == (7, 5)


def test_a_single_feature_task_orders_the_qg_by_that_feature():
    objective = _objective("rank-pretext", "pretext.n_tasks=2")
    assert objective.n_tasks == 2 + 6  # the combinations, then one task per feature
    features, mask = _pool(1)
    values = objective.task_values(features[mask])  # [N, T]
    qg = features[1, :5]  # the 5-item QG: rows 9..13 of the real items
    grades, _ = qg_quantile_bins(
        values[9:14][None], torch.ones(1, 5, dtype=torch.bool), n_bins=N_GRADES
    )
    for f in range(6):
        ordered = grades[0, qg[:, f].argsort(), 2 + f]  # task 2 + f's grades by feature f
        assert (ordered[1:] >= ordered[:-1]).all(), f
        if f < 4:  # 5 distinct values in 5 grades: the exact order
            assert ordered.tolist() == [0, 1, 2, 3, 4], f
    assert grades[0, :, 2 + 5].unique().tolist() == [0]  # the constant feature: one grade


def test_rank_pretext_loss_by_hand_and_without_pairs():
    one_qg = torch.ones(1, 2, dtype=torch.bool)
    scores = torch.zeros(2, 1, requires_grad=True)
    # grades [2, 0]: log 2 times |delta NDCG| = (1 - 1 / log2 3)
    expected = math.log(2) * (1 - 1 / math.log2(3))
    loss = rank_pretext_loss(scores, torch.tensor([[1.0], [0.0]]), one_qg)
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-6)
    tied = rank_pretext_loss(scores, torch.tensor([[1.0], [1.0]]), one_qg)
    tied.backward()
    assert float(tied.detach()) == 0.0 and torch.isfinite(scores.grad).all()


def _plain_rank_pretext(scores, values, mask) -> torch.Tensor:
    """LambdaRank of each task on each QG, one call at a time, grades by `qg_quantile_bins`;
    the mean over the (task, QG) pairs with two grades."""
    losses, start = [], 0
    for size in mask.sum(dim=1).tolist():
        rows = slice(start, start + size)
        start += size
        for t in range(scores.shape[1]):
            grades, _ = qg_quantile_bins(
                values[rows, t][None, :, None], torch.ones(1, size, dtype=torch.bool), n_bins=5
            )
            if grades.unique().numel() < 2:
                continue
            one = torch.ones(1, size, dtype=torch.bool)
            losses.append(
                lambdarank_loss(scores[rows, t][None], grades[..., 0].float(), mask=one, sigma=1.0)
            )
    return torch.stack(losses).mean()


def test_rank_pretext_loss_in_chunks_is_the_plain_loss_and_its_gradient():
    features, mask = _pool(5, width=12)
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(int(mask.sum()), 4, generator=gen)
    values[:, 3] = features[mask][:, 4]  # a task with ties
    scores = torch.randn(int(mask.sum()), 4, generator=gen, dtype=torch.float64)
    plain_scores = scores.clone().requires_grad_()
    plain = _plain_rank_pretext(plain_scores, values, mask)
    plain.backward()
    for budget in (1, 50, 2**22):  # a row a chunk, a few rows, one chunk a bucket
        ours_scores = scores.clone().requires_grad_()
        ours = rank_pretext_loss(ours_scores, values, mask, pair_budget=budget)
        (2.0 * ours).backward()
        assert float(ours.detach()) == pytest.approx(float(plain.detach()), rel=1e-5)
        torch.testing.assert_close(ours_scores.grad, 2.0 * plain_scores.grad, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        assert float(rank_pretext_loss(scores, values, mask)) == pytest.approx(
            float(plain.detach())
        )


@pytest.mark.parametrize("method", METHODS)
def test_the_same_loss_whatever_the_padding_width(method):
    torch.manual_seed(0)
    objective = _objective(method, "augment.replace_p=0.3")
    features, mask = _pool(2)
    loss = objective(features, mask, generator=torch.Generator().manual_seed(5))
    wide = objective(*_widened(features, mask, 6), generator=torch.Generator().manual_seed(5))
    assert float(wide.detach()) == pytest.approx(float(loss.detach()), abs=1e-6)
    assert float(loss.detach()) > 0


@pytest.mark.parametrize("method", METHODS)
def test_seeded(method):
    features, mask = _pool(3)

    def loss(seed: int, global_seed: int) -> tuple[float, torch.nn.Module]:
        torch.manual_seed(global_seed)  # the weights' initialisation
        objective = _objective(method, f"seed={seed}", "augment.replace_p=0.3")
        value = objective(features, mask, generator=torch.Generator().manual_seed(7))
        return float(value.detach()), objective

    first, a = loss(0, 0)
    second, b = loss(0, 0)
    assert first == second
    if method in RANKED:  # the tasks come from the run's seed alone
        _, c = loss(0, 99)
        _, d = loss(1, 0)
        assert torch.equal(a.task_weights, c.task_weights)
        assert not torch.equal(a.task_weights, d.task_weights)


@pytest.mark.parametrize(
    ("method", "setting", "said"),
    [
        ("qg-bins", "pretext.n_bins=1", r"pretext\.n_bins must be >= 2, got 1"),
        ("rank-pretext", "pretext.n_tasks=-1", r"pretext\.n_tasks must be >= 0, got -1"),
        ("rank-pretext", "pretext.n_active=0", r"pretext\.n_active must be >= 1, got 0"),
        ("qg-bins", "augment.replace_p=1.5", r"augment\.replace_p must be in \[0, 1\]"),
        ("rank-pretext", "pretext.n_bins=3", r"pretext\.n_bins=3: method=rank-pretext does not"),
        ("qg-bins", "augment.replace_source=qg", r"augment\.replace_source=qg: method=qg-bins"),
        ("simclr-rank", "pretext.n_tasks=3", r"pretext\.n_tasks=3: method=simclr-rank does not"),
        ("simclr-pretext", "pretext.n_active=0", r"pretext\.n_active must be >= 1, got 0"),
        ("simclr-pretext", "pretext.n_bins=3", r"pretext\.n_bins=3: method=simclr-pretext"),
        ("simclr-pretext", "objective.rank_weight=-1", r"objective\.rank_weight must be >= 0"),
        ("simclr-pretext", "objective.rank_dims=-1", r"objective\.rank_dims must be >= 0"),
        ("simclr", "objective.rank_weight=2", r"objective\.rank_weight.*method=simclr"),
    ],
)
def test_bad_options_are_refused_naming_the_key(method, setting, said):
    with pytest.raises(UserError, match=said):
        _config(method, setting)


def test_no_task_and_too_many_active_features_are_refused():
    with pytest.raises(UserError, match=r"pretext\.n_tasks must be >= 1 when pretext\.single"):
        _config("rank-pretext", "pretext.n_tasks=0", "pretext.single_features=false")
    cfg = _config("rank-pretext", "pretext.n_active=7")
    with pytest.raises(ValueError, match=r"pretext\.n_active must be in \[1, 6\]"):
        build_objective(cfg, n_features=6)
    assert _config("rank-pretext", "pretext.n_tasks=0").pretext.n_tasks == 0  # features alone


@pytest.mark.parametrize("method", METHODS)
def test_the_loss_falls_on_a_toy_pool(method):
    torch.manual_seed(0)
    # SimCLR's views at the text's noise 1.0 leave 31 items little to tell apart in 30 steps
    objective = _objective(method, *(["augment.noise_scale=0.3"] if method in CONTRAST else []))
    optimizer = torch.optim.Adam(objective.parameters(), lr=3e-3)
    features, mask = _pool(4)
    objective.set_training_items(features[mask])
    losses = []
    for step in range(30):
        loss = objective(features, mask, generator=torch.Generator().manual_seed(step))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-5:]) / 5 < 0.9 * sum(losses[:5]) / 5, losses


def _pretrain(method: str, run_dir, *extra: str) -> dict:
    return run(["pretrain", method, *tiny_pretraining(), f"run_dir={run_dir}", *extra])


@pytest.mark.parametrize("method", METHODS)
def test_end_to_end_and_resume_after_a_crash(method, tmp_path, monkeypatch):
    args = ("epochs=2", "item_budget=150", "augment.replace_p=0.2")
    straight = _pretrain(method, tmp_path / "straight", *args)
    assert (tmp_path / "straight" / "encoder.pt").is_file()
    on_disk = json.loads((tmp_path / "straight" / "report.json").read_text())
    assert np.isfinite(on_disk["loss_curve"]).all()
    assert np.isfinite(on_disk["ssl_val"]["curve"]).all()
    assert "effective_rank" in on_disk["history"][-1]["monitor"]
    assert load_pretrained_encoder(tmp_path / "straight")[1]["method"] == method
    steps = straight["history"][0]["steps"]
    monkeypatch.setenv(CRASH_ENV, str(steps + 1))  # in epoch 2
    with pytest.raises(SimulatedCrash):
        _pretrain(method, tmp_path / "crashed", *args)
    saved = torch.load(tmp_path / "crashed" / CHECKPOINT, weights_only=True)["model"]
    if method in RANKED:  # the tasks and the statistics travel in the checkpoint
        assert {"task_weights", "feature_mean", "feature_scale"} <= set(saved)
    monkeypatch.delenv(CRASH_ENV)
    _pretrain(method, tmp_path / "crashed", *args)
    for key, value in _encoder(tmp_path / "straight").items():
        assert torch.equal(value, _encoder(tmp_path / "crashed")[key]), key


def test_simclr_pretext_at_weight_0_is_simclr_draw_for_draw():
    features, mask = _pool(5)
    torch.manual_seed(0)
    simclr = _objective("simclr", "augment.replace_p=0.3")
    torch.manual_seed(0)  # the same encoder and projector; the rank head comes after them
    both = _objective("simclr-pretext", "augment.replace_p=0.3", "objective.rank_weight=0")
    both.set_training_items(features[mask])
    plain = simclr(features, mask, generator=torch.Generator().manual_seed(3))
    assert torch.equal(both(features, mask, generator=torch.Generator().manual_seed(3)), plain)
    ranked = _objective("simclr-pretext", "augment.replace_p=0.3", "objective.rank_weight=2")
    ranked.load_state_dict(both.state_dict())
    loss = ranked(features, mask, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():  # SimCLR's term plus twice the tasks' LambdaRank of the clean items
        rank = ranked.rank_loss(ranked.encode(features[mask], mask), features[mask], mask)
    assert float(loss.detach()) == pytest.approx(float(plain.detach()) + 2 * float(rank))


def test_simclr_pretext_made_directly_checks_its_options():
    from scarce_ltr.pretrain.encoders import build_encoder
    from scarce_ltr.pretrain.objectives.simclr_pretext import SimCLRPretext

    encoder = build_encoder(_config("simclr-pretext").encoder, n_features=6)
    with pytest.raises(ValueError, match=r"pretext\.n_tasks must be >= 0, got -1"):
        SimCLRPretext(encoder=encoder, n_features=6, n_tasks=-1)
    with pytest.raises(ValueError, match=r"objective\.rank_weight"):
        SimCLRPretext(encoder=encoder, n_features=6, rank_weight=-1.0)


def test_simclr_pretext_rank_dims_gives_each_term_its_own_part_of_the_embedding():
    features, mask = _pool(6)
    torch.manual_seed(0)
    split = _objective("simclr-pretext", "augment.replace_p=0.3", "objective.rank_dims=4")
    split.set_training_items(features[mask])
    h = torch.randn(7, 16)
    moved_rank_part, moved_contrast_part = h.clone(), h.clone()
    moved_rank_part[:, 12:] += 5.0
    moved_contrast_part[:, :12] += 5.0
    # SimCLR's projector reads the first 12 entries, the rank head the last 4
    assert torch.equal(split.projector(moved_rank_part), split.projector(h))
    assert not torch.equal(split.projector(moved_contrast_part), split.projector(h))
    assert torch.equal(split.head(moved_contrast_part), split.head(h))
    assert not torch.equal(split.head(moved_rank_part), split.head(h))
    assert split.head(h).shape == (7, split.n_tasks)
    # and the loss stays the same whatever the padding width
    loss = split(features, mask, generator=torch.Generator().manual_seed(2))
    wide = split(*_widened(features, mask, 5), generator=torch.Generator().manual_seed(2))
    assert float(wide.detach()) == pytest.approx(float(loss.detach()), abs=1e-6)
    with pytest.raises(ValueError, match=r"objective\.rank_dims must be >= 0 and below the enc"):
        _objective("simclr-pretext", "objective.rank_dims=16")  # the whole 16-wide embedding


def test_the_released_preset_of_simclr_pretext_runs(tmp_path):
    out = _pretrain("simclr-pretext@released", tmp_path / "run", "epochs=1", "item_budget=150")
    stored = json.loads((tmp_path / "run" / "report.json").read_text())
    assert np.isfinite(stored["loss_curve"]).all() and out["history"]
    _, meta = load_pretrained_encoder(tmp_path / "run")
    assert meta["method"] == "simclr-pretext"


def _encoder(run_dir) -> dict:
    return torch.load(run_dir / "encoder.pt", weights_only=True)["state_dict"]
