"""The deep baselines are finetuned rankers under one config (issue 63): the ``deep:`` section is
finetuning's recipe (`finetune.recipe.RankerRecipe`, declared and checked once), and
``./run.sh baseline resnet`` is ``./run.sh finetune full pretrained=none`` with that recipe
(`baselines.deep.train.finetuning`), the same scores bit for bit. The section keeps every
default a finished run's ``config.yaml`` holds, under finetuning's names where it took them
(``deep.full_epochs``, ``deep.optimizer.weight_decay``: `core.run_config.KEY_ALIASES`), so such
a run still resumes or is skipped (tests/test_key_aliases.py: the old spelling end to end)."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
from omegaconf import OmegaConf
from tiny import tiny_data

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.deep.config import RESNET, DeepBaselineOptions
from scarce_ltr.baselines.deep.train import finetuning
from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT, load_config, merge_config
from scarce_ltr.core.config_doc import describe
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import changed_settings, read_config
from scarce_ltr.data.stage_config import TrainingKeys
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.recipe import RankerRecipe

# The recipe's own keys (the training keys have their own test, test_help_config.py).
RECIPE = [
    f.name for f in fields(RankerRecipe) if f.name not in {t.name for t in fields(TrainingKeys)}
]
NETWORK = ("encoder", "head", "head_hidden", "head_dropout")  # resnet's alone in deep.*
# The deep section's keys and defaults before it became the recipe: what every baseline run's
# config.yaml holds (a gbdt run's too), compared when a finished run is resumed or skipped;
# max_epochs and weight_decay are deep.full_epochs and deep.optimizer.weight_decay now.
SAVED_DEEP = {
    "amp": True, "attention_layers": 3, "cpu_amp": False, "cross_layers": [2, 3, 4],
    "device": "auto", "dropout": 0.1, "embedding_dim": 8, "eval_item_budget": 20000,
    "head": "mlp", "head_dropout": 0.0, "head_hidden": 128, "hidden": 128, "item_budget": 1000,
    "lrs": [0.01, 0.001, 0.0001], "max_categories": 3, "max_epochs": 300, "max_list_len": None,
    "n_heads": 4, "n_layers": 2, "noise_std": 0.0, "patience": 30, "vali_every": 1,
    "weight_decay": 0.0,
}  # fmt: skip
DATA = [*tiny_data(), "logger=none", "seed=1"]
# resnet's keys and the same run's as finetuning's scratch+full: one phase, no head-only epochs
NET = ["encoder.width=8", "encoder.hidden=16", "encoder.n_blocks=1", "head_hidden=8"]
RESNET_KEYS = ["deep.full_epochs=3", "deep.lrs=[0.01,0.001]", *(f"deep.{k}" for k in NET)]
SCRATCH_FULL = [
    "pretrained=none", "head_epochs=0", "full_epochs=3", "lrs=[0.01,0.001]", "optimizer.lr=0.01",
    "patience=30", *NET,
]  # fmt: skip


def _baseline(method: str, *keys: str) -> BaselineConfig:
    stage_file = CONFIG_ROOT / "baseline" / f"{method}.yaml"
    return load_config(BaselineConfig, [f"method={method}", *keys], stage_file=stage_file)[0]


def _scratch_full(*keys: str) -> FinetuneConfig:
    stage_file = CONFIG_ROOT / "finetune" / "full.yaml"
    return load_config(FinetuneConfig, ["strategy=full", *keys], stage_file=stage_file)[0]


def test_the_recipe_is_declared_once_for_finetuning_and_the_deep_baselines() -> None:
    """Each recipe key: one declaration (finetune/recipe.py) with one help line, the same in
    finetuning and under deep.; the deep section redeclares its network only to mark it
    resnet's (the recipe's default kept) and lrs for its default."""
    recipe = {d.key: d for d in describe(RankerRecipe)}
    finetune = {d.key: d for d in describe(FinetuneConfig)}
    deep = {d.key: d for d in describe(DeepBaselineOptions)}
    for key, doc in recipe.items():
        if key.split(".")[0] not in RECIPE:
            continue
        assert finetune[key] == doc, key
        if key.split(".")[0] != "lrs":
            assert deep[key] == doc, f"deep.{key}"
    assert not set(RECIPE) & set(vars(FinetuneConfig)["__annotations__"])
    own = set(vars(DeepBaselineOptions)["__annotations__"]) & set(RECIPE)
    assert own == {*NETWORK, "lrs"}
    declared = {f.name: f for f in fields(DeepBaselineOptions)}
    for key in NETWORK:
        assert dict(declared[key].metadata) == RESNET, key
        assert getattr(DeepBaselineOptions(), key) == getattr(RankerRecipe(), key), key
    assert DeepBaselineOptions().lrs == [1e-2, 1e-3, 1e-4] and RankerRecipe().lrs == []


def test_the_deep_section_keeps_the_keys_and_defaults_finished_runs_saved(tmp_path) -> None:
    """The section as runs before the recipe saved it (old names, no encoder, loss, search nor
    optimizer section) is today's config: no key differs (a changed or missing one would be
    refused on resume, stale in a sweep) and it reads back under the new names, for a deep
    baseline's run and a tree's alike."""
    for method in ("gbdt", "resnet"):
        keys, stage_file = [f"method={method}"], CONFIG_ROOT / "baseline" / f"{method}.yaml"
        cfg, resolved = load_config(BaselineConfig, keys, stage_file=stage_file)
        defaults = merge_config(BaselineConfig, keys, stage_file=stage_file, defaults_only=True)
        saved = OmegaConf.create(OmegaConf.to_container(resolved) | {"deep": SAVED_DEEP})
        assert changed_settings(saved, resolved, defaults=defaults) == [], method
        (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
        read = read_config(tmp_path, BaselineConfig).deep
        assert (read.full_epochs, read.optimizer) == (cfg.deep.full_epochs, cfg.deep.optimizer)
        assert (cfg.deep.full_epochs, cfg.deep.optimizer.weight_decay) == (300, 0.0)
        assert {"encoder", "loss", "search"} <= {f.name for f in fields(cfg.deep)}


def test_the_deep_sections_own_keys_are_finetunings_names() -> None:
    """``deep.full_epochs`` and ``deep.optimizer.*`` are keys of finetuning's config too, with
    the optimizer's types and help lines (its defaults the baselines' own where they differ:
    lr, refused under deep., since deep.lrs sets it): one spelling for one setting."""
    finetune = {d.key: d for d in describe(FinetuneConfig)}
    deep = {d.key: d for d in describe(DeepBaselineOptions)}
    optimizer = [key for key in deep if key.startswith("optimizer.")]
    assert deep["full_epochs"].type == finetune["full_epochs"].type == "int"
    assert len(optimizer) == 5
    for key in optimizer:
        assert (deep[key].type, deep[key].doc) == (finetune[key].type, finetune[key].doc), key


@pytest.mark.parametrize(
    ("stage", "keys", "message"),
    [
        (
            "finetune",
            ["lrs=[0.1,0.1]"],
            r": lrs must list distinct positive learning rates",
        ),
        ("baseline", ["deep.lrs=[0.1,0.1]"], r": deep\.lrs must list distinct"),
        (
            "finetune",
            ["head=deep"],
            r": head must be one of linear, mlp, got 'deep'",
        ),
        (
            "baseline",
            ["deep.head=deep"],
            r": deep\.head must be one of linear, mlp, got 'deep'",
        ),
        ("baseline", ["deep.head_dropout=1"], r"deep\.head_dropout in \[0, 1\)"),
        (
            "baseline",
            ["deep.search.n_trials=-1"],
            r": deep\.search\.n_trials must be >= 0",
        ),
    ],
)
def test_the_recipe_checks_name_the_key_where_it_sits(
    stage: str, keys: list[str], message: str
) -> None:
    compose = (
        (lambda: _scratch_full("pretrained=none", *keys))
        if stage == "finetune"
        else (lambda: _baseline("resnet", *keys))
    )
    with pytest.raises(UserError, match=message):
        compose()


def test_a_deep_baseline_trains_as_finetunings_scratch_full_run() -> None:
    """`finetuning` is the config ``./run.sh finetune full`` composes from the same recipe:
    pretrained=none, head_epochs=0, full_epochs=deep.full_epochs, Adam at a constant rate; the
    network keys travel as they are (resnet's ranker is that run's)."""
    cfg = _baseline("resnet", *DATA, *RESNET_KEYS, "deep.optimizer.weight_decay=0.001")
    composed = _scratch_full(*DATA, *SCRATCH_FULL, "optimizer.weight_decay=0.001")
    # the search's ranges are each preset's (resnet.yaml's full_epochs reach 300), unread here
    assert replace(finetuning(cfg), search=composed.search) == composed
    adamw = _baseline("resnet", "deep.optimizer.name=adamw", "deep.optimizer.schedule=cosine")
    assert finetuning(adamw).optimizer == replace(
        composed.optimizer, lr=1e-2, weight_decay=0.0, name="adamw", schedule="cosine"
    )  # finetuning's optimizer keys under deep. are read as finetuning reads them
    capped = finetuning(replace(cfg, epochs=2))
    assert [(p.name, p.epochs, p.train_encoder) for p in capped.phases()] == [("full", 2, True)]
    dasalc = finetuning(_baseline("dasalc", *DATA))
    assert (dasalc.loss.name, dasalc.noise_std, dasalc.lrs) == ("softmax", 1.5, [1e-3, 1e-4])


def test_resnet_is_scratch_full_bit_for_bit(tmp_path) -> None:
    """``./run.sh baseline resnet`` and ``./run.sh finetune full pretrained=none`` with its
    recipe score vali, test and train the same, bit for bit (the baseline's folder, model name
    and report stay its own)."""
    baseline, scratch = tmp_path / "resnet", tmp_path / "scratch"
    run(["baseline", "resnet", *DATA, *RESNET_KEYS, f"run_dir={baseline}"])
    run(["finetune", "full", *DATA, *SCRATCH_FULL, f"run_dir={scratch}"])
    ours, theirs = np.load(baseline / "scores.npz"), np.load(scratch / "scores.npz")
    assert set(ours.files) == set(theirs.files)
    for key in ours.files:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
