"""Optimizers and schedules (`core.optim`): the A.2.3 default and the A.2.5 recipe."""

from __future__ import annotations

import math

import pytest
import torch
from tiny import tiny_pretraining

from scarce_ltr.cli import run
from scarce_ltr.core.config_fields import OptimizerConfig
from scarce_ltr.core.optim import lr_factor, make_optimizer, set_learning_rate


def test_cosine_warms_up_linearly_then_decays_to_zero() -> None:
    assert lr_factor("constant", 0.1, 0.7) == 1.0
    assert lr_factor("cosine", 0.1, 0.0) == 0.0
    assert lr_factor("cosine", 0.1, 0.05) == pytest.approx(0.5)
    assert lr_factor("cosine", 0.1, 0.1) == pytest.approx(1.0)
    assert lr_factor("cosine", 0.1, 0.55) == pytest.approx(0.5)
    assert lr_factor("cosine", 0.1, 1.0) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor("cosine", 0.0, 0.25) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


def test_adamw_decays_weights_apart_from_the_gradient() -> None:
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = make_optimizer([weight], name="adamw", lr=0.1, weight_decay=0.5)
    assert isinstance(optimizer, torch.optim.AdamW)
    set_learning_rate(optimizer, 0.1, schedule="cosine", warmup=0.0, progress=0.5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    weight.grad = torch.zeros(3)
    optimizer.step()
    assert torch.allclose(weight.detach(), torch.full((3,), 1 - 0.05 * 0.5))


def test_bad_optimizer_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="optimizer.name must be one of adam, adamw"):
        OptimizerConfig(name="sgd")
    with pytest.raises(ValueError, match="optimizer.schedule must be one of constant, cosine"):
        OptimizerConfig(schedule="step")
    with pytest.raises(ValueError, match="optimizer.warmup"):
        OptimizerConfig(warmup=1.0)


def test_the_a25_recipe_runs_pretraining_and_finetuning(tmp_path, monkeypatch) -> None:
    """The recipe's keys reach both training loops: AdamW with its decay, and a cosine rate that
    warms up from 0 to the base rate and decays again within each run (each finetuning phase)."""
    from scarce_ltr.core import optim
    from scarce_ltr.finetune import steps as finetune_steps
    from scarce_ltr.pretrain import train

    steps: list[tuple[str, type, float, float]] = []

    def recording(stage: str):
        def set_and_record(optimizer, lr, **schedule) -> None:
            optim.set_learning_rate(optimizer, lr, **schedule)
            group = optimizer.param_groups[0]
            steps.append((stage, type(optimizer), group["weight_decay"], group["lr"] / lr))

        return set_and_record

    monkeypatch.setattr(train, "set_learning_rate", recording("pretrain"))
    monkeypatch.setattr(finetune_steps, "set_learning_rate", recording("finetune"))
    recipe = ["optimizer.name=adamw", "optimizer.weight_decay=0.01", "optimizer.schedule=cosine"]
    pre, fine = tmp_path / "pre", tmp_path / "fine"
    run(["pretrain", "simclr-rank", *tiny_pretraining(), *recipe, "epochs=2", "item_budget=300",
         "monitor.enabled=false", f"run_dir={pre}"])  # fmt: skip
    report = run(["finetune", "full", *tiny_pretraining()[:4], "logger=none", *recipe,
                  "epochs=4", "item_budget=300", "head_hidden=8", f"pretrained={pre}",
                  f"run_dir={fine}"])  # fmt: skip
    assert "schedule: cosine" in (fine / "config.yaml").read_text()
    assert 0 < report["metrics"]["test"]["ndcg@5"] <= 1
    for stage in ("pretrain", "finetune"):
        mine = [s for s in steps if s[0] == stage]
        assert len(mine) >= 4 and {(s[1], s[2]) for s in mine} == {(torch.optim.AdamW, 0.01)}
        factors = [s[3] for s in mine]
        assert factors[0] == 0.0  # the warmup starts at 0
        assert max(factors) > 0.5 and factors[-1] < max(factors)  # ... rises, then decays


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_multi_tensor_steps_give_the_single_tensor_weights(name: str) -> None:
    """`make_optimizer` steps all tensors at once (``foreach``, also on the CPU): the weights
    are bit for bit those of torch's one-tensor-at-a-time step, with and without decay."""
    for decay in (0.0, 1e-3):
        weights = []
        for foreach in (True, False):
            torch.manual_seed(0)
            model = torch.nn.Sequential(
                torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
            )
            if foreach:
                optimizer = make_optimizer(
                    model.parameters(), name=name, lr=1e-2, weight_decay=decay
                )
                assert optimizer.defaults["foreach"] is True
            else:
                kind = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
                optimizer = kind(model.parameters(), lr=1e-2, weight_decay=decay, foreach=False)
            data = torch.randn(32, 6, generator=torch.Generator().manual_seed(1))
            for _ in range(20):
                optimizer.zero_grad()
                model(data).square().mean().backward()
                optimizer.step()
            weights.append([p.detach().clone() for p in model.parameters()])
        assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))
