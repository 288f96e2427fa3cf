"""The CUDA path, on a machine with an NVIDIA GPU (skipped elsewhere: CI has none).

bf16 autocast losses of every pretraining method within a stated tolerance of fp32 on a fixed
batch; the encoder gives the same fp32 outputs on the CPU and the GPU; a pretraining interrupted
on the GPU and resumed ends with the weights of an uninterrupted one, and batches gathered on the
GPU train the weights of batches collated on the host; a ranker trained on the GPU
(bf16 training steps) scores on a CPU as its run scored its test split, since scoring is fp32.
Select them with ``pytest -m cuda``; ``benchmarks/gpu_checks.sh`` runs them on a lent GPU with
the rest of the suite and the GPU benchmarks (benchmarks/LOG.md, "The CUDA path").
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny import small_encoder, tiny_data, tiny_pretraining

import scarce_ltr
from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.device import setup_runtime
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder
from scarce_ltr.pretrain.objectives import OBJECTIVES, build_objective
from scarce_ltr.pretrain.train import CRASH_ENV, SimulatedCrash

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here"),
]
# bf16 keeps 8 bits of mantissa: one batch's loss agrees with fp32 within 2 % (as on the CPU,
# tests/test_cpu_amp.py), and within 0.02 for losses below one (SimSiam's 1 - cos is near 0).
BF16_LOSS_TOLERANCE = 0.02
CUDA = torch.device("cuda")


def _batch(device: torch.device):
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(6, 40, 24, generator=gen)
    mask = torch.arange(40)[None, :] < torch.tensor([40, 33, 20, 12, 7, 2])[:, None]
    return features.to(device), mask.to(device)


@pytest.mark.parametrize("method", tuple(OBJECTIVES))
def test_bf16_autocast_loss_is_within_tolerance_of_fp32(method):
    torch.manual_seed(0)
    overrides = [f"method={method}", "encoder.width=64", "encoder.hidden=128"]
    cfg, _ = load_config(PretrainConfig, [*overrides, "encoder.dropout=0.0"])
    objective = build_objective(cfg, n_features=24).to(CUDA).train()
    runtime = setup_runtime(amp=True, device="cuda")
    features, mask = _batch(CUDA)
    fp32 = objective(features, mask, generator=torch.Generator(CUDA).manual_seed(1))
    with runtime.train_autocast():
        bf16 = objective(features, mask, generator=torch.Generator(CUDA).manual_seed(1))
    assert bf16.dtype == torch.float32  # the loss itself is reduced in fp32
    gap = abs(bf16.item() - fp32.item())
    limit = BF16_LOSS_TOLERANCE * max(abs(fp32.item()), 1.0)
    assert gap <= limit, (method, fp32.item(), bf16.item())


def test_the_encoder_gives_the_same_fp32_outputs_on_cpu_and_cuda():
    torch.manual_seed(0)
    encoder = build_encoder(EncoderConfig(width=64, hidden=128), n_features=24).eval()
    features, mask = _batch(torch.device("cpu"))
    with torch.no_grad():
        on_cpu = encoder(features, mask)
        on_gpu = encoder.to(CUDA)(features.to(CUDA), mask.to(CUDA)).cpu()
    torch.testing.assert_close(on_gpu, on_cpu, atol=1e-4, rtol=1e-4)


def _pretrain(method: str, run_dir, *extra: str) -> dict:
    return run(["pretrain", method, *tiny_pretraining(), "device=cuda", f"run_dir={run_dir}",
                *extra])  # fmt: skip


def _weights(run_dir) -> dict:
    return torch.load(run_dir / "encoder.pt", weights_only=True)["state_dict"]


@pytest.mark.parametrize("method", ["simclr-rank", "simsiam"])
def test_resume_after_a_crash_on_cuda_gives_the_same_weights(method, tmp_path, monkeypatch):
    args = ("epochs=3", "item_budget=150", "encoder.dropout=0.2", "length_buckets=true")
    straight = _pretrain(method, tmp_path / "straight", *args)
    assert straight["device"].startswith("cuda")
    monkeypatch.setenv(CRASH_ENV, str(straight["history"][0]["steps"] + 2))  # in epoch 2
    with pytest.raises(SimulatedCrash):
        _pretrain(method, tmp_path / "crashed", *args)
    monkeypatch.delenv(CRASH_ENV)
    _pretrain(method, tmp_path / "crashed", *args)
    expected, resumed = _weights(tmp_path / "straight"), _weights(tmp_path / "crashed")
    for key in expected:
        assert torch.equal(expected[key], resumed[key]), key


def test_batches_gathered_on_the_gpu_train_the_weights_of_host_batches(tmp_path):
    args = ("epochs=2", "item_budget=150", "length_buckets=true", "monitor.enabled=false")
    _pretrain("simclr-rank", tmp_path / "host", *args, "gather_on_device=false")
    _pretrain("simclr-rank", tmp_path / "gpu", *args)  # auto: gathered on the GPU
    host, gathered = _weights(tmp_path / "host"), _weights(tmp_path / "gpu")
    for key in host:
        assert torch.equal(host[key], gathered[key]), key


def test_a_ranker_trained_on_cuda_scores_on_a_cpu_as_its_run_did(tmp_path):
    data = [*tiny_data(), "logger=none"]
    pretrained, finetuned = tmp_path / "pretrain", tmp_path / "full"
    run(["pretrain", "simclr-rank", *data, *small_encoder(), "epochs=2", "device=cuda",
         f"run_dir={pretrained}"])  # fmt: skip
    run(["finetune", "full", *data, "epochs=3", "head_hidden=16", "device=cuda",
         f"pretrained={pretrained}", f"run_dir={finetuned}"])  # fmt: skip
    report = json.loads((finetuned / "report.json").read_text())
    assert "cuda" in report["device"] and "bf16 autocast in training" in report["device"]
    cfg, _ = load_config(CommonConfig, data)
    on_cpu = scarce_ltr.load_ranker(finetuned).score_split(load_dataset(cfg.data)["test"])
    with np.load(finetuned / "scores.npz") as saved:
        np.testing.assert_allclose(on_cpu, saved["test"], rtol=1e-4, atol=1e-5)
