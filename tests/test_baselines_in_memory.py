"""The baselines as a function (issue 63): ``baselines.fit(cfg, splits, labeled=mask)`` on
in-memory splits writes no file and gives the model of ``./run.sh baseline <name>`` on the same
data and draw: the same vali and test scores, bit for bit, and the same scores from its saved
bundle."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tiny import tiny_data, tiny_pretraining

from scarce_ltr import baselines
from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.scarcity import apply_scarcity
from scarce_ltr.finetune.fitted import FinetunedRanker
from scarce_ltr.pretrain.checkpoint import Encoder
from scarce_ltr.serving.ranker import load_ranker
from scarce_ltr.trees.fitted import FittedTrees

DATA = [*tiny_data(), "logger=none", "seed=2"]
FRACTION = 0.5
LIGHTGBM = ["gbdt.num_threads=1", "gbdt.max_rounds=20", "gbdt.early_stopping_rounds=5"]
KEYS = {
    "gbdt": LIGHTGBM,  # the paper grid
    "gbdt-optuna": [*LIGHTGBM, "gbdt.n_trials=3"],
    "gbdt-pca": [*LIGHTGBM, "gbdt.pca_components=[2,3]"],
    "gbdt-pseudo": LIGHTGBM,  # its own GBDT pseudo-labels the unlabeled QGs
    "catboost": ["catboost.num_threads=1", "catboost.max_rounds=15",
                 "catboost.early_stopping_rounds=5", "catboost.n_trials=2"],
    "xgboost": ["xgboost.num_threads=1", "xgboost.max_rounds=15",
                "xgboost.early_stopping_rounds=5", "xgboost.n_trials=2"],
    "resnet": ["deep.max_epochs=2", "deep.lrs=[0.01,0.001]", "deep.encoder.width=8",
               "deep.encoder.hidden=16", "deep.encoder.n_blocks=1", "deep.head_hidden=8"],
}  # fmt: skip
BACKENDS = {"catboost": "catboost", "xgboost": "xgboost"}  # method -> the package it needs


def config(name: str, *keys: str) -> BaselineConfig:
    """The config of ``./run.sh baseline <name> DATA <keys>``."""
    cfg, _ = load_config(
        BaselineConfig,
        [f"method={name}", *DATA, *keys],
        stage_file=CONFIG_ROOT / "baseline" / f"{name}.yaml",
    )
    return cfg


def drawn(cfg: BaselineConfig, splits: dict[str, RankingSplit]) -> np.ndarray:
    """The labeled train QGs the command draws at FRACTION: the user's mask here."""
    scarcity = replace(cfg.scarcity, fraction=FRACTION)
    return apply_scarcity(splits["train"], splits["vali"], scarcity, seed=cfg.seed).train_labeled


def empty_places(tmp_path: Path, monkeypatch) -> list[Path]:
    """The working directory, runs root, cache and temporary folder, empty; a fit must leave
    them so."""
    places = [tmp_path / name for name in ("cwd", "runs", "cache", "tmp")]
    for folder in places:
        folder.mkdir()
    monkeypatch.chdir(places[0])
    monkeypatch.setenv("LTR_RUNS_DIR", str(places[1]))
    monkeypatch.setenv("LTR_CACHE_DIR", str(places[2]))
    monkeypatch.setenv("TMPDIR", str(places[3]))
    return places


def check_equals_the_command(
    tmp_path: Path,
    monkeypatch,
    name: str,
    keys: list[str],
    *,
    with_test: bool = True,
    command_keys: tuple[str, ...] = (),
    encoder: Encoder | None = None,
) -> FittedTrees | FinetunedRanker:
    """Fit ``name`` with ``keys`` (and gbdt-ssl's ``encoder``) in memory (no file written), then
    run the command on the same data and draw (``command_keys`` added): the same vali and test
    scores, bit for bit; saved, the bundle scores the same."""
    cfg = config(name, *keys)
    splits = load_dataset(cfg.data)
    labeled = drawn(cfg, splits)
    data = {s: splits[s] for s in ("train", "vali", "test")[: 3 if with_test else 2]}
    places = empty_places(tmp_path, monkeypatch)

    ranker = baselines.fit(cfg, data, labeled=labeled, encoder=encoder)

    assert all(sorted(folder.rglob("*")) == [] for folder in places), name
    kind = FinetunedRanker if name == "resnet" else FittedTrees
    assert isinstance(ranker, kind)
    assert ranker.labels["train_labeled_groups"] == int(labeled.sum())
    test = splits["test"]
    scores = ranker.score_split(test)
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "command"
    run(["baseline", name, *DATA, *keys, *command_keys, f"scarcity.fraction={FRACTION}",
         f"run_dir={folder}"])  # fmt: skip
    with np.load(folder / "scores.npz") as saved:
        np.testing.assert_array_equal(scores, saved["test"])
        np.testing.assert_array_equal(ranker.score_split(splits["vali"]), saved["vali"])
    # items in any order with their qids: the same scores, in their order
    order = np.random.default_rng(0).permutation(test.n_items)
    item_qids = np.repeat(test.qids, test.group_sizes)
    np.testing.assert_array_equal(
        ranker.predict(np.asarray(test.features)[order], item_qids[order]), scores[order]
    )
    bundle = ranker.save(tmp_path / "saved")
    np.testing.assert_array_equal(load_ranker(bundle).score_split(test), scores)
    return ranker


@pytest.mark.cpu  # bit-equal to the command's CPU scores
@pytest.mark.parametrize("name", list(KEYS))
def test_a_baseline_fit_in_memory_equals_its_command(tmp_path: Path, monkeypatch, name) -> None:
    if name in BACKENDS and importlib.util.find_spec(BACKENDS[name]) is None:
        pytest.skip(f"{BACKENDS[name]} is not installed (pip install '.[{BACKENDS[name]}]')")
    ranker = check_equals_the_command(
        tmp_path, monkeypatch, name, KEYS[name], with_test=name != "gbdt"
    )
    if name == "gbdt-pca":  # the booster reads PCA columns, made for each split scored
        assert ranker.selected["pca_components"] in (2, 3)


@pytest.mark.cpu
@pytest.mark.parametrize("source", ["folder", "memory"])
def test_gbdt_ssl_fits_in_memory_on_its_encoders_run(tmp_path: Path, monkeypatch, source) -> None:
    """The encoder comes from the pretraining run ``pretrained=`` names (``folder``) or as an
    `Encoder` in memory (``memory``: the same weights, no folder, no file written for it); its
    embeddings of a new split (vali and test, scored through the ranker) are the command's on
    that run. The fit reads and writes no embedding cache there (``embedding.cache`` left on;
    the command's off)."""
    pretrained = tmp_path / "pre"
    run(["pretrain", "simclr-rank", *tiny_pretraining(), "epochs=1", "monitor.enabled=false",
         f"run_dir={pretrained}"])  # fmt: skip
    named = f"pretrained={pretrained}"
    in_memory = source == "memory"
    encoder = replace(Encoder.load(pretrained), folder=None) if in_memory else None
    ranker = check_equals_the_command(
        tmp_path, monkeypatch, "gbdt-ssl", LIGHTGBM if in_memory else [*LIGHTGBM, named],
        command_keys=("embedding.cache=false", *([named] if in_memory else [])), encoder=encoder,
    )  # fmt: skip
    assert ranker.selected["embedding"] != "none"  # the booster reads embedding columns
    assert not (pretrained / "embeddings.npz").exists()


def test_only_gbdt_ssl_takes_an_encoder_in_memory(tmp_path: Path) -> None:
    pretrained = tmp_path / "pre"
    run(["pretrain", "simclr-rank", *tiny_pretraining(), "epochs=1", "monitor.enabled=false",
         f"run_dir={pretrained}"])  # fmt: skip
    cfg = config("gbdt", *LIGHTGBM)
    splits = load_dataset(cfg.data)
    data = {"train": splits["train"], "vali": splits["vali"]}
    with pytest.raises(ValueError, match="encoder: only gbdt-ssl embeds with an encoder, not gbdt"):
        baselines.fit(cfg, data, encoder=Encoder.load(pretrained))


def test_bad_in_memory_inputs_are_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    cfg = config("gbdt", *LIGHTGBM)
    splits = load_dataset(cfg.data)
    data = {"train": splits["train"], "vali": splits["vali"]}
    with pytest.raises(ValueError, match="data needs a vali split"):
        baselines.fit(cfg, {"train": splits["train"]})
    with pytest.raises(ValueError, match=r"bool mask over train's 30 QGs"):
        baselines.fit(cfg, data, labeled=np.ones(3, dtype=bool))
    storage = f"gbdt.storage=sqlite:///{tmp_path / 's.db'}"
    stored = config("gbdt-optuna", *KEYS["gbdt-optuna"], storage)
    with pytest.raises(UserError, match=r"gbdt.storage: .* give gbdt.study_name=<name>, or run="):
        baselines.fit(stored, data)
    searched = config("resnet", *KEYS["resnet"], "deep.search.n_trials=2")
    with pytest.raises(UserError, match="deep.search.n_trials: a search keeps its trials"):
        baselines.fit(searched, data)
    holes = np.array(splits["vali"].features, copy=True)
    holes[3, 1] = np.nan
    nan_data = {"train": splits["train"], "vali": splits["vali"].with_features(holes)}
    with pytest.raises(ValueError, match=r"vali has a missing value \(NaN\) at item 3, feature 1; "
                       r"gbdt-pca needs every value \(fill them in, or use a tree that splits on "
                       r"NaN: gbdt, gbdt-optuna, gbdt-pseudo, catboost, xgboost\)$"):  # fmt: skip
        baselines.fit(config("gbdt-pca", *LIGHTGBM, "gbdt.pca_components=[2]"), nan_data)
    assert not (tmp_path / "s.db").exists()


def test_a_stored_study_of_an_in_memory_fit_is_named_by_study_name(tmp_path: Path) -> None:
    """The storage is the one file a fit without ``run=`` writes, when asked; fitting again
    under the same name rebuilds the study (as a run's rerun does), never doubles it."""
    import optuna

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    cfg = config("gbdt-optuna", *KEYS["gbdt-optuna"], f"gbdt.storage={url}", "gbdt.study_name=nb")
    splits = load_dataset(cfg.data)
    data = {"train": splits["train"], "vali": splits["vali"]}
    first = baselines.fit(cfg, data).selected
    again = baselines.fit(cfg, data).selected
    assert first == again | {"seconds": first["seconds"]}
    study = optuna.load_study(study_name="nb", storage=url)
    assert len(study.trials) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["studies.db"]
