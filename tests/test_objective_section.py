"""The ``objective:`` section (issue 63): ``objective: {name: vime, alpha: 1.0}`` spells the
pretraining config by the chosen method's option fields, in config files, on the command line,
in a sweep's overrides and in the estimators' keywords, and composes the config and the saved
``config.yaml`` the flat keys compose. A new objective is one module plus its registry line and
config file: an option of its own (`own_option`) needs no key of `PretrainConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf
from tiny import tiny_pretraining
from torch import nn
from torch.nn import functional as F

from scarce_ltr import pretrain
from scarce_ltr.api.stages import route
from scarce_ltr.cli import STAGES, run
from scarce_ltr.cli_compose import compose, run_stage
from scarce_ltr.core.config import CONFIG_ROOT, available, load_config, merge_config, to_yaml
from scarce_ltr.core.config_fields import NON_NEGATIVE
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.pretrain.augmentations import marginal_corruption
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.heads import linear_decoder
from scarce_ltr.pretrain.objectives import OBJECTIVES
from scarce_ltr.pretrain.objectives.base import CorruptionOptions, Objective, own_option
from scarce_ltr.sweeps.jobs import Job
from scarce_ltr.sweeps.stale import compose_job


# A new objective, written as one module would be: a denoising autoencoder whose Gaussian
# noise is an option of its own, which no key of PretrainConfig holds.
@dataclass(frozen=True)
class DenoiseOptions(CorruptionOptions):
    noise: float = own_option(0.1)  # std of the Gaussian noise added after the corruption

    def check(self) -> None:
        super().check()
        NON_NEGATIVE.check("objective.noise", self.noise)


class Denoise(Objective):
    options = DenoiseOptions

    def __init__(
        self, *, encoder: nn.Module, n_features: int, corrupt_p: float, noise: float
    ) -> None:
        super().__init__(encoder=encoder)
        self.decoder = linear_decoder(in_dim=self.width, out_dim=n_features)
        self.corrupt_p, self.noise = corrupt_p, noise

    @classmethod
    def build(cls, encoder: nn.Module, options: DenoiseOptions, *, n_features: int) -> Denoise:
        return cls(encoder=encoder, n_features=n_features, **options.arguments())

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        x, view_mask = self.inputs(features, mask)
        corrupted, _ = marginal_corruption(x, view_mask, p=self.corrupt_p, generator=generator)
        noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        clean = features[mask] if view_mask is not None else x
        return F.mse_loss(self.decoder(self.encode(corrupted + self.noise * noise, mask)), clean)


@pytest.fixture
def denoise(monkeypatch, tmp_path: Path) -> Path:
    """``denoise`` registered (its registry line) and its config file; the file's path."""
    monkeypatch.setitem(OBJECTIVES, "denoise", Denoise)
    config = tmp_path / "denoise.yaml"
    config.write_text("objective:\n  name: denoise\n  corrupt_p: 0.2\n  noise: 0.3\nepochs: 2\n")
    return config


TINY = [*tiny_pretraining(), "epochs=2", "monitor.enabled=false", "seed=1"]


def _load(method: str, overrides: list[str], **kwargs):
    stage_file = CONFIG_ROOT / "pretrain" / f"{method}.yaml"
    return load_config(
        PretrainConfig, [f"method={method}", *overrides], stage_file=stage_file, **kwargs
    )


def _defaults(method: str, overrides: list[str]) -> str:
    stage_file = CONFIG_ROOT / "pretrain" / f"{method}.yaml"
    merged = merge_config(
        PretrainConfig, [f"method={method}", *overrides], stage_file=stage_file,
        defaults_only=True,
    )  # fmt: skip
    return to_yaml(merged)


# (method, the section's spelling, the flat keys'): every kind of key an option stands for
SPELLINGS = [
    ("vime", ["objective.alpha=1.0", "objective.corrupt_p=0.4"],
     ["vime_alpha=1.0", "augment.corrupt_p=0.4"]),
    ("vime", ["objective.name=vime", "objective.replace_source=qg"],
     ["augment.replace_source=qg"]),
    ("simclr-rank", ["objective.temperature=0.5", "objective.projector_dim=16",
                     "objective.zero_p=0.2"],
     ["temperature=0.5", "heads.projector_dim=16", "augment.zero_p=0.2"]),
    ("rank-pretext", ["objective.n_tasks=8", "objective.single_features=false"],
     ["pretext.n_tasks=8", "pretext.single_features=false"]),
    ("simsiam", ["objective.predictor_hidden=4"], ["heads.predictor_hidden=4"]),
]  # fmt: skip


@pytest.mark.parametrize(("method", "nested", "flat"), SPELLINGS)
def test_the_section_composes_the_config_and_yaml_the_flat_keys_compose(method, nested, flat):
    cfg, resolved = _load(method, nested)
    flat_cfg, flat_resolved = _load(method, flat)
    assert cfg == flat_cfg
    assert to_yaml(resolved) == to_yaml(flat_resolved)
    assert _defaults(method, nested) == _defaults(method, flat)
    assert "objective" not in resolved  # no own options: config.yaml as before the section


def test_a_config_file_a_sweeps_overrides_and_the_keywords_spell_it_too(tmp_path, capsys):
    flat = ["vime_alpha=1.0", "augment.corrupt_p=0.4"]
    mine = tmp_path / "mine.yaml"
    mine.write_text("objective:\n  name: vime\n  alpha: 1.0\n  corrupt_p: 0.4\n")
    _, expected = _load("vime", flat)
    assert to_yaml(_load("vime", [], config_files=[mine])[1]) == to_yaml(expected)
    run(["pretrain", "vime", "--config", str(mine), "--print-config"])
    from_file = capsys.readouterr().out
    run(["pretrain", "vime", *flat, "--print-config"])
    assert from_file == capsys.readouterr().out
    # a method's config file in the section's spelling (a new objective's, say)
    stage_file = tmp_path / "vime.yaml"
    stage_file.write_text(
        "objective:\n  name: vime\n  alpha: 1.0\n  corrupt_p: 0.4\nepochs: 40\nitem_budget: 1024\n"
    )
    _, resolved = load_config(PretrainConfig, ["method=vime"], stage_file=stage_file)
    assert to_yaml(resolved) == to_yaml(expected)
    # a sweep's pretraining job, as the sweep plans and checks it
    job = Job("k", "pretrain", "vime", ["objective.alpha=1.0", "objective.corrupt_p=0.4"], tmp_path)
    composed = compose_job(job)
    assert to_yaml(composed.resolved) == to_yaml(expected)
    # the estimators' keywords: objective__alpha goes to pretraining, as Python values
    keys = route({"objective__alpha": 1.0, "objective__corrupt_p": 0.4}, ("pretrain", "finetune"))
    assert keys["pretrain"] == [("objective.alpha", 1.0), ("objective.corrupt_p", 0.4)]
    _, resolved = _load("vime", [], values=dict(keys["pretrain"]))
    assert to_yaml(resolved) == to_yaml(expected)


def test_help_shows_the_mapping_of_own_options_empty(capsys):
    run(["pretrain", "vime", "--help"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:5] == ["objective:", "dict[str,", "Any]", "=", "{}"] for line in lines)


def test_old_config_files_load_unchanged():
    """Each method's shipped file composes a config whose saved YAML holds every key of the
    schema but the (empty) own-options mapping: the bytes every earlier run wrote. A method
    with options of its own (simclr-pretext's rank_weight) saves them in that mapping."""
    keys = [f.name for f in fields(PretrainConfig) if f.name != "objective"]
    for method in available("pretrain"):
        cfg, resolved = _load(method, [])
        own = {name for name, key in OBJECTIVES[method].options.spelled().items() if key is None}
        if own:
            assert list(resolved.keys()) == [*keys, "objective"]
            assert set(cfg.objective) == set(own), method
            continue
        assert list(resolved.keys()) == keys
        assert cfg.objective == {}
        assert "objective" not in _defaults(method, [])
    assert _load("simclr-pretext", [])[0].objective == {"rank_weight": 1.0, "rank_dims": 0}


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["objective.temperature=0.3"],
         "command line: objective.temperature=0.3: method=vime does not read it (read with "
         "method=simclr-rank, simclr-sample, simclr, scarf, dacl or simclr-pretext); it reads "
         "objective.corrupt_p, objective.alpha, objective.replace_source"),
        (["objective.gamma=1"],
         "command line: objective.gamma=1: no method has an option 'gamma'; method=vime reads "
         "objective.corrupt_p, objective.alpha, objective.replace_source"),
        (["objective.alpha=1.0", "vime_alpha=3.0"],
         "command line: objective.alpha=1.0 and vime_alpha=3.0 set one thing twice with "
         "different values; give one"),
        (["augment.corrupt_p=0.5", "objective.corrupt_p=0.4"],
         "objective.corrupt_p=0.4 and augment.corrupt_p=0.5 set one thing twice"),
        (["objective.name=scarf"],
         "command line: objective.name=scarf and method=vime set one thing twice"),
        (["objective.name=nope"], "objective.name must be one of simclr-rank, "),
        (["objective=3"], "objective expects keys (objective.name=<method>, objective.<option>="),
    ],
)  # fmt: skip
def test_a_bad_section_is_refused_naming_the_keys(overrides, said):
    with pytest.raises(UserError) as caught:
        _load("vime", overrides)
    assert said in str(caught.value)


def test_both_spellings_agreeing_and_later_layers_win(tmp_path):
    cfg, _ = _load("vime", ["objective.alpha=1.0", "vime_alpha=1.0"])
    assert cfg.vime_alpha == 1.0
    mine = tmp_path / "mine.yaml"
    mine.write_text("objective:\n  alpha: 3.0\n")
    cfg, _ = _load("vime", ["vime_alpha=1.5"], config_files=[mine])
    assert cfg.vime_alpha == 1.5  # the command line comes after the file, as for flat keys
    # the file's method changed later: its option refused as the flat key is
    mine.write_text("objective:\n  name: vime\n  alpha: 3.0\n")
    with pytest.raises(UserError, match="vime_alpha=3.0: method=scarf does not read it"):
        _load("scarf", [], config_files=[mine])


def test_an_own_option_is_declared_in_the_module_alone(denoise):
    assert Denoise.options.keys() == ("augment.corrupt_p", "objective.noise")
    assert Denoise.options.spelled() == {"corrupt_p": "augment.corrupt_p", "noise": None}
    assert OBJECTIVES.readers("objective.noise") == ["denoise"]
    cfg, resolved = load_config(PretrainConfig, ["objective.noise=0.5"], stage_file=denoise)
    assert (cfg.method, cfg.augment.corrupt_p, cfg.objective) == ("denoise", 0.2, {"noise": 0.5})
    assert cfg.objective_options == DenoiseOptions(corrupt_p=0.2, noise=0.5)
    assert OmegaConf.to_container(resolved)["objective"] == {"noise": 0.5}
    # its default is stored when none is given; an int for its float as the float
    denoise.write_text("method: denoise\n")
    assert load_config(PretrainConfig, [], stage_file=denoise)[0].objective == {"noise": 0.1}
    assert load_config(PretrainConfig, ["objective.noise=1"], stage_file=denoise)[0].objective == {
        "noise": 1.0
    }
    # its checks, and another method's refusal of it, in the flat keys' words
    with pytest.raises(UserError, match=r"objective.noise=-1.0: objective.noise must be >= 0"):
        load_config(PretrainConfig, ["objective.noise=-1"], stage_file=denoise)
    with pytest.raises(UserError, match=r"objective.noise expects float, got 'loud'"):
        load_config(PretrainConfig, ["objective.noise=loud"], stage_file=denoise)
    with pytest.raises(
        UserError,
        match=r"objective.noise=0.5: method=vime does not read it \(read "
        r"with method=denoise\); it reads objective.corrupt_p, objective.alpha",
    ):
        _load("vime", ["objective.noise=0.5"])
    with pytest.raises(ValueError, match=r"objective.noise=0.5: method=vime does not read it"):
        PretrainConfig(method="vime", objective={"noise": 0.5})
    with pytest.raises(ValueError, match=r"objective.loud: no method has this option"):
        PretrainConfig(method="denoise", objective={"loud": 1})
    assert PretrainConfig(method="vime", objective={"noise": 0.1}).vime_alpha == 2.0  # default
    with pytest.raises(TypeError, match="own_option's default must be a scalar"):
        own_option([1])


@pytest.mark.cpu  # bit-equal CPU weights
def test_a_tiny_pretraining_spelled_either_way_gives_the_same_encoder():
    cfg, _ = _load("vime", [*TINY, "objective.alpha=1.0", "objective.corrupt_p=0.4"])
    flat, _ = _load("vime", [*TINY, "vime_alpha=1.0", "augment.corrupt_p=0.4"])
    splits = load_dataset(cfg.data)
    data = {"train": splits["train"], "vali": splits["vali"]}
    nested, plain = pretrain.fit(cfg, data).state, pretrain.fit(flat, data).state
    assert nested.keys() == plain.keys()
    assert all(torch.equal(nested[k], plain[k]) for k in nested)


@pytest.mark.cpu
def test_a_new_objective_with_an_own_option_pretrains_and_resumes(denoise, tmp_path, monkeypatch):
    monkeypatch.setenv("LTR_RUNS_DIR", str(tmp_path / "runs"))
    stage = STAGES["pretrain"]
    folder = tmp_path / "run"
    overrides = [*TINY, "objective.name=denoise", "objective.noise=0.5", f"run_dir={folder}"]
    composed = compose(stage, overrides, stage_file=denoise)
    assert composed.cfg.objective_options == DenoiseOptions(corrupt_p=0.2, noise=0.5)
    report = run_stage(stage, composed)
    saved = yaml.safe_load((folder / "config.yaml").read_text())
    assert (saved["method"], saved["objective"]) == ("denoise", {"noise": 0.5})
    assert (folder / "encoder.pt").is_file()
    # the same settings again: finished, skipped; another noise: a changed setting, refused
    assert run_stage(stage, compose(stage, overrides, stage_file=denoise)) == report
    changed = compose(stage, [*overrides[:-2], "objective.noise=0.25", overrides[-1]],
                      stage_file=denoise)  # fmt: skip
    with pytest.raises(UserError, match="objective.noise"):
        run_stage(stage, changed)
    # the option reaches the objective: another noise trains another encoder
    data = load_dataset(composed.cfg.data)
    data = {"train": data["train"], "vali": data["vali"]}
    state = pretrain.fit(composed.cfg, data).state
    other = pretrain.fit(changed.cfg, data).state
    assert not all(torch.equal(state[k], other[k]) for k in state)
    stored = torch.load(folder / "encoder.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(stored[k], state[k]) for k in stored)
