"""Pretraining objectives' options: what each method's run stores, and which keys it reads.

A run's folder keeps its resolved config (``config.yaml``), which a resume and a finetuning run
compare and read: the settings each method's config file and a sweep's variant give must stay the
same from one version to the next, whatever module declares them.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from scarce_ltr.core.config import CONFIG_ROOT, available, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.pretrain.config import PretrainConfig

AUGMENT = {
    "zero_p": 0.0,
    "noise_scale": 0.0,
    "corrupt_p": 0.6,
    "mixup": 0.9,
    "subsets": 4,
    "overlap": 0.75,
    "replace_p": 0.0,
    "replace_source": "global",
    "binary_p": 0.0,
}
VIEWS = {"zero_p": 0.0, "noise_scale": 1.0}
# Each method's config file on top of PretrainConfig's defaults: (temperature, augment, items).
STORED = {
    "simclr-rank": (0.1, VIEWS, 1024),
    "simclr-sample": (0.1, VIEWS, 1024),
    "simclr": (0.1, VIEWS, 256),
    "simsiam": (0.1, {"zero_p": 0.1, "noise_scale": 0.0}, 1024),
    "scarf": (1.0, {"corrupt_p": 0.6}, 256),
    "dacl": (0.1, {"mixup": 0.6, "noise_scale": 0.0}, 256),
    "vime": (0.1, {"corrupt_p": 0.3}, 1024),
    "subtab": (0.1, {"subsets": 4, "overlap": 0.75, "corrupt_p": 0.3}, 1024),
    "rank-pretext": (0.1, {}, 1024),
    "qg-bins": (0.1, {"replace_p": 0.3}, 1024),
    "simclr-pretext": (0.1, VIEWS, 256),
}
PRETEXT = {"n_tasks": 32, "n_active": 3, "single_features": True, "n_bins": 4}


def _load(method: str, overrides: list[str] = ()):  # type: ignore[assignment]
    stage_file = CONFIG_ROOT / "pretrain" / f"{method}.yaml"
    return load_config(PretrainConfig, list(overrides), stage_file=stage_file)


@pytest.mark.parametrize("method", sorted(STORED))
def test_each_methods_stored_settings_and_identity_stay(method):
    assert set(STORED) == set(available("pretrain"))
    cfg, resolved = _load(method)
    stored = OmegaConf.to_container(resolved)
    temperature, augment, items = STORED[method]
    assert {k: stored[k] for k in ("method", "variant", "temperature", "vime_alpha")} == {
        "method": method,
        "variant": "",
        "temperature": temperature,
        "vime_alpha": 2.0,
    }
    assert stored["augment"] == AUGMENT | augment
    assert stored["heads"] == {"projector_dim": None, "predictor_hidden": None}
    assert stored["pretext"] == PRETEXT
    assert (stored["item_budget"], stored["epochs"]) == (items, 40)
    identity = cfg.identity()
    assert (identity.dataset, identity.stage, identity.model, identity.setting) == (
        "synthetic",
        "pretrain",
        method,
        "frac=1",
    )
    assert (identity.seed, identity.group) == (0, "no-pretrain-dl")


def test_a_sweep_variant_keeps_its_stored_settings_and_name():
    overrides = ["augment.zero_p=0.1", "augment.noise_scale=0.0", "variant=zero0.1"]
    cfg, resolved = _load("simclr-rank", overrides)
    assert OmegaConf.to_container(resolved)["augment"] == AUGMENT | {"zero_p": 0.1}
    assert cfg.identity().model == "simclr-rank@zero0.1"
    cfg, resolved = _load("dacl", ["augment.mixup=0.3", "variant=mixup0.3"])
    assert OmegaConf.to_container(resolved)["augment"] == AUGMENT | {"mixup": 0.3}
    assert cfg.identity().model == "dacl@mixup0.3"


def test_the_command_lines_keys_stay_as_typed():
    cfg, _ = _load("simclr-rank", ["temperature=0.5", "augment.zero_p=0.1"])
    assert (cfg.temperature, cfg.augment.zero_p, cfg.augment.noise_scale) == (0.5, 0.1, 1.0)
    with pytest.raises(UserError, match="temperature=0.5: method=simsiam does not read it"):
        _load("simsiam", ["temperature=0.5"])


# What each method reads of the keys only some methods read (docs/pretrain.md's table).
VIEW_KEYS = {f"augment.{k}" for k in ("zero_p", "noise_scale", "replace_p", "replace_source")}
VIEW_KEYS |= {"augment.binary_p"}
CONTRAST = {"heads.projector_dim", "temperature"}
READS = {
    "simclr-rank": VIEW_KEYS | CONTRAST,
    "simclr-sample": VIEW_KEYS | CONTRAST,
    "simclr": VIEW_KEYS | CONTRAST,
    "simsiam": VIEW_KEYS | {"heads.projector_dim", "heads.predictor_hidden"},
    "scarf": {"augment.corrupt_p", "augment.replace_source"} | CONTRAST,
    "dacl": {"augment.mixup", "augment.noise_scale"} | CONTRAST,
    "vime": {"augment.corrupt_p", "augment.replace_source", "vime_alpha"},
    "subtab": {"augment.corrupt_p", "augment.subsets", "augment.overlap"},
    "rank-pretext": {f"pretext.{k}" for k in ("n_tasks", "n_active", "single_features")}
    | {"augment.replace_p"},
    "qg-bins": {"pretext.n_bins", "augment.replace_p"},
    "simclr-pretext": VIEW_KEYS
    | CONTRAST
    | {f"pretext.{k}" for k in ("n_tasks", "n_active", "single_features")}
    | {"objective.rank_weight", "objective.rank_dims"},
}
# A value away from PretrainConfig's default for each of those keys.
SET = {
    "augment.zero_p": "0.2",
    "augment.noise_scale": "0.5",
    "augment.replace_p": "0.3",
    "augment.replace_source": "qg",
    "augment.binary_p": "0.3",
    "augment.corrupt_p": "0.4",
    "augment.mixup": "0.5",
    "augment.subsets": "2",
    "augment.overlap": "0.5",
    "heads.projector_dim": "16",
    "heads.predictor_hidden": "4",
    "temperature": "0.5",
    "vime_alpha": "1.0",
    "pretext.n_tasks": "8",
    "pretext.n_active": "2",
    "pretext.single_features": "False",
    "pretext.n_bins": "3",
}
# The methods' own options (`own_option`, set as objective.<field>): tests/test_objective_section.py
# and tests/test_pretext.py refuse and read them.
OWN = {"objective.rank_weight", "objective.rank_dims"}


def test_each_method_reads_its_options_keys():
    from scarce_ltr.pretrain.objectives import OBJECTIVES

    assert {m: set(o.options.keys()) for m, o in OBJECTIVES.items()} == READS
    assert {m: set(OBJECTIVES.reads(m)) for m in OBJECTIVES} == READS
    assert set(OBJECTIVES.option_keys()) == set(SET) | OWN


@pytest.mark.parametrize("method", sorted(READS))
def test_a_key_the_method_does_not_read_is_refused_with_the_keys_it_reads(method):
    for key, value in SET.items():
        if key in READS[method]:
            cfg, _ = _load(method, [f"{key}={value}"])
            assert str(getattr(cfg.objective_options, _field(cfg, key))) == value
            continue
        with pytest.raises(UserError) as caught:
            _load(method, [f"{key}={value}"])
        said = str(caught.value)
        assert f"{key}={value}: method={method} does not read it (read with method=" in said, said
        listed = said.split("; it reads ")[1]
        assert set(listed.split(", ")) == READS[method]


def _field(cfg, key: str) -> str:
    from dataclasses import fields

    return next(f.name for f in fields(cfg.objective_options) if f.metadata["key"] == key)


@pytest.mark.parametrize(
    ("method", "setting", "said"),
    [
        ("dacl", "augment.mixup=1.5", r"augment\.mixup must be in \[0, 1\], got 1\.5"),
        ("scarf", "augment.corrupt_p=2.0", r"augment\.corrupt_p must be in \[0, 1\]"),
        ("vime", "augment.corrupt_p=-0.1", r"augment\.corrupt_p must be in \[0, 1\]"),
        ("subtab", "augment.subsets=0", r"augment\.subsets must be >= 1, got 0"),
        ("subtab", "augment.overlap=1.0", r"augment\.overlap must be in \[0, 1\)"),
        ("vime", "vime_alpha=-1", r"vime_alpha=-1\.0: vime_alpha must be >= 0"),
        ("scarf", "temperature=0", r"temperature=0\.0: temperature must be > 0 and finite"),
        ("simclr", "temperature=-1", r"temperature must be > 0"),
    ],
)
def test_a_method_checks_its_own_options(method, setting, said):
    with pytest.raises(UserError, match=said):
        _load(method, [setting])


def test_the_options_checks_are_the_methods_not_the_sections():
    from scarce_ltr.pretrain.config import AugmentConfig

    # augment.mixup, corrupt_p, subsets, overlap are checked once, by the options that read them
    AugmentConfig(mixup=1.5, corrupt_p=2.0, subsets=0, overlap=1.0)
    with pytest.raises(ValueError, match=r"augment\.mixup"):
        PretrainConfig(method="dacl", augment=AugmentConfig(mixup=1.5))


def test_a_new_objectives_keys_come_from_its_options(monkeypatch):
    from dataclasses import dataclass

    from scarce_ltr.pretrain.config import AugmentConfig
    from scarce_ltr.pretrain.objectives import OBJECTIVES
    from scarce_ltr.pretrain.objectives.base import ObjectiveOptions, option
    from scarce_ltr.pretrain.objectives.vime import VIME

    @dataclass(frozen=True)
    class MixOnly(ObjectiveOptions):
        mixup: float = option("augment.mixup")

    class Mixer(VIME):
        options = MixOnly

    monkeypatch.setitem(OBJECTIVES, "mixer", Mixer)
    assert PretrainConfig(method="mixer", augment=AugmentConfig(mixup=0.2)).objective_options == (
        MixOnly(mixup=0.2)
    )
    with pytest.raises(ValueError, match=r"zero_p=0\.2: method=mixer does .*reads augment\.mixup$"):
        PretrainConfig(method="mixer", augment=AugmentConfig(zero_p=0.2))
    with pytest.raises(ValueError, match=r"read with method=dacl or mixer\)"):
        PretrainConfig(method="simsiam", augment=AugmentConfig(mixup=0.2))


def test_only_simclr_rank_takes_its_negatives_from_the_qgs():
    from scarce_ltr.pretrain.objectives import OBJECTIVES

    assert [m for m, o in OBJECTIVES.items() if o.qg_negatives] == ["simclr-rank"]
    assert [m for m, o in OBJECTIVES.items() if o.fake_groups] == ["simclr-sample"]
