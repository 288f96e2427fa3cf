"""bf16 autocast of CPU training steps (``cpu_amp=true``): losses within a stated tolerance of
fp32 on a fixed batch, scoring left in fp32, and a clear refusal where the CPU has no bf16."""

from __future__ import annotations

import json

import pytest
import torch
from tiny import tiny_data, tiny_pretraining

from scarce_ltr import cli
from scarce_ltr.core import device as device_module
from scarce_ltr.core.device import cpu_bf16_supported, setup_runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder
from scarce_ltr.pretrain.objectives.simclr_rank import SimCLRRank
from scarce_ltr.pretrain.objectives.simsiam import SimSiam

needs_bf16 = pytest.mark.skipif(not cpu_bf16_supported(), reason="no native bf16 on this CPU")
# bf16 keeps 8 bits of mantissa: the losses of one batch agree with fp32 within 2 %.
LOSS_TOLERANCE = 0.02


def _batch():
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(6, 40, 24, generator=gen)
    mask = torch.arange(40)[None, :] < torch.tensor([40, 33, 20, 12, 7, 2])[:, None]
    return features, mask


@needs_bf16
@pytest.mark.parametrize("objective_class", [SimCLRRank, SimSiam])
def test_bf16_training_loss_is_within_tolerance_of_fp32(objective_class):
    torch.manual_seed(0)
    encoder = build_encoder(EncoderConfig(width=64, hidden=128, dropout=0.0), n_features=24)
    objective = objective_class(encoder=encoder).train()
    runtime = setup_runtime(amp=False, device="cpu", cpu_amp=True)
    features, mask = _batch()
    fp32 = objective(features, mask, generator=torch.Generator().manual_seed(1))
    with runtime.train_autocast():
        bf16 = objective(features, mask, generator=torch.Generator().manual_seed(1))
    assert bf16.dtype == torch.float32  # the loss itself is reduced in fp32
    assert abs(bf16.item() - fp32.item()) <= LOSS_TOLERANCE * abs(fp32.item())


def test_cpu_amp_is_refused_without_native_bf16(monkeypatch):
    monkeypatch.setattr(device_module, "cpu_bf16_supported", lambda: False)
    with pytest.raises(UserError, match="cpu_amp=true needs a CPU with native bf16"):
        setup_runtime(amp=False, device="cpu", cpu_amp=True)
    assert not setup_runtime(amp=False, device="cpu").cpu_amp


@needs_bf16
def test_a_bf16_pretraining_and_finetuning_run_end_to_end(tmp_path):
    pretrained = tmp_path / "pretrain"
    cli.run(["pretrain", "simclr-rank", *tiny_pretraining(), "epochs=2", "cpu_amp=true",
             f"run_dir={pretrained}"])  # fmt: skip
    report = json.loads((pretrained / "report.json").read_text())
    assert "bf16 autocast in training" in report["device"]
    finetuned = tmp_path / "finetune"
    cli.run(["finetune", "full", *tiny_data(), "logger=none", "epochs=2", "cpu_amp=true",
             f"pretrained={pretrained}", f"run_dir={finetuned}"])  # fmt: skip
    assert (finetuned / "DONE").is_file()
