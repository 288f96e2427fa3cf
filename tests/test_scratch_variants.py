"""Fresh encoders with named settings, ``scratch@<variant>+<strategy>``: the name and its group,
the sweep's plan (``pretrained=none``, the variant's finetuning keys, ``variant=``, no
pretraining), the checks that stop a bad sweep before any cell, and ``variant=`` of a finetuning
run (its model ``scratch@<variant>+<strategy>``; a plain run's identity as it was)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.teachers import TAUGHT_GROUP
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.run_settings import run_identity
from scarce_ltr.models.names import FINETUNED, ModelName, model_group
from scarce_ltr.sweeps.model_jobs import pretraining_methods, sweep_job

VARIANTS = "{v: [encoder.kind=mlp, encoder.width=32]}"


def _planned(tmp_path: Path, capsys, models: str, *extra: str) -> tuple[list[dict], list[str]]:
    """The cells and the job lines of a dry run of the quick sweep over ``models``."""
    args = ["sweep", "quick", f"models={models}", "fractions=[0.5]", "seeds=[0]"]
    args += ["logger=none", "report=false", "--dry-run", f"run_dir={tmp_path / 's'}"]
    cells = run([*args, f"variants={VARIANTS}", *extra])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[to run]")]
    assert not (tmp_path / "s").exists()
    return cells, lines


def test_the_name_is_a_fresh_encoders_ranker_that_pretrains_nothing() -> None:
    name = ModelName.parse("scratch@v+full")
    assert (name.kind, name.encoder, name.name) == (FINETUNED, "scratch@v", "full")
    assert str(name) == "scratch@v+full"
    assert name.fresh_encoder and name.has_variant
    assert model_group("scratch@v+full") == "no-pretrain-dl"
    assert model_group("scratch@v+full~self") == TAUGHT_GROUP
    assert sweep_job("scratch@v+full") == (None, "finetune", "full")
    models = ["scratch@v+full", "scratch@v+lp", "seed-ensemble:scratch@v+full", "simclr@v+full"]
    assert pretraining_methods(models) == ["simclr@v"]
    # the tuned table's rule for every variant: a candidate of the model without it
    assert str(name.without_variants()) == "scratch+full"
    assert not ModelName.parse("simclr-rank@v+full").fresh_encoder


def test_a_sweep_finetunes_the_variant_on_a_fresh_encoder(tmp_path: Path, capsys) -> None:
    per_model = "overrides.per_model={scratch@v+full: [head_hidden=16]}"
    cells, lines = _planned(
        tmp_path, capsys, "[scratch+full,scratch@v+full,simclr@v+full]", per_model
    )
    assert {c["model"]: c["group"] for c in cells} == {
        "scratch+full": "no-pretrain-dl",
        "scratch@v+full": "no-pretrain-dl",
        "simclr@v+full": "pretrained-dl",
    }
    # one pretraining job, the simclr variant's: the fresh encoders wait for none
    (pretrain,) = [ln for ln in lines if ln.startswith("[to run] pretrain")]
    assert "/pretrain/simclr@v/" in pretrain and "variant=v" in pretrain.split()
    (plain,) = [ln.split() for ln in lines if "/scratch+full/" in ln]
    (job,) = [ln.split() for ln in lines if "/scratch@v+full/" in ln]
    assert "pretrained=none" in plain and not any(w.startswith("variant=") for w in plain)
    assert job[2:4] == ["finetune", "full"] and "/finetune/scratch@v+full/" in job[-1]
    # pretrained=none, the stage's list, the variant's keys and name, then the model's list
    order = ["pretrained=none", "optimizer.lr=2.0e-4", "encoder.kind=mlp", "encoder.width=32"]
    order += ["variant=v", "head_hidden=16"]
    assert [job.index(w) for w in order] == sorted(job.index(w) for w in order)


def test_a_taught_or_seed_ensembled_variant_keeps_its_keys(tmp_path: Path, capsys) -> None:
    _, lines = _planned(tmp_path, capsys, '[scratch@v+full~self,"seed-ensemble:scratch@v+full"]')
    finetunes = [ln.split() for ln in lines if " finetune full " in ln]
    assert len(finetunes) == 4  # the taught run and the seed ensemble's three members
    assert all({"pretrained=none", "encoder.kind=mlp", "variant=v"} <= set(f) for f in finetunes)


@pytest.mark.parametrize(
    ("models", "variants", "message"),
    [
        # undeclared: named, with the declared ones (no preset ships for scratch)
        ("[scratch@zz+full]", VARIANTS, r"'scratch@zz\+full': no variant 'zz' .*declared: v\)"),
        ("[gbdt,scratch@zz+full~self]", VARIANTS, "no variant 'zz'"),
        # a key finetuning does not have, named with the variant
        (
            "[scratch@v+full]",
            "{v: [encoder.nope=1]}",
            r"variants v \(finetuning scratch@v\+full\): .*'encoder.nope'",
        ),
        # a pretraining key is not a fresh encoder's setting
        (
            "[scratch@v+full]",
            "{v: [augment.zero_p=0.1]}",
            "variants v .*unknown config key 'augment'",
        ),
        # one variant for both stages: each use is checked by its own
        ("[scratch@v+full,simclr@v+full]", "{v: [head_hidden=16]}", r"pretraining simclr"),
        ("[scratch@v+full]", "{v: [strategy=lp]}", "names the run"),
        ("[scratch@v+full]", "{v: [pretrained=x]}", "names the run"),
    ],
)
def test_a_bad_fresh_encoder_variant_stops_before_any_cell(
    tmp_path: Path, capsys, models: str, variants: str, message: str
) -> None:
    with pytest.raises(UserError, match=message):
        _planned(tmp_path, capsys, models, f"variants={variants}")


def test_variant_is_no_override_of_a_sweep(tmp_path: Path, capsys) -> None:
    """A run named otherwise than its cell's model: the model name says the variant."""
    with pytest.raises(UserError, match="overrides.finetune: 'variant=v' sets 'variant'"):
        _planned(tmp_path, capsys, "[scratch+full]", "overrides.finetune=[variant=v]")


def test_a_finetuning_only_variant_serves_a_fresh_encoder(tmp_path: Path, capsys) -> None:
    _, lines = _planned(tmp_path, capsys, "[scratch@v+full]", "variants={v: [head_hidden=16]}")
    (job,) = lines
    assert "head_hidden=16" in job.split() and "variant=v" in job.split()


def _config(*overrides: str) -> FinetuneConfig:
    return load_config(FinetuneConfig, ["strategy=full", *overrides])[0]


def test_variant_names_a_fresh_encoders_run() -> None:
    cfg = _config("pretrained=none", "encoder.kind=mlp", "variant=mlp")
    assert cfg.encoder_name() == "scratch@mlp"
    assert (cfg.identity().model, cfg.identity().group) == ("scratch@mlp+full", "no-pretrain-dl")
    assert cfg.identity().default_folder().parts[-3] == "scratch@mlp+full"
    assert json.loads(run_identity(cfg))["variant"] == "mlp"
    plain = _config("pretrained=none")
    assert plain.identity().model == "scratch+full"
    assert "variant" not in json.loads(run_identity(plain))  # the identity it had before


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["pretrained=runs/x", "variant=a"], "named by its pretraining run"),
        (["pretrained=none", "variant=a/b"], "letters, digits"),
        (
            ["strategy=combine", "head_epochs=1", "full_epochs=0", "runs=[a,b]", "variant=a"],
            "not combine",
        ),
    ],
)
def test_variant_is_refused_where_it_names_nothing(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        _config(*overrides)


def test_a_seed_ensemble_of_a_portfolio_trains_its_chosen_recipe(tmp_path: Path, capsys) -> None:
    """The member of the cell's seed runs the portfolio; the other two train the recipe it chose
    (``search.recipe_from``), as they would after a 30-trial search, not the portfolio again."""
    per_model = "overrides.per_model={scratch+full: [search.strategy=portfolio]}"
    _, lines = _planned(tmp_path, capsys, '["seed-ensemble:scratch+full"]', per_model)
    finetunes = [ln.split() for ln in lines if " finetune full " in ln]
    assert len(finetunes) == 3
    taught = [f for f in finetunes if any(w.startswith("search.recipe_from=") for w in f)]
    assert len(taught) == 2
    (source,) = [f for f in finetunes if f not in taught]
    assert all(f"search.recipe_from={json.dumps(source[-1].split('=', 1)[1])}" in f for f in taught)
