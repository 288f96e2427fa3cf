"""``./run.sh pretrain <method>`` end to end on tiny data: outputs, skip when DONE, exact resume
after a crash, and one clear error for every bad checkpoint or encoder file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny import tiny_pretraining

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data import batching
from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.pretrain.checkpoint import load_pretrained_encoder
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.monitor import effective_rank
from scarce_ltr.pretrain.objectives import OBJECTIVES
from scarce_ltr.pretrain.pretraining_set import check_pretraining_set, pretraining_split
from scarce_ltr.pretrain.train import CHECKPOINT, CRASH_ENV, SimulatedCrash

METHODS = tuple(OBJECTIVES)
TINY = tiny_pretraining()


def _pretrain(method: str, run_dir, *extra: str) -> dict:
    return run(["pretrain", method, *TINY, f"run_dir={run_dir}", *extra])


@pytest.mark.parametrize("method", METHODS)
def test_every_method_end_to_end(method, tmp_path):
    report = _pretrain(method, tmp_path, "epochs=1", "item_budget=200")
    for name in ("encoder.pt", "report.json", "config.yaml", "DONE"):
        assert (tmp_path / name).is_file(), name
    assert not (tmp_path / "checkpoint.pt").exists()  # a resume's only: removed once finished
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk["method"] == method and on_disk["epochs"] == 1
    assert len(on_disk["loss_curve"]) == 1 and np.isfinite(on_disk["loss_curve"][0])
    monitor = on_disk["history"][-1]["monitor"]
    assert {"alignment", "uniformity", "effective_rank", "knn_ndcg@5"} <= set(monitor)
    assert report["parameters"]["encoder"] > 0 and on_disk["git"] is not None
    encoder, info = load_pretrained_encoder(tmp_path)
    assert info["method"] == method and info["n_features"] == 12
    features, mask = torch.randn(2, 3, 12), torch.ones(2, 3, dtype=torch.bool)
    assert encoder(features, mask).shape == (2, 3, 8)


def test_a_finished_run_is_skipped(tmp_path, capsys):
    first = _pretrain("simsiam", tmp_path, "epochs=1")
    again = _pretrain("simsiam", tmp_path, "epochs=1")
    assert "skipped" in capsys.readouterr().err
    assert again["seconds"] == first["seconds"]


def _state(run_dir) -> dict:
    return torch.load(run_dir / "encoder.pt", weights_only=True)["state_dict"]


@pytest.mark.parametrize(
    ("method", "batching"),
    [("simclr-rank", "length_buckets=false"), ("simsiam", "length_buckets=false"),
     ("simclr-rank", "length_buckets=true")],
)  # fmt: skip
def test_resume_after_a_crash_gives_the_same_weights(method, batching, tmp_path, monkeypatch):
    args = ("epochs=3", "item_budget=150", "encoder.dropout=0.2", batching)
    straight_report = _pretrain(method, tmp_path / "straight", *args)
    steps = straight_report["history"][0]["steps"]
    monkeypatch.setenv(CRASH_ENV, str(steps + 2))  # in the middle of epoch 2
    with pytest.raises(SimulatedCrash):
        _pretrain(method, tmp_path / "crashed", *args)
    assert not (tmp_path / "crashed" / "DONE").exists()
    assert torch.load(tmp_path / "crashed" / CHECKPOINT, weights_only=True)["epoch"] >= 1
    monkeypatch.delenv(CRASH_ENV)
    resumed = _pretrain(method, tmp_path / "crashed", *args)
    straight, again = _state(tmp_path / "straight"), _state(tmp_path / "crashed")
    assert straight.keys() == again.keys()
    for key in straight:
        assert torch.equal(straight[key], again[key]), key
    assert resumed["epochs"] == 3 and len(resumed["loss_curve"]) == 3


def test_batches_gathered_on_the_device_train_the_same_weights(tmp_path, monkeypatch):
    """``gather_on_device`` (null: on CUDA) changes where batches are padded, not what they are."""
    args = ("epochs=2", "item_budget=150", "length_buckets=true", "monitor.enabled=false")
    _pretrain("simclr-rank", tmp_path / "host", *args)
    gathered = []
    gather = batching._gather
    monkeypatch.setattr(batching, "_gather", lambda *a: gathered.append(1) or gather(*a))
    _pretrain("simclr-rank", tmp_path / "device", *args, "gather_on_device=true")
    assert gathered
    host, device = _state(tmp_path / "host"), _state(tmp_path / "device")
    for key in host:
        assert torch.equal(host[key], device[key]), key


def test_bad_checkpoints_are_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(CRASH_ENV, "2")  # one batch per epoch: a crash in epoch 2
    with pytest.raises(SimulatedCrash):
        _pretrain("simclr-rank", tmp_path, "epochs=3", "item_budget=2000")
    monkeypatch.delenv(CRASH_ENV)
    # The command line refuses a folder holding a run with other settings ...
    with pytest.raises(UserError, match=r"other settings \(.*method"):
        _pretrain("simsiam", tmp_path, "epochs=3", "item_budget=2000")
    # ... and the checkpoint itself says what it holds when config.yaml is gone.
    (tmp_path / "config.yaml").unlink()
    with pytest.raises(UserError, match="method is simclr-rank"):
        _pretrain("simsiam", tmp_path, "epochs=3", "item_budget=2000")
    (tmp_path / "config.yaml").unlink()
    with pytest.raises(UserError, match="feature count"):
        _pretrain("simclr-rank", tmp_path, "epochs=3", "data.synthetic.n_features=13")
    (tmp_path / "config.yaml").unlink()
    (tmp_path / CHECKPOINT).write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="not a readable"):
        _pretrain("simclr-rank", tmp_path, "epochs=3")


def test_load_pretrained_encoder_errors(tmp_path):
    with pytest.raises(UserError, match="no such"):
        load_pretrained_encoder(tmp_path / "missing")
    with pytest.raises(UserError, match="no encoder.pt"):
        load_pretrained_encoder(tmp_path)
    (tmp_path / "encoder.pt").write_bytes(b"\x00garbage")
    with pytest.raises(UserError, match="not a readable"):
        load_pretrained_encoder(tmp_path)
    torch.save({"method": "x"}, tmp_path / "encoder.pt")
    with pytest.raises(UserError, match="missing"):
        load_pretrained_encoder(tmp_path)


def test_too_small_pretraining_sets_are_refused():
    tiny = RankingSplit(
        np.zeros((1, 3), np.float32), np.zeros(1, np.float32), np.array([0, 1]), np.array([5])
    )
    batcher = QueryGroupBatcher(tiny, item_budget=10)
    with pytest.raises(UserError, match="too small"):
        check_pretraining_set(tiny, batcher, method="simsiam", needs_groups=False, world_size=1)
    singles = RankingSplit(
        np.zeros((3, 3), np.float32), np.zeros(3, np.float32), np.arange(4), np.arange(3)
    )
    sharded = QueryGroupBatcher(singles, item_budget=3, rank=0, world_size=2)
    with pytest.raises(UserError, match="DDP ranks"):
        check_pretraining_set(singles, sharded, method="simsiam", needs_groups=False, world_size=2)
    whole = QueryGroupBatcher(singles, item_budget=3)
    with pytest.raises(UserError, match="single item"):
        check_pretraining_set(singles, whole, method="simclr-rank", needs_groups=True, world_size=1)


def test_effective_rank_sees_a_collapse():
    gen = np.random.default_rng(0)
    spread = gen.normal(size=(500, 16))
    collapsed = gen.normal(size=(500, 1)) @ gen.normal(size=(1, 16))
    assert effective_rank(spread) > 12
    assert effective_rank(collapsed) == pytest.approx(1.0, abs=0.01)


def test_pool_fraction_pretrains_on_a_seeded_share_of_the_train_qgs(tmp_path) -> None:
    """``pool_fraction``: how much of the unlabeled pool pretraining needs. Half of tiny's 30
    train QGs, the same ones for the same seed, others for another, nested across pool
    fractions (a smaller pool is part of a larger one); 1 reads every QG."""
    cfg, _ = load_config(PretrainConfig, TINY)
    prepared = prepare_data(cfg)
    qids = {
        seed: pretraining_split(prepared, include_vali=False, pool_fraction=0.5, seed=seed).qids
        for seed in (0, 0, 1)
    }
    whole = pretraining_split(prepared, include_vali=False, pool_fraction=1.0, seed=0)
    assert len(qids[0]) == 15 and set(qids[0]) <= set(whole.qids) and len(whole.qids) == 30
    assert list(qids[0]) == sorted(qids[0], key=list(whole.qids).index)  # in the train order
    again = pretraining_split(prepared, include_vali=False, pool_fraction=0.5, seed=0)
    assert np.array_equal(again.qids, qids[0]) and not np.array_equal(qids[1], qids[0])
    tiny_pool = pretraining_split(prepared, include_vali=False, pool_fraction=0.01, seed=0)
    assert tiny_pool.n_groups == 1 and set(tiny_pool.qids) <= set(qids[0])
    report = _pretrain("simsiam", tmp_path / "half", "epochs=1", "pool_fraction=0.5")
    assert report["pretraining_set"]["groups"] == 15
    with pytest.raises(UserError, match=r"pool_fraction must be in \(0, 1\]"):
        _pretrain("simsiam", tmp_path / "none", "pool_fraction=0")
    assert not (tmp_path / "none").exists()
