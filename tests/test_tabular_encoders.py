"""TabM and the numerical embeddings (issue 61): encoders of the field's own packages.

Each encoder: shapes, zeros at padding and invariance to it, seeded determinism, a saved state
that rebuilds the same encoder (piecewise bins included); TabM's members trained one by one and
scored by their mean; whole runs whose bundle and exports score as the run did.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from tiny import tiny_data

import scarce_ltr
from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.finetune.model import Ranker, head_on
from scarce_ltr.finetune.steps import member_rows
from scarce_ltr.losses import LOSSES
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder
from scarce_ltr.pretrain.num_embeddings import quantile_bins

pytest.importorskip("tabm", reason="the tabular extra is not installed")

CONFIGS = {
    "resnet-piecewise": dict(kind="resnet", num_embeddings="piecewise", n_bins=8),
    "resnet-periodic": dict(kind="resnet", num_embeddings="periodic", d_embedding=8),
    "mlp-piecewise": dict(kind="mlp", num_embeddings="piecewise", n_bins=8),
    "tabm": dict(kind="tabm", k=4),
    "tabm-mini-piecewise": dict(kind="tabm-mini", k=4, num_embeddings="piecewise", n_bins=8),
}
SMALL = dict(width=16, hidden=16, n_blocks=2)


def train_items(n: int = 400, d: int = 6) -> np.ndarray:
    """Gaussian features, one constant and one binary column (fewer distinct quantiles)."""
    x = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)
    x[:, 2] = 1.5
    x[:, 3] = x[:, 3] > 0
    return x


def fresh(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = EncoderConfig(**SMALL, **CONFIGS[name])
    return build_encoder(config, n_features=6, features=train_items())


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    features = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 2:] = False
    mask[2, 4:] = False
    return features, mask


@pytest.mark.parametrize("name", CONFIGS)
def test_shapes_padding_and_determinism(name) -> None:
    encoder = fresh(name).eval()
    features, mask = batch()
    out = encoder(features, mask)
    members = CONFIGS[name].get("k", 1)
    assert out.shape == (3, 5, 16 * members) and encoder.out_dim == 16 * members
    assert torch.all(out[~mask] == 0)
    # Whatever the padding holds, and however much of it, the real items' outputs stay.
    noisy = torch.where(mask.unsqueeze(-1), features, torch.full_like(features, 1e6))
    torch.testing.assert_close(encoder(noisy, mask)[mask], out[mask])
    longer = torch.cat([features, torch.zeros(3, 4, 6)], dim=1)
    wider = torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(encoder(longer, wider)[wider], out[mask])
    # The same seed builds the same encoder; another seed another one.
    torch.testing.assert_close(fresh(name).eval()(features, mask), out)
    assert not torch.allclose(fresh(name, seed=1).eval()(features, mask), out)


@pytest.mark.parametrize("name", CONFIGS)
def test_a_saved_state_rebuilds_the_encoder_without_the_data(name) -> None:
    encoder = fresh(name).eval()
    rebuilt = build_encoder(EncoderConfig(**SMALL, **CONFIGS[name]), n_features=6)
    rebuilt.load_state_dict(encoder.state_dict())
    features, mask = batch()
    torch.testing.assert_close(rebuilt.eval()(features, mask), encoder(features, mask))


def test_piecewise_embeddings_built_without_data_refuse_to_run() -> None:
    encoder = build_encoder(EncoderConfig(num_embeddings="piecewise"), n_features=6).eval()
    with pytest.raises(RuntimeError, match="without train features"):
        encoder(*batch())


def test_quantile_bins_give_every_feature_the_same_number_of_rising_edges() -> None:
    x = train_items()
    bins = quantile_bins(x, 8)
    assert len(bins) == 6 and all(len(b) == 9 and bool(torch.all(b.diff() > 0)) for b in bins)
    for column, edges in zip(x.T, bins, strict=True):
        assert edges[0] == column.min() and column.max() in edges
    # A constant column: its value, then padding edges past it; a binary one: 0, 1, padding.
    assert bins[2][0] == 1.5 and bins[3][:2].tolist() == [0.0, 1.0]


def test_keys_of_another_encoder_are_refused() -> None:
    with pytest.raises(ValueError, match="encoder.k is read by encoder.kind tabm"):
        EncoderConfig(kind="resnet", k=8)
    with pytest.raises(ValueError, match="encoder.n_bins is read with encoder.num_embeddings"):
        EncoderConfig(n_bins=16)
    with pytest.raises(ValueError, match="encoder.num_embeddings is read by"):
        EncoderConfig(kind="attention", num_embeddings="periodic")


def test_tabm_mini_with_one_member_is_the_packages_plain_mlp() -> None:
    """The package's TabM-mini is its plain MLP behind one scaling per member (its
    `MLPBackboneMiniEnsemble`): with k = 1 and that scaling at 1 the two are the same network."""
    import tabm

    encoder = build_encoder(EncoderConfig(kind="tabm-mini", k=1, **SMALL), n_features=6).eval()
    backbone = encoder.net.backbone
    torch.nn.init.ones_(backbone.affine.weight)
    plain = tabm.MLPBackbone(d_in=6, n_blocks=2, d_block=16, dropout=0.1).eval()
    plain.load_state_dict({k: v for k, v in backbone.state_dict().items() if "affine" not in k})
    x = torch.randn(10, 6)
    torch.testing.assert_close(encoder.encode_items(x), plain(x))


def test_each_member_has_its_own_head_and_the_score_is_their_mean() -> None:
    encoder = fresh("tabm")
    ranker = Ranker(encoder=encoder, head=head_on(encoder, "mlp", hidden=8, dropout=0.0)).eval()
    assert ranker.head.out.weight.shape == (4, 8, 1)  # one output layer per member
    features, mask = batch()
    members = ranker(features, mask, members=True)
    assert members.shape == (3, 5, 4) and ranker.embed(features, mask).shape == (3, 5, 32)
    torch.testing.assert_close(ranker(features, mask), members.mean(-1))
    assert not torch.allclose(members[..., 0], members[..., 1])


@pytest.mark.parametrize("loss", ["lambdarank", "softmax", "approx-ndcg"])
def test_the_members_loss_is_the_mean_of_their_own_losses(loss) -> None:
    scores = torch.randn(3, 5, 4)
    labels = torch.randint(0, 3, (3, 5)).float()
    _, mask = batch()
    loss_fn = LOSSES[loss]
    rows, tiled, tiled_mask, _ = member_rows(scores, labels, mask, torch.arange(3))
    each = [loss_fn(scores[..., i], labels, mask=mask) for i in range(4)]
    torch.testing.assert_close(loss_fn(rows, tiled, mask=tiled_mask), torch.stack(each).mean())


def test_a_missing_extra_is_one_line_naming_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tabm", None)
    with pytest.raises(UserError, match=r'needs tabm, .*pip install "scarce-ltr\[tabular\]"'):
        build_encoder(EncoderConfig(kind="tabm"), n_features=6)


DATA = [*tiny_data(), "logger=none"]
TABM = ["encoder.kind=tabm", "encoder.k=4", "encoder.width=16", "encoder.n_blocks=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tabular")
    torch.set_num_threads(1)
    out = {name: root / name for name in ("scratch", "pretrain", "full", "resnet")}
    run(["finetune", "full", *DATA, "epochs=2", "head_hidden=8", "pretrained=none", *TABM,
         "encoder.num_embeddings=piecewise", "encoder.n_bins=8",
         f"run_dir={out['scratch']}"])  # fmt: skip
    run(["pretrain", "simclr-rank", *DATA, *TABM, "encoder.num_embeddings=periodic", "epochs=1",
         "monitor.enabled=false", f"run_dir={out['pretrain']}"])  # fmt: skip
    run(["finetune", "full", *DATA, "epochs=2", "head_hidden=8", f"pretrained={out['pretrain']}",
         f"run_dir={out['full']}"])  # fmt: skip
    run(["baseline", "resnet", *DATA, "deep.lrs=[5e-3]", "epochs=2", "deep.encoder.width=8",
         "deep.encoder.num_embeddings=piecewise", f"run_dir={out['resnet']}"])  # fmt: skip
    return out


def _raw_test():
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.stage_config import CommonConfig

    cfg, _ = load_config(CommonConfig, DATA)
    return load_dataset(cfg.data)["test"]


@pytest.mark.parametrize("kind", ["scratch", "full", "resnet"])
def test_a_bundle_scores_the_test_split_as_the_run_did(runs, kind) -> None:
    ranker = scarce_ltr.load_ranker(runs[kind])
    with np.load(runs[kind] / "scores.npz") as saved:
        np.testing.assert_array_equal(ranker.score_split(_raw_test()), saved["test"])


@pytest.mark.parametrize(("kind", "fmt"), [("scratch", "onnx"), ("scratch", "torchscript"),
                                           ("resnet", "onnx")])  # fmt: skip
def test_an_export_scores_as_the_bundle(runs, kind, fmt, tmp_path) -> None:
    from scarce_ltr.serving.export import score_exported

    out = tmp_path / f"model.{fmt}"
    run(["export", str(runs[kind]), f"format={fmt}", f"out={out}"])
    ranker = scarce_ltr.load_ranker(runs[kind])
    features = np.asarray(_raw_test().features)
    for group in (features[:1], features[:7], features[np.resize(np.arange(len(features)), 50)]):
        expected = ranker.predict(group)
        scale = max(1.0, float(np.max(np.abs(expected))))
        assert np.max(np.abs(score_exported(fmt, out, group) - expected)) / scale <= 1e-5


def test_a_pretrained_tabm_is_refused_new_encoder_keys(runs) -> None:
    with pytest.raises(UserError, match="encoder.\\* keys were set"):
        run(["finetune", "full", *DATA, f"pretrained={runs['pretrain']}", "encoder.kind=tabm",
             "encoder.k=8"])  # fmt: skip
