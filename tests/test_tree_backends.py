"""A searched tree backend is one module (docs/architecture.md, "A tree backend"): its name, its
options with their checks, its backend, its scorer, ``main``, ``FAMILY`` and its registry entry
``BACKEND``; the baseline config's section and the family table derive from the entry, and which
methods keep NaN from the options. Old runs keep their folders and keys."""

from __future__ import annotations

import pickle
import re
import typing
from dataclasses import asdict, dataclass, field
from typing import ClassVar

import pytest

from scarce_ltr.api import aliases
from scarce_ltr.api.base import NAN_TREES
from scarce_ltr.baselines.config import (
    MISSING_AS_NAN,
    SEARCHED_TREES,
    BaselineConfig,
    missing_as_nan,
    section_readers,
)
from scarce_ltr.baselines.deep.config import DeepBaselineOptions
from scarce_ltr.baselines.run import BASELINE_FAMILIES, BASELINES
from scarce_ltr.core.run_identity import runs_root
from scarce_ltr.data.pipeline import TREES_TAKING_NAN
from scarce_ltr.pretrain.encoders import EncoderConfig
from scarce_ltr.trees import catboost, xgboost
from scarce_ltr.trees.backends import TREE_BACKENDS
from scarce_ltr.trees.lightgbm.config import GBDTOptions
from scarce_ltr.trees.lightgbm.hybrid.config import EmbeddingOptions
from scarce_ltr.trees.tuning import SearchOptions

# Each searched backend's module, its options class, backend and scorer.
BACKENDS = {
    xgboost: ("XGBoostOptions", "XGBoostBackend", "XGBoostScorer"),
    catboost: ("CatBoostOptions", "CatBoostBackend", "CatBoostScorer"),
}


@pytest.mark.parametrize("module", list(BACKENDS), ids=lambda m: m.NAME)
def test_a_searched_backend_is_one_module_named_once_in_each_table(module) -> None:
    options, backend, scorer = (getattr(module, n) for n in BACKENDS[module])
    for made in (options, backend, scorer, module.main, module.fit):
        assert made.__module__ == module.__name__
    # main and fit (made by trees.tree_fit.tree_entry_points) pickle by reference, as a Ray
    # task or a child process sends them
    assert pickle.loads(pickle.dumps((module.main, module.fit))) == (module.main, module.fit)
    assert issubclass(options, SearchOptions) and options.__dataclass_params__.frozen
    assert options.section == module.NAME
    # the config's section of that name is these options, from its registry entry
    assert TREE_BACKENDS[module.NAME] is module.BACKEND and module.BACKEND.options is options
    assert typing.get_type_hints(BaselineConfig)[module.NAME] is options
    assert isinstance(getattr(BaselineConfig(), module.NAME), options)
    family = module.FAMILY
    assert family.names == (module.NAME,) and family.train is module.main
    assert family.scorer is scorer and family.bundle_kind == module.BUNDLE_KIND
    assert [f for f in BASELINE_FAMILIES if f is family] == [family]
    assert BASELINES[module.NAME] is module.main
    # the estimators map LightGBM's keywords onto its section (TreeRanker(n_estimators=...))
    assert module.NAME in SEARCHED_TREES and aliases.family_of(module.NAME) == module.NAME
    assert aliases.resolve(module.NAME, {"n_estimators": 7}, set()) == {
        f"{module.NAME}__max_rounds": 7
    }


def test_the_trees_that_keep_nan_come_from_their_options() -> None:
    """One list, from each section's ``missing_as_nan``: the command line keeps NaN for these
    methods (``BaselineConfig.keeps_missing``) and the estimators (``NAN_TREES``)."""
    assert MISSING_AS_NAN == ("gbdt", "gbdt-optuna", "gbdt-pseudo", "catboost", "xgboost")
    assert NAN_TREES is MISSING_AS_NAN
    assert TREES_TAKING_NAN == MISSING_AS_NAN  # the data layer's refusal names the same trees
    assert set(MISSING_AS_NAN) <= set(BASELINES)
    kept = [name for name in BASELINES if BaselineConfig(method=name).keeps_missing]
    assert kept == ["gbdt", "gbdt-optuna", "gbdt-pseudo", "catboost", "xgboost"]
    assert BaselineConfig(method="gbdt-pca").nan_trees is MISSING_AS_NAN  # its NaN refusal's


def test_the_estimators_name_the_backends_that_take_integer_grades_only() -> None:
    """From each backend's options (``integer_labels``, ``library``): LightGBM's methods (the
    hybrid's too) and XGBoost refuse a real grade naming the library; CatBoost takes it."""
    from scarce_ltr.api import TreeRanker

    named = {m: TreeRanker(m)._integer_labels() for m in ("gbdt", "gbdt-ssl", *TREE_BACKENDS)}
    assert named == {
        "gbdt": "TreeRanker('gbdt') (LightGBM)",
        "gbdt-ssl": "TreeRanker('gbdt-ssl') (LightGBM)",
        "catboost": None,
        "xgboost": "TreeRanker('xgboost') (XGBoost)",
    }
    assert TreeRanker("resnet")._integer_labels() is None


@dataclass(frozen=True)
class HistOptions:  # a new backend's options
    missing_as_nan: ClassVar[tuple[str, ...]] = ("hist",)
    max_iter: int = 100


@dataclass(frozen=True)
class WithHist(BaselineConfig):  # its section in the config
    hist: HistOptions = field(default_factory=HistOptions)


def test_a_new_section_brings_its_nan_trees_with_it() -> None:
    """A new backend's options, given a section of the config, add its methods: no list
    elsewhere to keep in step."""
    assert missing_as_nan(WithHist) == (*MISSING_AS_NAN, "hist")
    assert SEARCHED_TREES == ("catboost", "xgboost")  # the sections holding `SearchOptions`


def test_tree_runs_keep_their_folders_and_config_keys() -> None:
    """Old runs resume: the folder a tree run's identity names and the keys (with defaults) of
    its section, which its ``config.yaml`` holds, are what they were before the backends moved
    into one module each."""
    for name in ("gbdt", "gbdt-optuna", "catboost", "xgboost"):
        identity = BaselineConfig(method=name).identity()
        folder = identity.default_folder().relative_to(runs_root())
        assert folder.as_posix() == f"synthetic/baseline/{name}/frac=1/seed=0"
        assert (identity.model, identity.group) == (name, "gbdt")
    search = {
        "search": "optuna", "n_trials": 20, "max_rounds": 500, "early_stopping_rounds": 50,
        "num_threads": 0, "n_jobs": 1, "params": {}, "storage": None, "study_name": None,
    }  # fmt: skip
    cfg = BaselineConfig()
    assert asdict(cfg.xgboost) == search | {"objective": "rank:ndcg"}
    assert asdict(cfg.catboost) == search | {"loss": "YetiRank"}
    keys = list(asdict(cfg))  # the sections' order in config.yaml and --help
    assert keys[keys.index("method") : keys.index("deep")] == [
        "method",
        "gbdt",
        "catboost",
        "xgboost",
    ]


@pytest.mark.parametrize(
    ("method", "sections", "refused"),
    [
        # another backend's key: a silent no-op before
        ("gbdt", {"xgboost": xgboost.XGBoostOptions(n_trials=5)}, "xgboost.n_trials=5: "
         "method=gbdt does not read it (read with method=xgboost); it reads gbdt.*"),
        ("resnet", {"catboost": catboost.CatBoostOptions(loss="QueryRMSE")},
         "catboost.loss=QueryRMSE: method=resnet does not read it"),
        # a nested section's key by its dotted name
        ("xgboost", {"deep": DeepBaselineOptions(encoder=EncoderConfig(width=64))},
         "deep.encoder.width=64: method=xgboost does not read it (read with method=resnet, "
         "deepfm, dcnv2 or dasalc); it reads xgboost.*"),
        ("dcnv2", {"gbdt": GBDTOptions(num_threads=1)}, "; it reads deep.*"),
        ("gbdt", {"embedding": EmbeddingOptions(raw=False)}, "embedding.raw=False: method=gbdt"),
        # every key set in the section is named
        ("gbdt", {"xgboost": xgboost.XGBoostOptions(n_trials=5, max_rounds=9)},
         "xgboost.n_trials=5, xgboost.max_rounds=9: method=gbdt does not read them"),
    ],
)  # fmt: skip
def test_a_section_the_method_does_not_read_is_refused(method, sections, refused) -> None:
    """A key of a section the chosen method does not read (its options' ``read_by``) is refused
    naming the sections it reads, as an objective's, a loss's, a format's or an executor's."""
    with pytest.raises(ValueError, match=re.escape(refused)):
        BaselineConfig(method=method, **sections)


def test_the_sections_a_method_reads_take_its_keys() -> None:
    """Every baseline reads one section at least, each section's readers are baselines, and
    their keys are taken: gbdt-ssl's LightGBM reads gbdt.* beside its embedding.*."""
    readers = section_readers(BaselineConfig)
    assert set(readers) == {"gbdt", "catboost", "xgboost", "deep", "embedding"}
    for name in BASELINES:
        assert any(name in methods for methods in readers.values()), name
        BaselineConfig(method=name)  # defaults everywhere: taken
    assert {m for methods in readers.values() for m in methods} == set(BASELINES)
    cfg = BaselineConfig(
        method="gbdt-ssl", gbdt=GBDTOptions(num_threads=1), embedding=EmbeddingOptions(raw=False)
    )
    assert cfg.gbdt.num_threads == 1
    BaselineConfig(method="catboost", catboost=catboost.CatBoostOptions(n_trials=3))
