"""What pretraining learned (effective rank of vali embeddings, the random-encoder reference)
and donors drawn within the QG (``augment.replace_source=qg``): replacements come from the
item's own QG, padding never leaks in, the default stays the global draw."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from tiny import tiny_pretraining

from scarce_ltr.cli import run
from scarce_ltr.pretrain.augmentations import (
    group_index,
    qg_corruption,
    qg_scarf_corruption,
    view_augmentation,
)
from scarce_ltr.pretrain.config import AugmentConfig, PretrainConfig
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder
from scarce_ltr.pretrain.monitor import effective_rank
from scarce_ltr.pretrain.objectives.scarf import SCARF
from scarce_ltr.pretrain.objectives.simclr_rank import SimCLRRank

SENTINEL = 1e6  # in padded slots: a replaced value equal to it came from the padding


def _qg_batch(width: int = 7):
    """``[3, width, 4]`` features whose value names its QG: ``100 * (qg + 1) + item``, so any
    value's QG is ``value // 100 - 1``; padded slots hold ``SENTINEL``."""
    sizes = torch.tensor([5, 1, 3])
    mask = torch.arange(width)[None, :] < sizes[:, None]
    qg = torch.arange(3)[:, None, None].float()
    item = torch.arange(width)[None, :, None].float()
    features = (100 * (qg + 1) + item + torch.zeros(1, 1, 4)).where(mask[..., None], SENTINEL)
    return features, mask


def _from_own_qg(values: torch.Tensor, mask: torch.Tensor) -> bool:
    """Every real entry holds a value of its own QG's real items (the padding is zero)."""
    qg_of_slot = torch.arange(mask.shape[0])[:, None, None].expand_as(values)
    own = (values // 100 - 1 == qg_of_slot) & (values % 100 < mask.sum(1)[:, None, None])
    return bool(own[mask].all()) and bool((values[~mask] == 0).all())


def test_effective_rank_by_hand():
    # Centred already; orthogonal columns of norms 2 sqrt(2) and sqrt(2): p = (2/3, 1/3).
    x = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    p = np.array([2 / 3, 1 / 3])
    assert effective_rank(x) == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-9)
    assert effective_rank(x + 5.0) == pytest.approx(effective_rank(x))  # centred first
    assert effective_rank(np.eye(4)) == pytest.approx(3.0)  # centred: 3 equal directions


@pytest.mark.parametrize("form", ["padded", "items"])
def test_qg_corruption_draws_from_the_own_qg_never_the_padding(form):
    features, mask = _qg_batch()
    gen = torch.Generator().manual_seed(0)
    if form == "padded":
        out, drawn = qg_corruption(features, mask, p=1.0, generator=gen)
    else:
        items, drawn_items = qg_corruption(
            features[mask], None, p=1.0, generator=gen, groups=group_index(mask)
        )
        out = torch.zeros_like(features).masked_scatter(mask[..., None], items)
        drawn = torch.zeros_like(mask[..., None].expand_as(features))
        drawn[mask] = drawn_items
    assert bool(drawn[mask].all())
    assert _from_own_qg(out, mask)
    assert not torch.equal(out[mask], features[mask])  # something moved within the QGs
    assert torch.equal(out[1, 0], features[1, 0])  # a one-item QG can only give itself


def test_global_corruption_crosses_qgs_the_qg_one_does_not():
    # The check above fails for the default (global) draw: it is what tells the two apart.
    features, mask = _qg_batch()
    gen = torch.Generator().manual_seed(0)
    out = view_augmentation(replace_p=1.0)(features, mask, generator=gen)
    assert not _from_own_qg(out, mask)
    gen = torch.Generator().manual_seed(0)
    out = view_augmentation(replace_p=1.0, replace_source="qg")(features, mask, generator=gen)
    assert _from_own_qg(out, mask)


def test_qg_draws_ignore_the_padding_width_and_match_the_item_form():
    narrow, mask = _qg_batch(width=5)
    wide, wide_mask = _qg_batch(width=9)
    augment = view_augmentation(replace_p=0.5, noise_scale=0.3, replace_source="qg")
    a = augment(narrow, mask, generator=torch.Generator().manual_seed(3))
    b = augment(wide, wide_mask, generator=torch.Generator().manual_seed(3))
    items = augment(
        narrow[mask], None, generator=torch.Generator().manual_seed(3), groups=group_index(mask)
    )
    assert torch.equal(a[mask], b[wide_mask]) and torch.equal(a[mask], items)
    with pytest.raises(ValueError, match="QG structure"):
        augment(narrow[mask], None, generator=torch.Generator().manual_seed(3))


def test_qg_scarf_corruption_replaces_exactly_the_rate_from_the_own_qg():
    features, mask = _qg_batch()
    features = features + torch.arange(4) * 0.001 * mask[..., None]  # columns tell apart
    gen = torch.Generator().manual_seed(1)
    out = qg_scarf_corruption(features, mask, rate=0.5, generator=gen)
    # A donor's value keeps its column: only the item part (value % 100 // 1) may change.
    assert torch.allclose(out[mask] % 1, features[mask] % 1)
    assert _from_own_qg(torch.floor(out), mask)


def test_objectives_pass_the_qgs_to_their_views():
    features, mask = _qg_batch()
    encoder = build_encoder(EncoderConfig(width=8, hidden=8, n_blocks=1), n_features=4)
    simclr = SimCLRRank(encoder=encoder, noise_scale=0.0, replace_p=1.0, replace_source="qg")
    seen = []
    simclr.encode = lambda x, m: seen.append(x) or torch.zeros(x.shape[0], 8)  # type: ignore
    simclr.project_two_views(features, mask, generator=torch.Generator().manual_seed(0))
    for view in seen:
        padded = torch.zeros_like(features)
        padded[mask] = view
        assert _from_own_qg(padded, mask)
    scarf = SCARF(encoder=encoder, corrupt_p=1.0, replace_source="qg")
    scarf.set_training_items(torch.full((4, 4), -5.0))  # a global donor would show as -5
    seen.clear()
    scarf.encode = lambda x, m: seen.append(x) or torch.zeros(x.shape[0], 8)  # type: ignore
    scarf(features, mask, generator=torch.Generator().manual_seed(0))
    corrupted = torch.zeros_like(features)
    corrupted[mask] = seen[1]  # anchors first, then the corrupted views
    assert _from_own_qg(corrupted, mask)


def test_method_options_are_checked_against_the_method():
    said = r"temperature=0\.5: method=simsiam does not read it \(read with method=simclr-rank, "
    with pytest.raises(ValueError, match=said):
        PretrainConfig(method="simsiam", temperature=0.5)
    with pytest.raises(ValueError, match=r"vime_alpha=1\.0: method=scarf .*with method=vime\)"):
        PretrainConfig(method="scarf", vime_alpha=1.0)
    PretrainConfig(method="simsiam", temperature=0.1)  # the default: nothing set
    PretrainConfig(method="vime", vime_alpha=1.0)
    PretrainConfig(method="dacl", temperature=0.5)


def test_replace_keys_are_checked_against_the_method():
    assert AugmentConfig().replace_source == "global" and AugmentConfig().replace_p == 0.0
    with pytest.raises(ValueError, match="augment.replace_source"):
        AugmentConfig(replace_source="query")
    with pytest.raises(ValueError, match="augment.replace_p"):
        AugmentConfig(replace_p=1.5)
    with pytest.raises(ValueError, match="augment.replace_source=qg: method=dacl does not"):
        PretrainConfig(method="dacl", augment=AugmentConfig(replace_source="qg"))
    with pytest.raises(ValueError, match="augment.replace_p=0.3: method=scarf does not"):
        PretrainConfig(method="scarf", augment=AugmentConfig(replace_p=0.3))
    PretrainConfig(method="vime", augment=AugmentConfig(replace_source="qg"))


def test_report_holds_the_diagnosis_with_the_random_encoder(tmp_path):
    extra = ["epochs=2", "item_budget=200", "augment.replace_p=0.3", "augment.replace_source=qg"]
    run(["pretrain", "simclr-rank", *tiny_pretraining(), f"run_dir={tmp_path}", *extra])
    report = json.loads((tmp_path / "report.json").read_text())
    diagnosis = report["diagnosis"]
    assert diagnosis["random_init"] == {
        k: report["monitor_initial"][k]
        for k in ("knn_ndcg@5", "effective_rank_vali", "effective_rank")
    }
    chosen = report["ssl_val"]["chosen_epoch"]
    assert diagnosis["pretrained_epoch"] == chosen
    at = report["history"][chosen - 1]["monitor"]
    assert diagnosis["pretrained"]["effective_rank_vali"] == at["effective_rank_vali"]
    assert 1.0 <= at["effective_rank_vali"] <= 8  # the tiny encoder is 8 wide
