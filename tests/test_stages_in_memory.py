"""The stages as functions (issue 63): pretraining and finetuning on in-memory splits, as a
notebook calls them, write no file and equal the commands' runs on the same data and draw."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_pretraining

from scarce_ltr import finetune, pretrain
from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.scarcity import apply_scarcity
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.pretrain.checkpoint import Encoder
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.serving.ranker import load_ranker

PRETRAIN = [*tiny_pretraining(), "epochs=2", "monitor.enabled=false", "seed=1"]
FINETUNE = [*tiny_pretraining()[:4], "logger=none", "epochs=2", "head_hidden=8", "seed=1"]
FRACTION = 0.2


def configs():
    pre, _ = load_config(
        PretrainConfig, PRETRAIN, stage_file=CONFIG_ROOT / "pretrain" / "simclr-rank.yaml"
    )
    fine, _ = load_config(
        FinetuneConfig,
        [*FINETUNE, "strategy=full", "pretrained=none"],
        stage_file=CONFIG_ROOT / "finetune" / "full.yaml",
    )
    return pre, fine


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*"))


@pytest.mark.cpu  # bit-equal to the runs' CPU weights and scores
def test_a_notebook_pretrains_and_finetunes_on_tensors_writing_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    pre_cfg, fine_cfg = configs()
    splits = load_dataset(pre_cfg.data)  # raw RankingSplits: a notebook's tensors
    labeled = apply_scarcity(
        splits["train"], splits["vali"], replace(fine_cfg.scarcity, fraction=FRACTION), seed=1
    ).train_labeled
    empty = {name: tmp_path / name for name in ("cwd", "runs", "cache", "tmp")}
    for folder in empty.values():
        folder.mkdir()
    monkeypatch.chdir(empty["cwd"])
    monkeypatch.setenv("LTR_RUNS_DIR", str(empty["runs"]))
    monkeypatch.setenv("LTR_CACHE_DIR", str(empty["cache"]))
    monkeypatch.setenv("TMPDIR", str(empty["tmp"]))
    data = {"train": splits["train"], "vali": splits["vali"]}  # no test: nothing scored on it

    encoder = pretrain.fit(pre_cfg, data)
    ranker = finetune.fit(fine_cfg, data, encoder, labeled)
    test = splits["test"]
    scores = ranker.predict(np.asarray(test.features), np.repeat(test.qids, test.group_sizes))

    assert all(files_under(folder) == [] for folder in empty.values())
    assert isinstance(encoder, Encoder) and encoder.folder is None
    assert ranker.labels["train_labeled_groups"] == int(labeled.sum())
    # the commands on the same data and draw: the same encoder and test scores, bit for bit
    monkeypatch.chdir(tmp_path)
    run(["pretrain", "simclr-rank", *PRETRAIN, f"run_dir={tmp_path / 'p'}"])
    stored = torch.load(tmp_path / "p" / "encoder.pt", weights_only=True)["state_dict"]
    assert stored.keys() == encoder.state.keys()
    assert all(torch.equal(stored[k], encoder.state[k]) for k in stored)
    run(["finetune", "full", *FINETUNE, f"pretrained={tmp_path / 'p'}",
         f"scarcity.fraction={FRACTION}", f"run_dir={tmp_path / 'f'}"])  # fmt: skip
    with np.load(tmp_path / "f" / "scores.npz") as saved:
        np.testing.assert_array_equal(scores, saved["test"])
    # saved, it is the bundle a run leaves: predict and load_ranker read it
    bundle = ranker.save(tmp_path / "saved")
    again = load_ranker(bundle).score_split(splits["test"])
    np.testing.assert_array_equal(again, scores)


def test_an_encoder_saved_and_loaded_finetunes_the_same(tmp_path: Path) -> None:
    pre_cfg, fine_cfg = configs()
    splits = load_dataset(pre_cfg.data)
    data = {"train": splits["train"], "vali": splits["vali"], "test": splits["test"]}
    encoder = pretrain.fit(pre_cfg, data)
    encoder.save(tmp_path / "enc")
    loaded = Encoder.load(tmp_path / "enc")
    assert loaded.folder == tmp_path / "enc"
    assert all(torch.equal(loaded.state[k], encoder.state[k]) for k in encoder.state)
    first = finetune.fit(fine_cfg, data, encoder).score_split(splits["test"])
    second = finetune.fit(fine_cfg, data, loaded).score_split(splits["test"])
    np.testing.assert_array_equal(first, second)
    assert os.listdir(tmp_path / "enc") == ["encoder.pt"]


def test_bad_in_memory_inputs_are_one_clear_error() -> None:
    pre_cfg, fine_cfg = configs()
    splits = load_dataset(pre_cfg.data)
    with pytest.raises(ValueError, match="data needs a vali split"):
        pretrain.fit(pre_cfg, {"train": splits["train"]})
    data = {"train": splits["train"], "vali": splits["vali"]}
    with pytest.raises(ValueError, match=r"bool mask over train's 30 QGs"):
        finetune.fit(fine_cfg, data, labeled=np.ones(3, dtype=bool))
    searched = replace(fine_cfg, search=replace(fine_cfg.search, n_trials=2))
    # refused with a run too: fit trains the lrs grid, never silently in place of the search
    for given in (None, object()):
        with pytest.raises(UserError, match="search.n_trials: a recipe search .* runs as the"):
            finetune.fit(searched, data, run=given)
