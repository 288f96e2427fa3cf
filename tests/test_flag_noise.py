"""Flag noise (``augment.binary_p``): the two-valued columns of the training items get draws from
their own marginal instead of zeroing and Gaussian noise, in simclr-rank's and simsiam's views;
off by default, where the views are what they were."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_pretraining

from scarce_ltr.cli import run
from scarce_ltr.pretrain.augmentations import view_augmentation
from scarce_ltr.pretrain.config import AugmentConfig, PretrainConfig
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder
from scarce_ltr.pretrain.flag_noise import FlagColumns, flag_swap
from scarce_ltr.pretrain.objectives.simclr_rank import SimCLRRank
from scarce_ltr.pretrain.objectives.simsiam import SimSiam


def _items(n: int = 4000, seed: int = 0) -> torch.Tensor:
    """``[n, 3]``: a 0/1 flag with mean 0.2, a continuous column, a flag with mean 0.9."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack(
        [
            (torch.rand(n, generator=g) < 0.2).float(),
            torch.randn(n, generator=g),
            (torch.rand(n, generator=g) < 0.9).float(),
        ],
        dim=1,
    )


def test_flag_columns_are_the_two_valued_ones_with_their_marginals():
    items = torch.tensor([[0.0, 0.5, 3.0, -1.0], [1.0, 0.7, 3.0, 2.0], [1.0, 0.1, 3.0, -1.0]])
    flags = FlagColumns.of(items)
    assert flags.columns.tolist() == [True, False, False, True]  # a constant is no flag
    assert flags.low.tolist() == [0.0, 0.0, 0.0, -1.0]
    assert flags.high.tolist() == [1.0, 0.0, 0.0, 2.0]  # two values after any affine map too
    assert torch.allclose(flags.p_high, torch.tensor([2 / 3, 0.0, 0.0, 1 / 3]))


def test_flag_swap_keeps_flags_in_their_values_and_draws_from_their_marginal():
    items = _items()
    flags = FlagColumns.of(items)
    out = flag_swap(items, None, p=1.0, flags=flags, generator=torch.Generator().manual_seed(0))
    assert set(out[:, 0].tolist()) <= {0.0, 1.0} and set(out[:, 2].tolist()) <= {0.0, 1.0}
    assert torch.equal(out[:, 1], items[:, 1])  # the continuous column untouched
    # p=1: every flag a fresh Bernoulli(its mean) draw, independent of the item's own value
    assert abs(out[:, 0].mean() - items[:, 0].mean()) < 0.02
    assert abs(out[:, 2].mean() - items[:, 2].mean()) < 0.02
    assert 0.05 < (out[:, 0] != items[:, 0]).float().mean() < 0.5
    # A fixed-seed example, p=0.5, a flag of mean 1/3 beside a continuous column. Generator
    # seed 3 draws the flag's replacement keys 0.004 0.286 0.472 0.772 0.594 0.451 (items 0, 1,
    # 2 and 5 below 0.5: replaced) and the value keys 0.150 0.054 0.176 0.847 0.648 0.949 (below
    # 1/3: the value 1): items 0-2 become 1, item 5 becomes 0, items 3 and 4 keep theirs.
    tiny = torch.tensor([[0, 0.25], [1, 0.5], [0, 0.75], [0, 1], [1, 0], [0, 0.5]])
    got = flag_swap(
        tiny, None, p=0.5, flags=FlagColumns.of(tiny), generator=torch.Generator().manual_seed(3)
    )
    assert got[:, 0].tolist() == [1, 1, 1, 0, 1, 0]
    assert torch.equal(got[:, 1], tiny[:, 1])


def test_flag_swap_ignores_padding():
    items = _items(n=5)
    flags = FlagColumns.of(_items())
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    padded = torch.full((2, 4, 3), 7.0)
    padded[mask] = items
    out = flag_swap(padded, mask, p=0.5, flags=flags, generator=torch.Generator().manual_seed(1))
    flat = flag_swap(items, None, p=0.5, flags=flags, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out[mask], flat) and not out[~mask].any()


def _encoder(n_features: int = 3):
    return build_encoder(EncoderConfig(width=8, hidden=8, n_blocks=1), n_features=n_features)


@pytest.mark.parametrize("cls", [SimCLRRank, SimSiam])
def test_views_give_flags_flag_noise_and_the_rest_gaussian_noise(cls):
    items = _items(n=200)
    objective = cls(encoder=_encoder(), zero_p=0.2, noise_scale=1.0, binary_p=0.3)
    assert objective.needs_training_items
    with pytest.raises(RuntimeError, match="set_training_items"):
        objective.project_two_views(
            items[None], torch.ones(1, 200, dtype=torch.bool), generator=torch.Generator()
        )
    objective.set_training_items(_items())
    view = objective.augment(items, None, generator=torch.Generator().manual_seed(0))
    assert set(view[:, 0].tolist()) <= {0.0, 1.0} and set(view[:, 2].tolist()) <= {0.0, 1.0}
    assert 0.0 < (view[:, 0] != items[:, 0]).float().mean() < 0.3
    assert len(set(view[:, 1].tolist()) - set(items[:, 1].tolist())) > 100  # noised
    assert objective.state_dict()["flag_columns"].tolist() == [True, False, True]


@pytest.mark.parametrize("cls", [SimCLRRank, SimSiam])
def test_off_by_default_the_views_are_unchanged(cls):
    items = _items(n=50)
    objective = cls(encoder=_encoder(), zero_p=0.2, noise_scale=1.0)
    objective.set_training_items(_items())  # nothing to find: no buffers, same views
    assert not objective.needs_training_items
    assert not any(k.startswith("flag_") for k in objective.state_dict())
    before = view_augmentation(zero_p=0.2, noise_scale=1.0)
    a = objective.augment(items, None, generator=torch.Generator().manual_seed(0))
    b = before(items, None, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)


def test_binary_p_is_the_view_methods_own():
    with pytest.raises(ValueError, match="augment.binary_p"):
        AugmentConfig(binary_p=1.5)
    said = r"augment.binary_p=0.3: method=scarf .*simclr-rank.*simsiam"
    with pytest.raises(ValueError, match=said):
        PretrainConfig(method="scarf", augment=AugmentConfig(binary_p=0.3))
    for method in ("simclr-rank", "simsiam", "simclr", "simclr-sample"):
        PretrainConfig(method=method, augment=AugmentConfig(binary_p=0.3))


def _flag_folder(root: Path) -> Path:
    """A LETOR folder of 30 / 10 / 10 QGs of 6 items: features 1 and 3 are 0/1 flags."""
    rng = np.random.default_rng(0)
    for split, n_qgs in (("train", 30), ("vali", 10), ("test", 10)):
        lines = []
        for qid in range(n_qgs):
            for _ in range(6):
                x = [float(rng.random() < 0.3), rng.normal(), float(rng.random() < 0.7)]
                label = int(rng.integers(0, 3))
                lines.append(
                    f"{label} qid:{qid} " + " ".join(f"{j + 1}:{v:g}" for j, v in enumerate(x))
                )
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize("method", ["simclr-rank", "simsiam"])
def test_pretraining_takes_binary_p_from_the_command_line(method, tmp_path):
    data = ["data=letor", f"data.path={_flag_folder(tmp_path)}", "data.transform=standardize"]
    common = [*tiny_pretraining()[4:], *data, "epochs=2", "item_budget=60"]
    run(["pretrain", method, *common, f"run_dir={tmp_path / 'flags'}", "augment.binary_p=0.3"])
    run(["pretrain", method, *common, f"run_dir={tmp_path / 'plain'}"])
    flags = json.loads((tmp_path / "flags" / "report.json").read_text())
    plain = json.loads((tmp_path / "plain" / "report.json").read_text())
    assert flags["loss_curve"] != plain["loss_curve"]  # the views differ: the key took effect


def test_a_crashed_run_with_flag_noise_resumes_to_the_same_weights(tmp_path, monkeypatch):
    from scarce_ltr.pretrain.train import CHECKPOINT, CRASH_ENV, SimulatedCrash

    data = ["data=letor", f"data.path={_flag_folder(tmp_path)}", "data.transform=standardize"]
    args = ["pretrain", "simsiam", *tiny_pretraining()[4:], *data, "epochs=3", "item_budget=60"]
    args.append("augment.binary_p=0.5")
    straight = run([*args, f"run_dir={tmp_path / 'straight'}"])
    monkeypatch.setenv(CRASH_ENV, str(straight["history"][0]["steps"] + 1))  # in epoch 2
    with pytest.raises(SimulatedCrash):
        run([*args, f"run_dir={tmp_path / 'crashed'}"])
    saved = torch.load(tmp_path / "crashed" / CHECKPOINT, weights_only=True)["model"]
    assert saved["flag_columns"].tolist() == [True, False, True]  # the flags travel with it
    monkeypatch.delenv(CRASH_ENV)
    run([*args, f"run_dir={tmp_path / 'crashed'}"])
    a, b = (
        torch.load(tmp_path / d / "encoder.pt", weights_only=True)["state_dict"]
        for d in ("straight", "crashed")
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
