"""Ranking losses' options: which keys each loss reads, their checks, and what a run stores.

A loss module owns its options (`losses.base.LossOptions`); the ``loss`` section keeps
its flat keys, so a run's stored config (``config.yaml``, which a resume compares), its identity
and ``--help`` stay what they were. A key the chosen loss does not read is refused in the
pretraining objectives' form (tests/test_pretrain_options.py).
"""

from __future__ import annotations

from dataclasses import asdict, fields

import pytest
import torch
from omegaconf import OmegaConf

from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.config_doc import field_docs
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.registry import either
from scarce_ltr.finetune.config import FinetuneConfig, LossConfig
from scarce_ltr.losses import LOSSES

option_keys, readers = LOSSES.option_keys, LOSSES.readers

# What each loss reads of the loss section (docs/finetune.md's table).
READS = {
    "lambdarank": ("sigma", "k"),
    "ranknet": ("sigma",),
    "softmax": (),
    "approx-ndcg": ("temperature",),
    "neural-ndcg": ("temperature", "k"),
    "lambdaloss": ("sigma", "k", "mu"),
    "listmle": (),
    "listnet": (),
    "rmse": (),
}
# A value away from LossConfig's default for each key.
SET = {"sigma": "2.0", "k": "3", "temperature": "0.5", "mu": "2.0"}
STORED_LOSS = {"name": "lambdarank", "sigma": 1.0, "k": None, "temperature": None, "mu": 10.0}


def _load(strategy: str, overrides: list[str] = ()):  # type: ignore[assignment]
    stage_file = CONFIG_ROOT / "finetune" / f"{strategy}.yaml"
    return load_config(FinetuneConfig, ["pretrained=none", *overrides], stage_file=stage_file)


@pytest.mark.parametrize("strategy", ["lp", "mp", "full"])
def test_the_stored_loss_section_and_the_identity_stay(strategy):
    cfg, resolved = _load(strategy)
    assert OmegaConf.to_container(resolved)["loss"] == STORED_LOSS
    assert asdict(cfg.identity()) == {
        "dataset": "synthetic",
        "stage": "finetune",
        "model": f"scratch+{strategy}",
        "setting": "frac=1",
        "seed": 0,
        "group": "no-pretrain-dl",
        "folder_name": None,
    }
    # a loss and its options are settings of the run, never a part of its name
    chosen, resolved = _load(strategy, ["loss.name=neural-ndcg", "loss.k=5"])
    assert chosen.identity() == cfg.identity()
    stored = OmegaConf.to_container(resolved)["loss"]
    assert stored == STORED_LOSS | {"name": "neural-ndcg", "k": 5}


def test_each_loss_reads_its_options_keys_and_the_config_holds_them():
    assert {name: loss.options.keys() for name, loss in LOSSES.items()} == READS
    assert [(name, loss.name) for name, loss in LOSSES.items()] == [(n, n) for n in LOSSES]
    keys = [f.name for f in fields(LossConfig) if f.name != "name"]
    assert set(option_keys()) == set(keys)
    defaults = {f.name: f.default for f in fields(LossConfig)}
    for loss in LOSSES.values():
        for f in fields(loss.options):
            assert f.default == defaults[f.name], (loss.name, f.name)
    # --help says which losses read a key, and lists every loss
    docs = field_docs(LossConfig)
    for key in keys:
        assert set(docs[key].split(":")[0].split(", ")) == set(readers(key)), key
    assert docs["name"] == "|".join(LOSSES)


@pytest.mark.parametrize("loss", sorted(READS))
def test_a_key_the_loss_does_not_read_is_refused_with_the_keys_it_reads(loss):
    for key, value in SET.items():
        if key in READS[loss]:
            cfg, _ = _load("full", [f"loss.name={loss}", f"loss.{key}={value}"])
            assert str(getattr(cfg.loss.options, key)) == value
            continue
        with pytest.raises(UserError) as caught:
            _load("full", [f"loss.name={loss}", f"loss.{key}={value}"])
        said = str(caught.value)
        made = f"loss.name={loss} does not read it (read with loss.name={either(readers(key))}); "
        assert f": {made}" in said and f"loss.{key}=" in said.split(made)[0]
        listed = said.split("; it reads ")[1]
        expected = ", ".join(f"loss.{k}" for k in READS[loss]) or "no option of its own"
        assert listed == expected


def test_the_refusal_names_every_part_once():
    with pytest.raises(UserError) as caught:
        _load("full", ["loss.mu=3"])
    assert str(caught.value).endswith(
        "loss.mu=3.0: loss.name=lambdarank does not read it (read with loss.name=lambdaloss); "
        "it reads loss.sigma, loss.k"
    )


def test_a_key_a_searched_loss_reads_is_taken_and_one_none_reads_refused():
    searched = ["search.n_trials=2", "search.loss=[softmax,lambdarank]", "loss.name=softmax"]
    cfg, _ = _load("full", [*searched, "loss.k=3"])
    assert cfg.loss.options == LOSSES["softmax"].options()  # softmax itself reads none
    with pytest.raises(UserError) as caught:
        _load("full", [*searched, "loss.mu=3"])
    assert str(caught.value).endswith(
        "loss.mu=3.0: none of loss.name=softmax, lambdarank reads it (read with "
        "loss.name=lambdaloss); they read loss.sigma, loss.k"
    )


def test_the_deep_baselines_name_their_section():
    from scarce_ltr.baselines.config import BaselineConfig

    with pytest.raises(UserError) as caught:
        load_config(BaselineConfig, ["method=resnet", "deep.loss.name=rmse", "deep.loss.k=4"])
    assert str(caught.value).endswith(
        "deep.loss.k=4: deep.loss.name=rmse does not read it (read with deep.loss.name="
        "lambdarank, neural-ndcg or lambdaloss); it reads no option of its own"
    )


@pytest.mark.parametrize(
    ("loss", "options", "said"),
    [
        ("lambdarank", {"sigma": 0.0}, r"loss\.sigma=0\.0: loss\.sigma must be > 0 and finite"),
        ("lambdarank", {"k": 0}, r"loss\.k must be >= 1 \(or null for no truncation\)"),
        ("ranknet", {"sigma": float("inf")}, r"loss\.sigma=inf: loss\.sigma must be > 0"),
        ("approx-ndcg", {"temperature": 0.0}, r"loss\.temperature=0\.0: loss\.temperature must"),
        ("neural-ndcg", {"temperature": -1.0}, r"loss\.temperature=-1\.0: loss\.temperature"),
        ("neural-ndcg", {"k": -2}, r"loss\.k must be >= 1"),
        ("lambdaloss", {"mu": -1.0}, r"loss\.mu=-1\.0: loss\.mu must be >= 0 and finite"),
        ("lambdaloss", {"sigma": -1.0}, r"loss\.sigma=-1\.0: loss\.sigma must be > 0"),
        ("lambdaloss", {"k": 0}, r"loss\.k must be >= 1"),
    ],
)
def test_a_loss_checks_its_own_options(loss, options, said):
    with pytest.raises(ValueError, match=said):
        LOSSES[loss].options(**options)
    scores, labels = torch.zeros(1, 2), torch.tensor([[1.0, 0.0]])
    with pytest.raises(ValueError, match=said):  # the registry's call checks them alike
        LOSSES[loss](scores, labels, mask=torch.ones(1, 2, dtype=torch.bool), **options)
    with pytest.raises(ValueError, match=said):  # and so does the config, for any loss named
        LossConfig(name="softmax", **options)
    assert LOSSES[loss].options().arguments() == {
        k: v for k, v in asdict(LOSSES[loss].options()).items() if v is not None
    }


def test_a_loss_is_built_from_its_own_options_only():
    lambdarank = LOSSES["lambdarank"]
    assert lambdarank.build(lambdarank.options(k=5)).keywords == {"sigma": 1.0, "k": 5}
    with pytest.raises(TypeError, match="lambdarank takes LambdaRankOptions"):
        lambdarank.build(LOSSES["lambdaloss"].options())
    with pytest.raises(TypeError, match="mu"):  # an option the loss does not read
        lambdarank(torch.zeros(1, 2), torch.zeros(1, 2), mask=torch.ones(1, 2).bool(), mu=1.0)


def test_a_new_losss_keys_come_from_its_options(monkeypatch):
    from dataclasses import dataclass

    from scarce_ltr.losses.base import Loss, LossOptions
    from scarce_ltr.losses.rmse import rmse_loss

    @dataclass(frozen=True)
    class MuOnly(LossOptions):
        mu: float = 10.0

    def scaled(scores, labels, *, mask, mu):
        return mu * rmse_loss(scores, labels, mask=mask)

    monkeypatch.setitem(LOSSES, "scaled", Loss("scaled", MuOnly, scaled))
    assert LossConfig(name="scaled", mu=2.0).options == MuOnly(mu=2.0)
    assert readers("mu") == ["lambdaloss", "scaled"]
    with pytest.raises(ValueError, match=r"loss\.k=2: loss\.name=scaled .*reads loss\.mu$"):
        LossConfig(name="scaled", k=2).check_taken(["scaled"])
    with pytest.raises(ValueError, match=r"read with loss\.name=lambdaloss or scaled\)"):
        LossConfig(name="softmax", mu=2.0).check_taken(["softmax"])
