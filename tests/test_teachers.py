"""Teachers (issue 30, item 3): every run that scores vali and test also keeps its scores on
every train item (``scores.npz`` ``train``, ``train_offsets``, ``train_qids``), so that a later
run can learn from a finished one on the unlabeled train QGs without loading its model."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import small_encoder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.data.evaluation import read_train_scores
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.ensembles.config import EnsembleConfig
from scarce_ltr.ensembles.score_fusion import NORMALIZERS, mix

DATA = [*tiny_data(), "logger=none", "scarcity.fraction=0.5"]
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=30", "gbdt.early_stopping_rounds=10"]
DEEP = ["epochs=2", "deep.lrs=[1e-3]", "deep.encoder.width=8", "deep.encoder.hidden=16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Finished tiny runs: pretraining, gbdt, finetuning, resnet, and an ensemble of two."""
    root = tmp_path_factory.mktemp("teachers") / "runs"
    torch.set_num_threads(1)
    out = {name: root / name for name in ("pretrain", "gbdt", "finetune", "resnet", "ens")}
    run(["pretrain", "simclr-rank", *DATA, *small_encoder(), "epochs=1",
         "monitor.enabled=false", f"run_dir={out['pretrain']}"])  # fmt: skip
    run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={out['gbdt']}"])
    run(["finetune", "full", *DATA, "epochs=2", "head_hidden=16",
         f"pretrained={out['pretrain']}", f"run_dir={out['finetune']}"])  # fmt: skip
    run(["baseline", "resnet", *DATA, *DEEP, f"run_dir={out['resnet']}"])
    run(["ensemble", *DATA, f"runs=[{out['finetune']},{out['gbdt']}]", f"run_dir={out['ens']}"])
    return out


@pytest.fixture(scope="module")
def prepared():
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]"])
    return prepare_data(cfg)


@pytest.mark.parametrize("name", ["gbdt", "finetune", "resnet", "ens"])
def test_runs_keep_their_scores_on_every_train_item(runs, prepared, name) -> None:
    stored = read_train_scores(runs[name] / "scores.npz")
    assert stored is not None, f"{name} kept no train scores"
    train, offsets, qids = stored
    np.testing.assert_array_equal(offsets, prepared.train.offsets)
    np.testing.assert_array_equal(qids, prepared.train.qids)
    assert len(train) == prepared.train.n_items and np.isfinite(train).all()
    # Unlabeled QGs are scored too (not left at 0): the teacher's reason to be.
    unlabeled = np.flatnonzero(~prepared.labels.train_labeled)
    assert len(unlabeled) > 0
    assert np.ptp(train[offsets[unlabeled[0]] : offsets[unlabeled[0] + 1]]) > 0


def test_an_ensemble_mixes_its_members_train_scores(runs, prepared) -> None:
    import json

    report = json.loads((runs["ens"] / "report.json").read_text())
    weights = [report["weights"][str(m)] for m in (runs["finetune"], runs["gbdt"])]
    normalize = NORMALIZERS[report["normalize"]]
    offsets = prepared.train.offsets
    members = [read_train_scores(runs[m] / "scores.npz")[0] for m in ("finetune", "gbdt")]
    expected = mix(np.stack([normalize(s, offsets) for s in members]), weights)
    np.testing.assert_allclose(read_train_scores(runs["ens"] / "scores.npz")[0], expected)


def test_old_scores_without_train_still_read(runs, tmp_path) -> None:
    """A member written before train scores were kept joins an ensemble, which then keeps none."""
    old = tmp_path / "old"
    shutil.copytree(runs["gbdt"], old)
    with np.load(runs["gbdt"] / "scores.npz") as stored:
        arrays = {k: stored[k] for k in stored.files if not k.startswith("train")}
    np.savez(old / "scores.npz", **arrays)
    assert read_train_scores(old / "scores.npz") is None
    ens = tmp_path / "ens"
    report = run(["ensemble", *DATA, f"runs=[{runs['finetune']},{old}]", f"run_dir={ens}"])
    assert report["metrics"]["test"]["ndcg@5"] > 0
    assert read_train_scores(ens / "scores.npz") is None
