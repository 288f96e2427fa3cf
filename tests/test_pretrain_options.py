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
}


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
    with pytest.raises(UserError, match="temperature: simsiam takes no temperature"):
        _load("simsiam", ["temperature=0.5"])
