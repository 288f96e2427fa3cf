"""A new tree backend is one module plus its line in `trees.backends.TREE_BACKENDS` (issue 63).

This module is such a backend, a toy one (`ToyOptions`, `ToyBackend`, `ToyScorer`, `main`, `fit`,
`FAMILY`, `EXTRA`, `BACKEND`: a ridge regression of scikit-learn ranking by score). Registered
in a fresh process before the baselines are imported, as the registry's literal would list it,
it gets everything a shipped backend has with no other edit: its ``toy:`` section in the baseline
config (``--help``, ``config.yaml``), ``./run.sh baseline toy`` and ``baselines.fit`` (the same
scores, and its bundle loaded by serving), its keys refused under another method and another
backend's under it, and the one line naming its missing package.

Nothing at this module's top imports `scarce_ltr.baselines`: the config derives its sections
from the registry when it is first imported, which must come after the toy's registration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from tiny import tiny_data

from scarce_ltr.core.bundle import bundle_path, read_model_bytes
from scarce_ltr.core.extras import Extra
from scarce_ltr.core.families import ModelFamily, ScoringContext
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.transforms import FeatureTransform
from scarce_ltr.trees.tree_fit import tree_entry_points
from scarce_ltr.trees.tree_run import Report, TreeRunConfig
from scarce_ltr.trees.tuning import SearchOptions, TreeBackendEntry, check_labels, require_backend

NAME = "toy"
MODEL_FILE = "ridge.json"
# Its library (scikit-learn, installed with the tests) under an extra of its own, for the message.
EXTRA = Extra("sklearn", "scikit-learn", "toy")


# The toy: section: the search's keys (`SearchOptions`) and the first trial's penalty.
@dataclass(frozen=True)
class ToyOptions(SearchOptions):
    section: ClassVar[str] = NAME
    library: ClassVar[str] = "scikit-learn"
    read_by: ClassVar[tuple[str, ...]] = (NAME,)

    alpha: float = 1.0  # the ridge penalty of trial 0

    def __post_init__(self) -> None:
        if not self.alpha > 0:
            raise ValueError(f"toy.alpha must be > 0, got {self.alpha}")
        super().__post_init__()


class ToyBackend:
    """One ridge fit per trial (no rounds to stop early), its penalty searched."""

    def __init__(self, options: ToyOptions, *, seed: int, epochs: int | None) -> None:
        require_backend(EXTRA)
        from sklearn.linear_model import Ridge

        self.ridge, self.options = Ridge, options
        self.name, self.n_trials = "toy ridge", options.n_trials
        self.early_stopping_rounds = options.early_stopping_rounds

    def check_labels(self, split: RankingSplit, what: str) -> None:
        check_labels(split, what, backend=self.name, integer=False, max_label=None)

    def suggest(self, trial: Any) -> dict:
        return {"alpha": trial.suggest_float("alpha", 1e-3, 1e3, log=True)}

    def first(self) -> dict:
        return {"alpha": self.options.alpha}

    def fit(
        self, choices: dict, train: RankingSplit, vali: RankingSplit, report: Report | None
    ) -> tuple[Any, int, float]:
        start = time.perf_counter()
        features = np.asarray(train.features, dtype=np.float64)
        model = self.ridge(alpha=choices["alpha"]).fit(features, train.labels)
        return (model.coef_, float(model.intercept_)), 1, time.perf_counter() - start

    def predict(self, model: Any, features: np.ndarray) -> np.ndarray:
        coef, intercept = model
        return np.asarray(features, dtype=np.float64) @ coef + intercept

    def bundle(self, model: Any) -> tuple[dict, dict[str, bytes]]:
        coef, intercept = model
        text = json.dumps({"coef": coef.tolist(), "intercept": intercept})
        return {"kind": NAME, "model": MODEL_FILE}, {MODEL_FILE: text.encode()}

    def describe(self) -> dict:
        return {"library": "scikit-learn"}


class ToyScorer:
    """A toy bundle's model: what `ToyBackend.bundle` wrote."""

    def __init__(self, folder: Path, info: dict, context: ScoringContext) -> None:
        saved = json.loads(read_model_bytes(bundle_path(folder, info.get("model"), "model.model")))
        self.model = (np.asarray(saved["coef"], dtype=np.float64), float(saved["intercept"]))

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        coef, intercept = self.model
        return np.asarray(transform(raw).features, dtype=np.float64) @ coef + intercept


main, fit = tree_entry_points(ToyOptions, ToyBackend, __name__)


FAMILY = ModelFamily(
    names=(NAME,), stage="baseline", train=main, group="gbdt", bundle_kind=NAME, scorer=ToyScorer
)
BACKEND = TreeBackendEntry(options=ToyOptions, family=FAMILY, fit=fit, extra=EXTRA)


# In a process of its own: the toy registered before anything reads the registry, then the
# command, the in-memory fit, the refusals and the missing package, each result printed.
SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
import test_tree_backend_registry as toy
from scarce_ltr.trees.backends import TREE_BACKENDS

TREE_BACKENDS[toy.NAME] = toy.BACKEND  # the one registry line, as trees/backends.py lists one

from dataclasses import fields, replace
import numpy as np
from scarce_ltr import baselines
from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.cli import STAGES
from scarce_ltr.cli_compose import compose, run_stage
from scarce_ltr.core.config import load_config
from scarce_ltr.core.config_doc import help_text
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.scarcity import apply_scarcity
from scarce_ltr.families import scorers
from scarce_ltr.serving.ranker import load_ranker

out = {{}}
keys = [f.name for f in fields(BaselineConfig)]
out["sections"] = keys[keys.index("method") : keys.index("deep")]
out["help"] = [line.split()[0] for line in help_text(BaselineConfig).splitlines()
               if line.strip().startswith("toy.")]
out["help_alpha"] = [line for line in help_text(BaselineConfig).splitlines() if "toy.alpha" in line]
out["scorer"] = scorers().get("toy") is toy.ToyScorer
keys = ["method=toy", *{data!r}, "logger=none", "seed=2", "scarcity.fraction=0.5",
        "toy.alpha=2", "toy.n_trials=3", "toy.num_threads=1"]
folder = {tmp!r} + "/command"
stage = STAGES["baseline"]
run_stage(stage, compose(stage, [*keys, f"run_dir={{folder}}"]))  # ./run.sh baseline toy ...
out["config_yaml"] = open(folder + "/config.yaml").read().split("toy:")[1].split("deep:")[0]
report = json.load(open(folder + "/report.json"))
out["trials"] = [trial["alpha"] for trial in report["trials"]]
cfg, _ = load_config(BaselineConfig, keys)
splits = load_dataset(cfg.data)
labeled = apply_scarcity(splits["train"], splits["vali"], cfg.scarcity, seed=cfg.seed).train_labeled
ranker = baselines.fit(cfg, splits, labeled=labeled)
saved = np.load(folder + "/scores.npz")
test = ranker.score_split(splits["test"])
out["same_test"] = bool(np.array_equal(test, saved["test"]))
out["same_vali"] = bool(np.array_equal(ranker.score_split(splits["vali"]), saved["vali"]))
out["bundle"] = bool(np.array_equal(load_ranker(folder).score_split(splits["test"]), test))
refused = {{}}
for name, args in (("other_method", ["method=gbdt", "toy.alpha=3"]),
                   ("other_section", ["method=toy", "xgboost.n_trials=5"]),
                   ("bad_value", ["method=toy", "toy.alpha=-1"])):
    try:
        load_config(BaselineConfig, [*{data!r}, *args])
    except UserError as exc:
        refused[name] = str(exc)
out["refused"] = refused
sys.modules["sklearn"] = None  # scikit-learn made unimportable: the toy's missing package
try:
    baselines.fit(cfg, splits, labeled=labeled)
except UserError as exc:
    out["missing"] = str(exc)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.cpu  # the command's CPU scores, bit for bit
def test_a_toy_backend_registered_by_one_line_runs_as_a_shipped_one(tmp_path: Path) -> None:
    script = SCRIPT.format(tests=str(Path(__file__).parent), tmp=str(tmp_path), data=tiny_data())
    env = {**os.environ, "LTR_RUNS_DIR": str(tmp_path / "runs")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    # its section after the shipped backends', in --help and config.yaml
    assert out["sections"] == ["method", "gbdt", "catboost", "xgboost", "toy"]
    assert out["help"][0] == "toy.*" and {"toy.alpha:", "toy.n_trials:"} <= set(out["help"])
    assert out["help_alpha"][0].split() == [
        "toy.alpha:", "float", "=", "1.0", "the", "ridge", "penalty", "of", "trial", "0"
    ]  # fmt: skip
    assert "alpha: 2.0" in out["config_yaml"] and "n_trials: 3" in out["config_yaml"]
    assert len(out["trials"]) == 3 and out["trials"][0] == 2.0  # trial 0: toy.alpha
    # baselines.fit equals the command's run, and serving loads its bundle by its family
    assert out["same_test"] and out["same_vali"] and out["bundle"] and out["scorer"]
    assert out["refused"] == {
        "other_method": "bad config value: toy.alpha=3.0: method=gbdt does not read it "
        "(read with method=toy); it reads gbdt.*",
        "other_section": "bad config value: xgboost.n_trials=5: method=toy does not read it "
        "(read with method=xgboost); it reads toy.*",
        "bad_value": "bad config value: toy.alpha must be > 0, got -1.0",
    }
    assert out["missing"] == (
        "the sklearn backend needs scikit-learn, which is not installed: "
        'pip install "scarce-ltr[toy]"'
    )


def test_the_shipped_backends_are_the_registry_and_the_rest_derives_from_it() -> None:
    from scarce_ltr.baselines.config import SEARCHED_TREES, BaselineConfig, sections
    from scarce_ltr.baselines.run import BASELINE_FAMILIES, BASELINES, FITS
    from scarce_ltr.families import scorers
    from scarce_ltr.trees import catboost, xgboost
    from scarce_ltr.trees.backends import TREE_BACKENDS

    assert list(TREE_BACKENDS) == ["catboost", "xgboost"]
    assert TREE_BACKENDS.readers("xgboost") == ["xgboost"]
    for module in (catboost, xgboost):
        entry = TREE_BACKENDS[module.NAME]
        assert entry is module.BACKEND and entry.extra is module.EXTRA
        assert sections(BaselineConfig)[entry.name] is entry.options
        assert [f for f in BASELINE_FAMILIES if f is entry.family] == [entry.family]
        assert BASELINES[entry.name] is module.main and FITS[entry.name] is module.fit
        assert scorers()[entry.family.bundle_kind] is entry.family.scorer
    assert SEARCHED_TREES == tuple(TREE_BACKENDS)


def test_an_entry_that_disagrees_with_itself_is_refused() -> None:
    with pytest.raises(ValueError, match=r"tree backend toy: ToyOptions.read_by \('toy',\) must"):
        TreeBackendEntry(options=ToyOptions, family=replace(FAMILY, names=("ridge",)), fit=fit)


def test_a_section_that_would_hide_a_key_of_the_config_is_refused(monkeypatch) -> None:
    from scarce_ltr.baselines.config import tree_sections
    from scarce_ltr.trees.backends import TREE_BACKENDS
    from scarce_ltr.trees.lightgbm.config import GBDTOptions

    @dataclass(frozen=True)
    class SeedOptions(ToyOptions):  # a backend named like the config's seed key
        section: ClassVar[str] = "seed"
        read_by: ClassVar[tuple[str, ...]] = ("seed",)

    entry = TreeBackendEntry(
        options=SeedOptions, family=replace(FAMILY, names=("seed",)), fit=fit, extra=EXTRA
    )
    monkeypatch.setitem(TREE_BACKENDS, "seed", entry)

    class Probe(TreeRunConfig):
        gbdt: GBDTOptions

    with pytest.raises(ValueError, match="tree backend seed: Probe has a key seed already"):
        tree_sections(Probe)
