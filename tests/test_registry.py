"""The one registry of extensions and the one refusal of a key the choice made does not read.

`core.registry`: every kind of extension (a pretraining objective, a ranking loss, a data format,
a baseline's section, a sweep executor) refuses a key of another choice in the same words,
naming the setting, the choice made, the choices that read it and what the chosen one reads.
"""

from __future__ import annotations

import doctest
import re

import pytest

from scarce_ltr.core import registry
from scarce_ltr.core.registry import Registry, check_unread, either, unread

FRUITS = Registry("fruit", {"apple": ("peel",), "plum": ("stone", "peel")}, reads=tuple)


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(registry).failed == 0


def test_a_registry_is_the_dict_of_its_names_and_knows_what_each_reads() -> None:
    assert dict(FRUITS) == {"apple": ("peel",), "plum": ("stone", "peel")}
    assert FRUITS.reads("plum") == ("stone", "peel") and FRUITS.reads("pear") == ()
    assert FRUITS.option_keys() == ("peel", "stone")
    assert FRUITS.readers("peel") == ["apple", "plum"] and FRUITS.readers("pit") == []
    grown = Registry("fruit", FRUITS, reads=tuple)
    grown["cherry"] = ("stone", "stalk")  # an entry added later counts at once
    assert grown.option_keys() == ("peel", "stone", "stalk")


def _changed(**settings):
    return lambda key: [f"{key}={settings[key]}"] if key in settings else []


def test_the_refusal_names_the_setting_the_choice_who_reads_it_and_what_the_choice_reads():
    FRUITS.check_unread("plum", _changed(stone=1, peel=2))  # plum reads both: taken
    FRUITS.check_unread("plum", _changed())  # nothing set
    with pytest.raises(ValueError) as caught:
        FRUITS.check_unread("apple", _changed(stone=3))
    assert str(caught.value) == (
        "stone=3: fruit=apple does not read it (read with fruit=plum); it reads peel"
    )


def test_a_prefix_a_section_and_what_every_choice_reads() -> None:
    boxes = Registry("kind", {"crate": ("lid",), "bag": ()}, reads=tuple, sections=True)
    with pytest.raises(ValueError) as caught:
        boxes.check_unread(
            "bag", lambda key: ["box.lid.x=1", "box.lid.y=2"], prefix="box.", also_read=["size"]
        )
    assert str(caught.value) == (
        "box.lid.x=1, box.lid.y=2: box.kind=bag does not read them (read with box.kind=crate); "
        "it reads size"
    )
    boxes["tin"] = ("seal",)
    with pytest.raises(ValueError, match=r"\(read with box\.kind=tin\); it reads box\.lid\.\*$"):
        boxes.check_unread("crate", _changed(seal=1), prefix="box.")


def test_several_choices_read_as_one_and_a_choice_in_words() -> None:
    FRUITS.check_unread(["apple", "plum"], _changed(stone=1))  # plum reads it
    with pytest.raises(ValueError) as caught:
        Registry("fruit", {"apple": ("peel",), "fig": ()}, reads=tuple).check_unread(
            ["fig", "fig"], _changed(peel=1)
        )  # one choice twice is one choice
    assert str(caught.value).startswith("peel=1: fruit=fig does not read it")
    with pytest.raises(ValueError) as caught:
        FRUITS.check_unread([], _changed(peel=1), made="fruit=none", also_read=["basket"])
    assert str(caught.value) == (
        "peel=1: fruit=none does not read it (read with fruit=apple or plum); it reads basket"
    )
    with pytest.raises(ValueError) as caught:
        check_unread(
            choice="fruit",
            chosen=["apple", "fig"],
            readers={"peel": ["apple"], "stone": ["plum"]},
            changed=_changed(stone=2),
        )
    assert str(caught.value) == (
        "stone=2: none of fruit=apple, fig reads it (read with fruit=plum); they read peel"
    )


def test_the_words_of_the_refusal() -> None:
    assert either(["a"]) == "a" and either(["a", "b", "c"]) == "a, b or c"
    assert either([]) == "none"
    assert str(unread(["k=1"], "m=x", "m=y")) == "k=1: m=x does not read it (read with m=y)"
    assert str(unread(["k=1"], "m=x", "m=y", [])).endswith("; it reads no option of its own")


# One refusal, for every kind of extension, from its config: (config, its keywords, the words).
def _pretrain(**kw):
    from scarce_ltr.pretrain.config import PretrainConfig

    return PretrainConfig(**kw)


def _finetune_loss(**kw):
    from scarce_ltr.finetune.config import LossConfig

    names = kw.pop("names")
    return LossConfig(**kw).check_taken(names)


def _data(**kw):
    from scarce_ltr.data.datasets import DataConfig

    return DataConfig(**kw)


def _baseline(**kw):
    from scarce_ltr.baselines.config import BaselineConfig
    from scarce_ltr.trees.xgboost import XGBoostOptions

    return BaselineConfig(method=kw["method"], xgboost=XGBoostOptions(n_trials=kw["n_trials"]))


def _sweep(**kw):
    from scarce_ltr.sweeps.ray_executor import RayConfig
    from scarce_ltr.sweeps.sweep import SweepConfig

    return SweepConfig(executor=kw["executor"], ray=RayConfig(address=kw["address"]))


KINDS = {
    "pretrain objective": (
        _pretrain,
        {"method": "simclr-rank", "vime_alpha": 1.0},
        "vime_alpha=1.0: method=simclr-rank does not read it (read with method=vime); it reads ",
    ),
    "finetune loss": (
        _finetune_loss,
        {"names": ["lambdarank"], "mu": 3.0},
        "loss.mu=3.0: loss.name=lambdarank does not read it (read with loss.name=lambdaloss); "
        "it reads loss.sigma, loss.k",
    ),
    "data format": (
        _data,
        {"name": "mine", "format": "letor", "path": "/x", "qid": "q"},
        "data.qid=q: data.format=letor does not read it (read with data.format=table); it "
        "reads data.path, data.splits",
    ),
    "baseline method": (
        _baseline,
        {"method": "gbdt", "n_trials": 5},
        "xgboost.n_trials=5: method=gbdt does not read it (read with method=xgboost); it reads "
        "gbdt.*",
    ),
    "sweep executor": (
        _sweep,
        {"executor": "local", "address": "auto"},
        "ray.address=auto: executor=local does not read it (read with executor=ray); it reads "
        "workers",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_extension_refuses_in_the_same_words(kind) -> None:
    build, keywords, said = KINDS[kind]
    with pytest.raises(ValueError, match="^" + re.escape(said)):
        build(**keywords)
