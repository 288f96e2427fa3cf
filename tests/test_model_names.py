"""The typed model name: every form a sweep accepts parses and writes back to the same text, and a
malformed one is refused naming the bad part."""

from __future__ import annotations

import pytest

from scarce_ltr.core.errors import UserError
from scarce_ltr.models.names import (
    COMBINED,
    ENSEMBLE,
    FINETUNED,
    HYBRID,
    SEED_ENSEMBLE,
    SINGLE,
    STACK,
    TAUGHT,
    ModelName,
)

FORMS = {
    "gbdt": SINGLE,
    "simclr-rank@zero0.1": SINGLE,  # a pretraining run's model
    "simclr-rank+full": FINETUNED,
    "simclr-rank@zero0.1+full": FINETUNED,
    "scratch+lp": FINETUNED,
    "simclr-rank+simsiam+combine": COMBINED,
    "gbdt-ssl+simclr-rank": HYBRID,
    "gbdt-ssl+simclr-rank+full": HYBRID,  # on a finetuning run
    "simclr-rank+full~gbdt-optuna": TAUGHT,
    "gbdt-pseudo~ensemble:simclr-rank+full,gbdt-optuna": TAUGHT,
    "ensemble:simclr-rank+full,gbdt": ENSEMBLE,
    "ensemble:resnet~gbdt,gbdt": ENSEMBLE,
    "stack:gbdt,catboost,resnet": STACK,
    "seed-ensemble:dasalc": SEED_ENSEMBLE,
    "seed-ensemble:simclr-rank@a+full": SEED_ENSEMBLE,
}


@pytest.mark.parametrize("text", FORMS)
def test_every_form_round_trips(text: str) -> None:
    name = ModelName.parse(text)
    assert name.kind == FORMS[text]
    assert str(name) == text and ModelName.parse(str(name)) == name


def test_the_parts_a_planner_reads() -> None:
    taught = ModelName.parse("gbdt-pseudo~ensemble:simclr-rank+full,gbdt-optuna")
    assert str(taught.student) == "gbdt-pseudo" and taught.teacher is not None
    assert [str(m) for m in taught.teacher.members] == ["simclr-rank+full", "gbdt-optuna"]
    finetuned = ModelName.parse("simclr-rank@zero0.1+full")
    assert (finetuned.encoder, finetuned.name) == ("simclr-rank@zero0.1", "full")
    assert finetuned.has_variant and str(finetuned.without_variants()) == "simclr-rank+full"
    combined = ModelName.parse("simclr-rank@a+simsiam+combine")
    assert combined.methods == ("simclr-rank@a", "simsiam")
    assert str(combined.without_variants()) == "simclr-rank+simsiam+combine"
    assert ModelName.parse("seed-ensemble:gbdt").ensembles
    assert not ModelName.parse("seed-ensemble:gbdt").mixes
    assert str(ModelName.finetuned("simsiam", "full")) == "simsiam+full"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ensemble:gbdt", "model 'ensemble:gbdt': an ensemble is ensemble:<model>,<model>"),
        ("stack:gbdt,", "an ensemble is stack:<model>,<model>"),
        ("seed-ensemble:ensemble:a,b", "a seed ensemble is seed-ensemble:<one model>"),
        ("~gbdt", "a taught model is <student>~<teacher>"),
    ],
)
def test_a_malformed_name_is_refused_by_form(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        ModelName.parse(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope+full", "unknown pretraining method 'nope'"),
        ("simclr-rank+nope", "unknown finetuning strategy 'nope'"),
        ("simclr-rank+nope+combine", "unknown pretraining method 'nope'"),
        ("gbdt-ssl+nope", "unknown pretraining method 'nope'"),
        ("lambdamart", "unknown sweep model 'lambdamart'"),
        ("gbdt~resnet", "gbdt cannot learn from a teacher"),
    ],
)
def test_check_names_the_unknown_part(text: str, message: str) -> None:
    name = ModelName.parse(text)  # well formed
    with pytest.raises(UserError, match=message):
        name.check()
