"""DASALC (qin2021): the model, the input noise of supervised training, the baseline end to end,
its bundle and its seed ensemble; and the allRank losses reached from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_data

import scarce_ltr
from scarce_ltr.baselines.deep.dasalc import DASALC
from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.device import setup_runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.finetune.steps import train_epoch
from scarce_ltr.models.names import model_group

# Bundles score as their runs did, bit for bit: runs trained on the CPU (tests/conftest.py).
pytestmark = pytest.mark.cpu

DATA = [*tiny_data(), "logger=none"]
SMALL = ["deep.hidden=16", "deep.n_heads=2", "deep.attention_layers=1", "deep.n_layers=2"]


def small_dasalc(seed: int = 0) -> DASALC:
    torch.manual_seed(seed)
    return DASALC(n_features=6, hidden=8, n_layers=2, attention_layers=1, n_heads=2, dropout=0.1)


def test_dasalc_is_permutation_equivariant_and_ignores_padding() -> None:
    model = small_dasalc().eval()
    x = torch.randn(2, 5, 6)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    perm = torch.tensor([2, 0, 1, 3, 4])
    with torch.no_grad():
        out = model(x, mask)
        permuted = model(x[:, perm], mask[:, perm])
        garbage = torch.full((2, 3, 6), float("nan"))
        wider = model(torch.cat([x, garbage], 1), torch.cat([mask, torch.zeros(2, 3).bool()], 1))
        alone = model(x[:1, :3], mask[:1, :3])  # a QG's scores do not depend on its batch
    assert torch.allclose(out[:, perm], permuted, atol=1e-5)
    assert torch.allclose(out, wider[:, :5], atol=1e-5) and torch.all(wider[:, 5:] == 0)
    assert torch.allclose(out[:1, :3], alone, atol=1e-5)
    assert torch.all(out[0, 3:] == 0)
    # the context matters: an item's score changes when the other items of its QG change
    other = x.clone()
    other[0, 1:3] += 3.0
    with torch.no_grad():
        assert not torch.allclose(model(other, mask)[0, 0], out[0, 0])
    with pytest.raises(ValueError, match="divide"):
        DASALC(n_features=6, hidden=10, n_layers=1, attention_layers=1, n_heads=3, dropout=0.0)


class _Recorder(torch.nn.Module):
    """Scores the first feature and keeps every input it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.seen: list[torch.Tensor] = []

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.seen.append(features.detach().clone())
        return torch.where(mask, self.w * features[..., 0], 0.0)


def _noisy_inputs(noise_std: float, seed: int) -> tuple[list[torch.Tensor], list]:
    cfg, _ = load_config(CommonConfig, DATA)
    split = load_dataset(cfg.data)["train"]
    batches = QueryGroupBatcher(split, item_budget=200)
    model = _Recorder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    runtime = setup_runtime(amp=False, device="cpu")
    generator = torch.Generator().manual_seed(seed)
    loss = lambda s, y, *, mask: (s * mask).sum()  # noqa: E731
    train_epoch(
        model, batches, optimizer, loss, runtime=runtime, noise_std=noise_std, generator=generator
    )
    return model.seen, list(batches)


def test_input_noise_is_seeded_gaussian_on_real_items_only() -> None:
    clean, batches = _noisy_inputs(0.0, seed=0)
    noisy, _ = _noisy_inputs(2.0, seed=0)
    again, _ = _noisy_inputs(2.0, seed=0)
    other, _ = _noisy_inputs(2.0, seed=1)
    for c, n, a, o, batch in zip(clean, noisy, again, other, batches, strict=True):
        mask = batch.mask
        assert torch.equal(c, batch.features)  # off: the batch as it is
        assert torch.equal(n, a) and not torch.equal(n, o)  # seeded
        assert torch.all(n[~mask] == 0)  # padding untouched
    diff = torch.cat([(n - c)[b.mask] for n, c, b in zip(noisy, clean, batches, strict=True)])
    assert diff.std().item() == pytest.approx(2.0, rel=0.1) and abs(diff.mean().item()) < 0.1
    with pytest.raises(ValueError, match="generator"):
        runtime = setup_runtime(amp=False, device="cpu")
        train_epoch(_Recorder(), [], None, None, runtime=runtime, noise_std=1.0)


@pytest.fixture(scope="module")
def dasalc_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dasalc") / "run"
    torch.set_num_threads(1)
    run(["baseline", "dasalc", *DATA, *SMALL, "deep.lrs=[5e-3]", "epochs=2", f"run_dir={out}"])
    return out


def test_dasalc_baseline_trains_with_the_papers_ingredients(dasalc_run: Path) -> None:
    report = json.loads((dasalc_run / "report.json").read_text())
    assert report["group"] == "no-pretrain-dl" and report["method"] == "dasalc"
    assert report["metrics"]["test"]["ndcg@5"] > 0
    config = (dasalc_run / "config.yaml").read_text()
    assert "transform: log1p\n" in config  # signed log1p, no standardisation (eq. 6)
    assert "noise_std: 1.5" in config and "name: softmax" in config


def test_dasalc_bundle_scores_the_test_split_as_the_run_did(dasalc_run: Path) -> None:
    manifest = json.loads((dasalc_run / "bundle" / "bundle.json").read_text())
    assert manifest["transform"]["kind"] == "log1p"
    cfg, _ = load_config(CommonConfig, DATA)
    ranker = scarce_ltr.load_ranker(dasalc_run)
    with np.load(dasalc_run / "scores.npz") as saved:
        expected = saved["test"]
    np.testing.assert_array_equal(ranker.score_split(load_dataset(cfg.data)["test"]), expected)


def test_dasalc_seed_ensemble_is_a_sweep_model(tmp_path: Path) -> None:
    assert model_group("seed-ensemble:dasalc") == "no-pretrain-dl"
    keys = [*tiny_data(), *SMALL, "deep.lrs=[5e-3]", "epochs=1"]
    common = "[" + ",".join(f"'{key}'" for key in keys) + "]"  # quoted: a list inside a list
    cells = run([
        "sweep", "quick", 'models=["seed-ensemble:dasalc"]', "fractions=[1.0]", "seeds=[0]",
        "seed_ensemble_size=2", "workers=1", "logger=none", "report=false",
        f"overrides.common={common}", "overrides.pretrain=[]", "overrides.finetune=[]",
        f"run_dir={tmp_path / 'sweep'}",
    ])  # fmt: skip
    assert [(c["status"], c["group"]) for c in cells] == [("done", "no-pretrain-dl")]
    report = json.loads((Path(cells[0]["run_dir"]) / "report.json").read_text())
    assert [Path(r).name for r in report["runs"]] == ["seed=0", "seed=1000"]
    assert all("/baseline/dasalc/" in r for r in report["runs"])
    # the members' log1p transform differs from the ensemble's (the data set's) and that is fine:
    # each member's bundle applies its own
    cfg, _ = load_config(CommonConfig, DATA)
    ranker = scarce_ltr.load_ranker(cells[0]["run_dir"])
    with np.load(Path(cells[0]["run_dir"]) / "scores.npz") as saved:
        expected = saved["test"]
    np.testing.assert_allclose(ranker.score_split(load_dataset(cfg.data)["test"]), expected)


def test_bad_dasalc_and_noise_keys(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="n_heads"):
        run(["baseline", "dasalc", *DATA, "deep.hidden=10", "deep.n_heads=3",
             f"run_dir={tmp_path / 'a'}"])  # fmt: skip
    with pytest.raises(UserError, match="noise_std"):
        run(["baseline", "resnet", *DATA, "deep.noise_std=-1", f"run_dir={tmp_path / 'b'}"])
    with pytest.raises(UserError, match="noise_std"):
        run(["finetune", "full", *DATA, "pretrained=none", "noise_std=-0.5",
             f"run_dir={tmp_path / 'c'}"])  # fmt: skip


@pytest.mark.parametrize("loss", ["neural-ndcg", "lambdaloss", "listmle", "listnet", "rmse"])
def test_new_losses_reach_finetuning_and_the_deep_baselines(tmp_path: Path, loss: str) -> None:
    finetuned = tmp_path / "ft"
    run(["finetune", "full", *DATA, "pretrained=none", "encoder.width=8", "encoder.hidden=16",
         "head_hidden=8", "epochs=1", f"loss.name={loss}", "noise_std=0.5",
         f"run_dir={finetuned}"])  # fmt: skip
    assert f"name: {loss}" in (finetuned / "config.yaml").read_text()
    baseline = tmp_path / "resnet"
    run(["baseline", "resnet", *DATA, "deep.lrs=[1e-3]", "deep.encoder.width=8",
         "deep.encoder.hidden=16", "deep.head_hidden=8", "epochs=1", f"deep.loss.name={loss}",
         f"run_dir={baseline}"])  # fmt: skip
    assert f"name: {loss}" in (baseline / "config.yaml").read_text()
    assert (baseline / "DONE").is_file() and (finetuned / "DONE").is_file()
