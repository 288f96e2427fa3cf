"""LP-FT's ``head_lr`` (`finetune.config.TrainOptions.rate`): the head-only phase trains at its own
rate and the whole network at ``optimizer.lr``; unset, nothing changes; the refusals."""

from __future__ import annotations

import json

import pytest
import torch
from test_finetune_units import run_fit
from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.device import setup_runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.finetune.config import FinetuneConfig, Phase
from scarce_ltr.finetune.heads import build_head
from scarce_ltr.finetune.model import Ranker
from scarce_ltr.finetune.run_settings import run_identity
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

DATA = [*tiny_data(), "logger=none", "pretrained=none"]
PHASES = [Phase("head", 2, False), Phase("full", 2, True)]


def ranker() -> Ranker:
    torch.manual_seed(0)
    encoder = build_encoder(EncoderConfig(width=16, hidden=32, n_blocks=2), n_features=12)
    return Ranker(encoder=encoder, head=build_head("mlp", in_dim=16, hidden=16, dropout=0.0))


def rates_stepped(cfg: FinetuneConfig, monkeypatch) -> list[tuple[bool, float]]:
    """``(encoder trained, rate)`` of every optimizer step of a 2 + 2 epoch fit."""
    seen: list[tuple[bool, float]] = []
    step = torch.optim.Adam.step
    model = ranker()
    encoder_weight = next(model.encoder.parameters())

    def recording(optimizer, *args, **kwargs):
        group = optimizer.param_groups[0]
        trains_encoder = any(p is encoder_weight for p in group["params"])
        seen.append((trains_encoder, group["lr"]))
        return step(optimizer, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording)
    prepared, runtime = prepare_data(cfg), setup_runtime(amp=False, device="cpu")
    run_fit(model, cfg, prepared, runtime, PHASES)
    monkeypatch.undo()
    return seen


def test_the_head_phase_steps_at_head_lr_and_the_whole_network_at_lr(monkeypatch) -> None:
    cfg, _ = load_config(FinetuneConfig, [*DATA, "optimizer.lr=2e-4", "head_lr=1e-2"])
    seen = rates_stepped(cfg, monkeypatch)
    head = [rate for trains_encoder, rate in seen if not trains_encoder]
    whole = [rate for trains_encoder, rate in seen if trains_encoder]
    assert head and whole and len(head) + len(whole) == len(seen)
    assert set(head) == {1e-2} and set(whole) == {2e-4}
    plain, _ = load_config(FinetuneConfig, [*DATA, "optimizer.lr=2e-4"])
    assert {rate for _, rate in rates_stepped(plain, monkeypatch)} == {2e-4}


def test_head_lr_follows_the_cosine_schedule_of_its_phase(monkeypatch) -> None:
    args = [*DATA, "optimizer.lr=2e-4", "head_lr=1e-2", "optimizer.schedule=cosine"]
    cfg, _ = load_config(FinetuneConfig, args)
    seen = rates_stepped(cfg, monkeypatch)
    head = [rate for trains_encoder, rate in seen if not trains_encoder]
    whole = [rate for trains_encoder, rate in seen if trains_encoder]
    assert 0 < max(head) <= 1e-2 and max(head) > 1e-3  # warms up to head_lr, then decays
    assert 0 < max(whole) <= 2e-4


def test_unset_head_lr_keeps_the_run_identity() -> None:
    cfg, _ = load_config(FinetuneConfig, DATA)
    assert "head_lr" not in json.loads(run_identity(cfg))
    set_, _ = load_config(FinetuneConfig, [*DATA, "head_lr=1e-2"])
    assert json.loads(run_identity(set_))["head_lr"] == 1e-2


@pytest.mark.parametrize(
    ("strategy", "value", "message"),
    [
        ("lp", "1e-2", "head_lr is for full: lp trains its head alone, at optimizer.lr"),
        ("mp", "1e-2", "head_lr is for full: mp trains"),
        ("full", "0", "head_lr"),
        ("full", "-1e-3", "head_lr"),
    ],
)
def test_bad_head_lr_is_refused(tmp_path, strategy: str, value: str, message: str) -> None:
    args = ["finetune", strategy, *DATA, f"head_lr={value}", f"run_dir={tmp_path / 'run'}"]
    with pytest.raises(UserError, match=message):
        run(args)
    assert not (tmp_path / "run").exists()
