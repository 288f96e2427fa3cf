"""Finetuning parts: schedule, frozen encoders, selection, resume, combine, batch independence."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_data

from scarce_ltr.core.config import load_config
from scarce_ltr.core.device import setup_runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.finetune import loop, steps
from scarce_ltr.finetune.config import FinetuneConfig, Phase, schedule
from scarce_ltr.finetune.heads import build_head
from scarce_ltr.finetune.loop import fit, predict
from scarce_ltr.finetune.model import CombinedRanker, Ranker
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

TINY = [*tiny_data(), "pretrained=none", "logger=none"]


@pytest.fixture(scope="module")
def setup():
    cfg, _ = load_config(FinetuneConfig, TINY)
    return cfg, prepare_data(cfg), setup_runtime(amp=False, device="cpu")


def ranker(kind: str = "resnet", head: str = "mlp", seed: int = 0) -> Ranker:
    torch.manual_seed(seed)
    enc = build_encoder(
        EncoderConfig(kind=kind, width=16, hidden=32, n_blocks=2, n_heads=2), n_features=12
    )
    return Ranker(encoder=enc, head=build_head(head, in_dim=16, hidden=16, dropout=0.1))


def run_fit(model, cfg, prepared, runtime, phases, **kwargs):
    options = kwargs.pop("options", None) or cfg.train_options()
    return fit(
        model,
        prepared,
        phases=phases,
        loss_fn=cfg.loss.build(),
        options=options,
        metrics_cfg=cfg.metrics,
        runtime=runtime,
        seed=0,
        **kwargs,
    )


def test_schedule_splits_an_epoch_cap_between_phases() -> None:
    assert schedule(100, 100, None) == [Phase("head", 100, False), Phase("full", 100, True)]
    assert schedule(100, 100, 7) == [Phase("head", 3, False), Phase("full", 4, True)]
    assert schedule(100, 100, 1) == [Phase("full", 1, True)]
    assert schedule(200, 0, 50) == [Phase("head", 50, False)]
    assert schedule(100, 100, 0) == []


def test_frozen_encoder_stays_bit_identical(setup, monkeypatch) -> None:
    cfg, prepared, runtime = setup
    rising = iter(range(100))  # every epoch better than the last: the trained head is kept
    monkeypatch.setattr(loop, "selection_score", lambda *a, **k: float(next(rising)))
    for head in ("linear", "mlp"):
        model = ranker(head=head)
        before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
        head_before = {k: v.clone() for k, v in model.head.state_dict().items()}
        options = replace(cfg.train_options(), lr=1e-2, patience=None)
        run_fit(model, cfg, prepared, runtime, [Phase("head", 3, False)], options=options)
        for key, value in model.encoder.state_dict().items():
            assert torch.equal(value, before[key]), key  # weights and BatchNorm statistics
        changed = [not torch.equal(v, head_before[k]) for k, v in model.head.state_dict().items()]
        assert any(changed)


def test_selection_restores_the_validation_best_epoch(setup, monkeypatch) -> None:
    cfg, prepared, runtime = setup
    scripted = iter([0.1, 0.3, 0.9, 0.5, 0.2, 0.4])  # epoch 0 (initial model), 1, ..., 5
    monkeypatch.setattr(loop, "selection_score", lambda *a, **k: next(scripted))
    states = {}

    def remember(row: dict) -> None:
        states[row["epoch"]] = {k: v.clone() for k, v in model.state_dict().items()}

    model = ranker()
    options = replace(cfg.train_options(), lr=1e-2, patience=None)
    phases = [Phase("head", 2, False), Phase("full", 3, True)]
    result = run_fit(model, cfg, prepared, runtime, phases, options=options, log=remember)
    assert result.best_epoch == 2 and result.best_vali == 0.9
    for key, value in model.state_dict().items():
        assert torch.equal(value, states[2][key]), key


def test_patience_ends_a_phase_and_the_next_starts_from_the_best(setup, monkeypatch) -> None:
    cfg, prepared, runtime = setup
    scores = iter([0.1, 0.5, 0.4, 0.3, 0.2, 0.6, 0.7, 0.8])
    monkeypatch.setattr(loop, "selection_score", lambda *a, **k: next(scores))
    model = ranker()
    options = replace(cfg.train_options(), lr=1e-2, patience=2)
    result = run_fit(
        model,
        cfg,
        prepared,
        runtime,
        [Phase("head", 10, False), Phase("full", 2, True)],
        options=options,
    )
    phases = [row["phase"] for row in result.history]
    assert phases == ["init", "head", "head", "head", "full", "full"]
    assert result.best_epoch == 5 and result.epochs == 5


def test_vali_every_scores_every_nth_epoch_and_each_phase_end(setup, monkeypatch) -> None:
    """``vali_every=3``: vali after epochs 3 and 4 of a 4-epoch phase (its third and its last),
    then 7 and 8; the kept model is the best of those, never an unscored epoch's."""
    cfg, prepared, runtime = setup
    scored: list[int] = []
    states = {}
    scripted = iter([0.1, 0.3, 0.9, 0.5, 0.2])  # epochs 0, 3, 4, 7, 8

    def score(*a, **k) -> float:
        scored.append(len(states))
        return next(scripted)

    def remember(row: dict) -> None:
        states[row["epoch"]] = {k: v.clone() for k, v in model.state_dict().items()}

    monkeypatch.setattr(loop, "selection_score", score)
    model = ranker()
    options = replace(cfg.train_options(), lr=1e-2, patience=None, vali_every=3)
    phases = [Phase("head", 4, False), Phase("full", 4, True)]
    result = run_fit(model, cfg, prepared, runtime, phases, options=options, log=remember)
    assert [row["epoch"] for row in result.history if "vali_ndcg@5" in row] == [0, 3, 4, 7, 8]
    assert scored == [0, 2, 3, 6, 7]  # epochs logged before each scoring
    assert len(result.history) == 9 and result.best_epoch == 4 and result.best_vali == 0.9
    for key, value in model.state_dict().items():
        assert torch.equal(value, states[4][key]), key


def test_vali_every_is_checked() -> None:
    with pytest.raises(UserError, match="vali_every must be >= 1"):
        load_config(FinetuneConfig, [*TINY, "vali_every=0"])


@pytest.mark.parametrize("every", [0.0, 1e9], ids=["every-epoch", "phase-ends"])
def test_resume_replays_an_interrupted_run(setup, tmp_path, monkeypatch, every) -> None:
    monkeypatch.setattr(loop, "CHECKPOINT_SECONDS", every)
    cfg, prepared, runtime = setup
    options = replace(cfg.train_options(), lr=1e-2, patience=None)
    phases = [Phase("head", 2, False), Phase("full", 2, True)]
    straight = ranker()
    run_fit(straight, cfg, prepared, runtime, phases, options=options)

    class Stop(Exception):
        pass

    def crash(row: dict) -> None:
        if row["epoch"] == 3:
            raise Stop

    checkpoint = tmp_path / "checkpoint.pt"
    with pytest.raises(Stop):
        run_fit(
            ranker(),
            cfg,
            prepared,
            runtime,
            phases,
            options=options,
            checkpoint=checkpoint,
            log=crash,
        )
    resumed = ranker(seed=123)  # weights come from the checkpoint, not from the init
    result = run_fit(
        resumed, cfg, prepared, runtime, phases, options=options, checkpoint=checkpoint
    )
    assert result.epochs == 4
    for key, value in straight.state_dict().items():
        assert torch.allclose(value.float(), resumed.state_dict()[key].float()), key


@pytest.mark.parametrize("kind", ["resnet", "attention"])
def test_frozen_encoder_cache_changes_nothing(setup, monkeypatch, kind: str) -> None:
    """Vali scoring reuses a frozen encoder's outputs: the run ends bit-identical to one that
    recomputes them every epoch, through a frozen, a training and another frozen phase."""
    cfg, prepared, runtime = setup
    options = replace(cfg.train_options(), lr=1e-2, patience=None)
    phases = [Phase("head", 3, False), Phase("full", 2, True), Phase("head", 2, False)]
    fills = []
    real_fill = loop.FrozenEncoderCache.fill

    def counting_fill(self, *args, **kwargs):
        fills.append(self)
        return real_fill(self, *args, **kwargs)

    monkeypatch.setattr(loop.FrozenEncoderCache, "fill", counting_fill)
    cached = ranker(kind=kind)
    with_cache = run_fit(cached, cfg, prepared, runtime, phases, options=options)
    assert len(fills) == 2  # once per frozen phase: the trained encoder is encoded again
    monkeypatch.setattr(loop.FrozenEncoderCache, "usable", lambda self, model: False)
    plain = ranker(kind=kind)
    without = run_fit(plain, cfg, prepared, runtime, phases, options=options)
    assert with_cache.history == without.history
    for key, value in plain.state_dict().items():
        assert torch.equal(value, cached.state_dict()[key]), key


@pytest.mark.parametrize("kind", ["resnet", "mlp"])
def test_kept_training_outputs_change_nothing(setup, monkeypatch, kind: str) -> None:
    """The head-only phases train on the frozen encoder's kept outputs of the training items:
    the run ends bit-identical to one that encodes every batch again each epoch."""
    cfg, prepared, runtime = setup
    options = replace(cfg.train_options(), lr=1e-2, patience=None)
    phases = [Phase("head", 3, False), Phase("full", 2, True), Phase("head", 2, False)]
    looked_up = []
    real_lookup = loop.FrozenTrainItems.lookup

    def counting_lookup(self, groups):
        looked_up.append(len(groups))
        return real_lookup(self, groups)

    monkeypatch.setattr(loop.FrozenTrainItems, "lookup", counting_lookup)
    cached = ranker(kind=kind)
    with_cache = run_fit(cached, cfg, prepared, runtime, phases, options=options)
    n_batches = len(loop._training_batches(prepared, options, 0, None))
    assert len(looked_up) == 5 * n_batches  # every batch of the 5 head-only epochs
    monkeypatch.setattr(loop.FrozenTrainItems, "fill", lambda self, *a, **k: False)
    plain = ranker(kind=kind)
    without = run_fit(plain, cfg, prepared, runtime, phases, options=options)
    assert len(looked_up) == 5 * n_batches
    assert with_cache.history == without.history
    for key, value in plain.state_dict().items():
        assert torch.equal(value, cached.state_dict()[key]), key


def test_no_kept_training_outputs_with_noise_truncation_or_a_contextual_encoder(setup) -> None:
    cfg, prepared, runtime = setup
    groups = loop.training_groups(prepared)
    sizes = np.diff(prepared.train.offsets)[groups]
    model = ranker()
    model.set_phase(train_encoder=False)
    items = loop.FrozenTrainItems()
    fill = dict(runtime=runtime, item_budget=1000)
    assert items.fill(model, prepared.train, groups, max_list_len=None, **fill)
    assert items.fill(model, prepared.train, groups, max_list_len=int(sizes.max()), **fill)
    # truncated QGs keep items drawn per epoch: no kept outputs
    assert not items.fill(model, prepared.train, groups, max_list_len=int(sizes.max()) - 1, **fill)
    assert items.items is None
    assert not loop.FrozenTrainItems(max_bytes=64).fill(
        model, prepared.train, groups, max_list_len=None, **fill
    )
    contextual = ranker(kind="attention")
    contextual.set_phase(train_encoder=False)
    assert not items.fill(contextual, prepared.train, groups, max_list_len=None, **fill)
    model.set_phase(train_encoder=True)
    assert not items.fill(model, prepared.train, groups, max_list_len=None, **fill)
    with pytest.raises(ValueError, match="clean inputs"):
        steps.train_epoch(
            model,
            [],
            None,
            None,
            runtime=runtime,
            noise_std=0.1,
            generator=torch.Generator(),
            encoded=items.lookup,
        )


def test_frozen_encoder_cache_past_its_cap_recomputes(setup) -> None:
    cfg, prepared, runtime = setup
    model = ranker()
    model.set_phase(train_encoder=False)
    cache = loop.FrozenEncoderCache(max_bytes=64)
    scores = predict(model, prepared.vali, runtime=runtime, item_budget=1000, frozen=cache)
    assert cache.too_big and cache.batches is None and not cache.usable(model)
    assert np.array_equal(scores, predict(model, prepared.vali, runtime=runtime, item_budget=1000))


def test_combine_trains_only_its_last_layer(setup) -> None:
    cfg, prepared, runtime = setup
    members = [ranker(seed=1), ranker(kind="attention", head="linear", seed=2)]
    member_states = [{k: v.clone() for k, v in m.state_dict().items()} for m in members]
    model = CombinedRanker(members=members, dropout=0.7)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["out.weight", "out.bias"]
    out_before = model.out.weight.clone()
    options = replace(cfg.train_options(), lr=1e-2, patience=None)
    run_fit(model, cfg, prepared, runtime, [Phase("head", 3, False)], options=options)
    for member, state in zip(model.members, member_states, strict=True):
        for key, value in member.state_dict().items():
            assert torch.equal(value, state[key]), key
    assert not torch.equal(model.out.weight, out_before)


@pytest.mark.parametrize("kind", ["resnet", "mlp", "attention"])
def test_eval_scores_do_not_depend_on_batch_composition(setup, kind: str) -> None:
    cfg, prepared, runtime = setup
    model = ranker(kind=kind)
    options = replace(cfg.train_options(), lr=1e-2, patience=None)
    run_fit(model, cfg, prepared, runtime, [Phase("full", 2, True)], options=options)
    together = predict(model, prepared.test, runtime=runtime, item_budget=100_000)
    alone = predict(model, prepared.test, runtime=runtime, item_budget=1)  # one QG per batch
    order = np.random.default_rng(0).permutation(prepared.test.n_groups)
    shuffled = predict(model, prepared.test, runtime=runtime, item_budget=60, groups=order)
    assert np.allclose(together, alone, atol=1e-5)
    assert np.allclose(together, shuffled, atol=1e-5)


def test_attention_encoder_is_permutation_equivariant_and_padding_free() -> None:
    model = ranker(kind="attention").eval()
    x = torch.randn(2, 5, 12)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    perm = torch.tensor([2, 0, 1, 3, 4])
    with torch.no_grad():
        out = model(x, mask)
        permuted = model(x[:, perm], mask[:, perm])
        padding = torch.zeros(2, 3, dtype=torch.bool)
        wider = model(torch.cat([x, torch.randn(2, 3, 12)], 1), torch.cat([mask, padding], 1))
    assert torch.allclose(out[:, perm], permuted, atol=1e-5)
    assert torch.allclose(out, wider[:, :5], atol=1e-5)
    with pytest.raises(ValueError, match="divide"):
        build_encoder(EncoderConfig(kind="attention", width=10, n_heads=3), n_features=4)


def test_config_errors() -> None:
    with pytest.raises(Exception, match="pretrained"):
        load_config(FinetuneConfig, [t for t in TINY if not t.startswith("pretrained")])
    with pytest.raises(Exception, match="head=linear"):
        load_config(FinetuneConfig, [*TINY, "strategy=lp", "head=mlp", "full_epochs=0"])
    with pytest.raises(Exception, match="runs"):
        load_config(FinetuneConfig, [*TINY, "strategy=combine", "full_epochs=0"])
    # Finetuning's own default rate (the paper's 5e-5), not pretraining's 5e-4 it shares a
    # schema with; an override replaces it.
    assert load_config(FinetuneConfig, TINY)[0].optimizer.lr == 5e-5
    assert load_config(FinetuneConfig, [*TINY, "optimizer.lr=1e-3"])[0].optimizer.lr == 1e-3


def test_kept_vali_batches_are_collated_once_and_change_nothing(setup, monkeypatch) -> None:
    """`fit` collates the vali batches once and scores every epoch on them: the run ends
    bit-identical to one that collates them again after every epoch."""
    cfg, prepared, runtime = setup
    options = replace(cfg.train_options(), lr=1e-2, patience=None, eval_item_budget=40)
    phases = [Phase("head", 2, False), Phase("full", 3, True)]
    collated = []
    real_collate = loop.QueryGroupBatcher._collate

    def counting_collate(self, *args, **kwargs):
        if self.split is prepared.vali:
            collated.append(self)
        return real_collate(self, *args, **kwargs)

    monkeypatch.setattr(loop.QueryGroupBatcher, "_collate", counting_collate)
    labeled = np.flatnonzero(prepared.labels.vali_labeled)
    plan = loop.QueryGroupBatcher(prepared.vali, item_budget=40, groups=labeled).plan()
    assert len(plan) > 1  # several vali batches, each kept
    kept = ranker()
    with_kept = run_fit(kept, cfg, prepared, runtime, phases, options=options)
    assert len(collated) == len(plan)
    monkeypatch.setattr(loop.KeptBatches, "get", lambda self, *a, **k: None)
    collated.clear()
    plain = ranker()
    without = run_fit(plain, cfg, prepared, runtime, phases, options=options)
    # the initial model and the 3 whole-network epochs (the head-only epochs reuse the
    # frozen encoder's outputs, encoded once with the initial model's)
    assert len(collated) == 4 * len(plan)
    assert with_kept.history == without.history
    for key, value in plain.state_dict().items():
        assert torch.equal(value, kept.state_dict()[key]), key


def test_kept_batches_past_their_cap_are_collated_per_call(setup) -> None:
    cfg, prepared, runtime = setup
    model = ranker()
    kept = loop.KeptBatches(max_bytes=64)
    scores = predict(model, prepared.vali, runtime=runtime, item_budget=40, kept=kept)
    assert kept.too_big and kept.batches is None
    assert np.array_equal(scores, predict(model, prepared.vali, runtime=runtime, item_budget=40))
    roomy = loop.KeptBatches()
    again = predict(model, prepared.vali, runtime=runtime, item_budget=40, kept=roomy)
    assert roomy.batches is not None and np.array_equal(scores, again)


def test_a_run_scoring_vali_every_epoch_keeps_its_identity_from_before_vali_every() -> None:
    """A run's checkpoints store its identity; one written before ``vali_every`` existed must
    resume, so the key is in the identity only away from its default."""
    from scarce_ltr.finetune.run_settings import run_identity

    plain, _ = load_config(FinetuneConfig, TINY)
    every5, _ = load_config(FinetuneConfig, [*TINY, "vali_every=5"])
    assert "vali_every" not in json.loads(run_identity(plain))
    assert json.loads(run_identity(every5))["vali_every"] == 5
    # a checkpoint written while the key was kept at its default resumes too; 5 does not
    from scarce_ltr.finetune.run_settings import check_identity

    kept = json.dumps({**json.loads(run_identity(plain)), "vali_every": 1}, sort_keys=True)
    check_identity(Path("run"), kept, run_identity(plain))
    with pytest.raises(UserError, match=r"vali_every differ"):
        check_identity(Path("run"), run_identity(every5), run_identity(plain))
