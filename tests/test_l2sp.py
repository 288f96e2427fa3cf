"""L2-SP finetuning (`finetune.l2sp`): the penalty by hand, off is bit-identical, a large alpha
keeps the encoder near its pretrained weights, the alpha grid, and the refusals."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from test_finetune_units import run_fit
from tiny import small_encoder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.device import setup_runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.finetune.config import FinetuneConfig, Phase
from scarce_ltr.finetune.heads import build_head
from scarce_ltr.finetune.l2sp import L2SP
from scarce_ltr.finetune.model import Ranker
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

DATA = [*tiny_data(), "logger=none"]


def ranker(seed: int = 0) -> Ranker:
    torch.manual_seed(seed)
    encoder = build_encoder(EncoderConfig(width=16, hidden=32, n_blocks=2), n_features=12)
    return Ranker(encoder=encoder, head=build_head("mlp", in_dim=16, hidden=16, dropout=0.0))


def test_penalty_is_zero_at_the_anchor_and_half_alpha_times_the_squared_distance() -> None:
    model = ranker()
    penalty = L2SP(model.encoder, alpha=0.3)
    assert float(penalty().detach()) == 0.0
    deltas = {}
    with torch.no_grad():
        for k, (name, p) in enumerate(model.encoder.named_parameters()):
            deltas[name] = torch.full_like(p, 0.01 * (k + 1))
            p.add_(deltas[name])
        for p in model.head.parameters():  # the head is not anchored
            p.add_(1.0)
    by_hand = 0.3 / 2 * sum(float((d.double() ** 2).sum()) for d in deltas.values())
    value = penalty()
    assert float(value.detach()) == pytest.approx(by_hand, rel=1e-5)
    value.backward()  # the gradient is alpha * (theta - theta^0)
    name, first = next(iter(model.encoder.named_parameters()))
    assert torch.allclose(first.grad, 0.3 * deltas[name], rtol=1e-4)
    assert penalty.epoch_mean() == pytest.approx((0.0 + by_hand) / 2, rel=1e-5)
    assert penalty.epoch_mean() == 0.0  # reset


def test_docstring_example() -> None:
    encoder = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        encoder.weight.copy_(torch.tensor([[1.0, 2.0]]))
    penalty = L2SP(encoder, alpha=0.1)
    with torch.no_grad():
        encoder.weight.copy_(torch.tensor([[1.0, 4.0]]))
    assert float(penalty().detach()) == pytest.approx(0.2)


def _distance(model: Ranker, reference: dict) -> float:
    return sum(
        float((p.detach() - reference[name]).pow(2).sum())
        for name, p in model.encoder.named_parameters()
    )


def test_a_large_alpha_keeps_the_encoder_near_its_start() -> None:
    cfg, _ = load_config(FinetuneConfig, [*DATA, "pretrained=none"])
    prepared, runtime = prepare_data(cfg), setup_runtime(amp=False, device="cpu")
    phases = [Phase("full", 4, True)]
    start = {k: v.detach().clone() for k, v in ranker().encoder.named_parameters()}
    distances, histories = {}, {}
    for alpha in (0.0, 100.0):
        model = ranker()
        options = replace(cfg.train_options(), lr=1e-2, l2sp=alpha)
        seen: list[float] = []  # after each epoch, before the vali-best weights are restored
        result = run_fit(
            model,
            cfg,
            prepared,
            runtime,
            phases,
            options=options,
            log=lambda row, model=model, seen=seen: seen.append(_distance(model, start)),
        )
        histories[alpha] = [row for row in result.history if row["epoch"] > 0]
        distances[alpha] = seen[-1]
    assert distances[100.0] < 0.2 * distances[0.0], distances
    assert all("l2sp_penalty" not in row for row in histories[0.0])
    # the first step is at the anchor (0); later ones are not
    assert histories[100.0][-1]["l2sp_penalty"] > 0


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    torch.set_num_threads(1)
    out = root / "simclr-rank"
    run(
        ["pretrain", "simclr-rank", *DATA, *small_encoder(), "epochs=1", "monitor.enabled=false"]
        + [f"run_dir={out}"]
    )
    return out


def finetune(run_dir, *args: str):
    args = ("head_hidden=16", "epochs=4", "optimizer.lr=1e-2", *args)
    return run(["finetune", "full", *DATA, f"run_dir={run_dir}", *args])


def report(run_dir) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def test_l2sp_zero_is_bit_identical(pretrained, tmp_path) -> None:
    source = f"pretrained={pretrained}"
    finetune(tmp_path / "without", source)
    finetune(tmp_path / "zero", source, "l2sp=0")
    without, zero = report(tmp_path / "without"), report(tmp_path / "zero")
    assert without["metrics"] == zero["metrics"] and without["history"] == zero["history"]
    assert "l2sp" not in zero and without["identity"] == zero["identity"]
    weights = [
        torch.load(tmp_path / name / "model.pt", weights_only=True)["state_dict"]
        for name in ("without", "zero")
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    # the same run: l2sp=0 in the folder of a run without the key is skipped, not refused
    assert finetune(tmp_path / "without", source, "l2sp=0") is None


def test_l2sp_grid_keeps_the_vali_best_alpha(pretrained, tmp_path) -> None:
    run_dir = tmp_path / "grid"
    finetune(run_dir, f"pretrained={pretrained}", "l2sp_grid=[0.01,10]")
    got = report(run_dir)
    rows = {row["l2sp"]: row["best_vali_ndcg@5"] for row in got["lr_grid"]}
    assert sorted(rows) == [0.01, 10]
    assert got["l2sp"] == max(rows, key=rows.get)  # the first of ties
    chosen = run_dir / "grid" / f"l2sp={got['l2sp']:g}"
    assert (run_dir / "model.pt").read_bytes() == (chosen / "model.pt").read_bytes()
    history = json.loads((chosen / "result.json").read_text())["history"]
    assert any(row.get("l2sp_penalty", 0) > 0 for row in history)
    # a fixed alpha: no grid, the alpha in the report
    finetune(tmp_path / "fixed", f"pretrained={pretrained}", "l2sp=0.5")
    assert report(tmp_path / "fixed")["l2sp"] == 0.5


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["pretrained=none", "l2sp=0.1"], "l2sp needs pretrained="),
        (["pretrained=none", "l2sp_grid=[0.1,1]"], "l2sp_grid needs pretrained="),
        (["PRETRAINED", "l2sp=-1"], "l2sp"),
        (["PRETRAINED", "l2sp_grid=[1,1]"], "distinct"),
        (["PRETRAINED", "l2sp=0.1", "full_epochs=0"], "whole-network epochs"),
        (["PRETRAINED", "l2sp_grid=[0.1,1]", "search.n_trials=2"], "one or the other"),
    ],
)
def test_l2sp_where_it_cannot_apply_is_refused(pretrained, tmp_path, args, match) -> None:
    args = [f"pretrained={pretrained}" if a == "PRETRAINED" else a for a in args]
    with pytest.raises(UserError, match=match):
        finetune(tmp_path / "x", *args)


@pytest.mark.parametrize("strategy", ["lp", "mp"])
def test_l2sp_on_a_frozen_encoder_is_refused(pretrained, tmp_path, strategy) -> None:
    with pytest.raises(UserError, match=f"l2sp is for full: {strategy} never trains"):
        run(
            ["finetune", strategy, *DATA, f"pretrained={pretrained}", "l2sp=0.1"]
            + [f"run_dir={tmp_path / 'x'}"]
        )


def test_search_draws_l2sp_when_given_a_range(pretrained, tmp_path) -> None:
    args = ["search.n_trials=3", "search.head_epochs=[1,2]", "search.full_epochs=[1,2]"]
    got = finetune(tmp_path / "search", f"pretrained={pretrained}", *args, "search.l2sp=[0.01,10]")
    trials = got["search"]["trials"]
    assert "l2sp" in got["search"]["searched"]
    assert trials[0]["l2sp"] == 0.0  # the fixed recipe first: l2sp off
    drawn = [t["l2sp"] for t in trials if t["l2sp"] > 0]
    assert all(0.01 <= alpha <= 10 for alpha in drawn)
    chosen = got["search"]["chosen_params"]["l2sp"]
    assert got.get("l2sp", 0.0) == chosen  # the kept trial's alpha (absent when off)
    with pytest.raises(UserError, match="search.l2sp needs pretrained="):
        finetune(tmp_path / "x", "pretrained=none", *args, "search.l2sp=[0.01,10]")
    with pytest.raises(UserError, match="deep.search.l2sp"):
        run(
            ["baseline", "resnet", *DATA, "deep.search.l2sp=[0.01,10]", f"run_dir={tmp_path / 'y'}"]
        )
