"""The tuned tree rankers: LightGBM's Optuna search, CatBoost, XGBoost. Choosing the trial on vali
only, determinism, bundles that score as the run did, each backend's NDCG against the project's,
and bad input."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny import tiny_data

import scarce_ltr
from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.search.strategies import SEARCHES
from scarce_ltr.search.strategies.study import optuna_search
from scarce_ltr.search.trial_scores import read_trial_scores
from scarce_ltr.search.trials import Pruned
from scarce_ltr.trees.catboost import EVAL_METRIC as CATBOOST_NDCG
from scarce_ltr.trees.catboost import CatBoostBackend, CatBoostOptions
from scarce_ltr.trees.lightgbm.config import GBDTOptions
from scarce_ltr.trees.lightgbm.lightgbm_ranker import BoosterOptions
from scarce_ltr.trees.lightgbm.search import lightgbm_choices
from scarce_ltr.trees.tree_run import TreeRunConfig, section_of
from scarce_ltr.trees.xgboost import XGBoostBackend, XGBoostOptions

DATA = [*tiny_data(), "logger=none"]
FAST = {
    "gbdt-optuna": ["gbdt.num_threads=1", "gbdt.max_rounds=20", "gbdt.early_stopping_rounds=5",
                    "gbdt.n_trials=4"],
    "catboost": ["catboost.num_threads=1", "catboost.max_rounds=20",
                 "catboost.early_stopping_rounds=5", "catboost.n_trials=3"],
    "xgboost": ["xgboost.num_threads=1", "xgboost.max_rounds=20",
                "xgboost.early_stopping_rounds=5", "xgboost.n_trials=3"],
}  # fmt: skip


def split_of(sizes: list[int], *, seed: int, n_features: int = 5) -> RankingSplit:
    """Random features; labels 0..4 loosely tied to feature 0."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    x = rng.normal(size=(int(offsets[-1]), n_features)).astype(np.float32)
    y = np.clip(np.round(x[:, 0] + 0.7 * rng.normal(size=len(x)) + 1.5), 0, 4)
    return RankingSplit(x, y.astype(np.float32), offsets, np.arange(len(sizes)), "split")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Each tuned tree ranker run twice on the same tiny data and seed."""
    root = tmp_path_factory.mktemp("trees")
    out = {}
    for name, fast in FAST.items():
        for copy in ("a", "b"):
            out[f"{name}/{copy}"] = root / name / copy
            run(["baseline", name, *DATA, *fast, f"run_dir={out[f'{name}/{copy}']}"])
    return out


def tpe(seed: int):
    import optuna

    return optuna.samplers.TPESampler(seed=seed)


def raw_test() -> RankingSplit:
    cfg, _ = load_config(CommonConfig, DATA)
    return load_dataset(cfg.data)["test"]


# --- choosing on vali -------------------------------------------------------------------------


def test_the_search_keeps_the_vali_best_trial_even_when_test_prefers_another() -> None:
    # Four arms: vali prefers arm 2, test would prefer arm 3; arm 1 is pruned with the best
    # intermediate value of all. The search must end with arm 2's model.
    vali = {0: 0.50, 1: 0.99, 2: 0.70, 3: 0.60}
    test = {0: 0.40, 1: 0.99, 2: 0.45, 3: 0.90}

    def suggest(trial) -> dict:
        return {"arm": trial.number}

    def train(choices: dict, report) -> tuple:
        arm = choices["arm"]
        if arm == 1:
            raise Pruned(3)
        return {"arm": arm, "test": test[arm]}, 10, vali[arm], 0.0, np.array([vali[arm]])

    outcome = optuna_search(n_trials=4, sampler=tpe(0), suggest=suggest, train=train)
    assert outcome.best_model == {"arm": 2, "test": 0.45}
    assert outcome.best_result.choices == {"arm": 2}
    assert [r.pruned for r in outcome.results] == [False, True, False, False]
    assert outcome.results[1].as_dict()["vali_ndcg@5"] is None
    # each trial keeps its per-QG vali values for trials.npz; the pruned one has none
    per_group = [r.vali_per_group for r in outcome.results]
    assert per_group[1] is None and [p.tolist() for p in per_group[::2]] == [[0.5], [0.7]]


def test_the_search_is_seeded_and_starts_from_the_defaults() -> None:
    def suggest(trial) -> dict:
        return {"x": trial.suggest_float("x", 0.0, 1.0)}

    def train(choices: dict, report) -> tuple:
        return None, 1, -((choices["x"] - 0.3) ** 2), 0.0, None

    draws = [
        [r.choices["x"] for r in optuna_search(n_trials=6, sampler=tpe(s), suggest=suggest,
                                                train=train, first={"x": 0.5}).results]
        for s in (1, 1, 2)
    ]  # fmt: skip
    assert draws[0] == draws[1] != draws[2]
    assert draws[0][0] == 0.5


def test_a_median_rule_prunes_a_trial_that_lags_behind() -> None:
    # Three trials climb to 0.9; the fourth stays at 0.1 and is stopped after the warm-up.
    curves = iter([np.full(20, 0.9)] * 3 + [np.full(20, 0.1)])

    def train(choices: dict, report) -> tuple:
        curve = next(curves)
        for step, value in enumerate(curve):
            report(step, float(value))
        return None, len(curve), float(curve[-1]), 0.0, None

    outcome = optuna_search(n_trials=4, sampler=tpe(0), suggest=lambda t: {}, train=train,
                            warmup_steps=5)  # fmt: skip
    assert [r.pruned for r in outcome.results] == [False, False, False, True]
    assert outcome.results[3].rounds == 6


class Parabola:
    """A backend's search side only: two keys, trial 0 at x = 0.5, vali best at x = 0.3."""

    name = "parabola"
    n_trials = 14
    early_stopping_rounds = 0

    def suggest(self, trial) -> dict:
        x = trial.suggest_float("x", 0.0, 1.0)
        return {"x": x, "k": trial.suggest_int("k", 1, 64, log=True)}

    def first(self) -> dict:
        return {"x": 0.5, "k": 8}


def draws(strategy: str, seed: int) -> tuple[list[dict], object]:
    """Every trial's choices, and the kept model, of ``strategy`` on `Parabola`."""

    def train(choices: dict, report) -> tuple:
        return dict(choices), 1, -((choices["x"] - 0.3) ** 2), 0.0, None

    seen: list = []
    outcome = SEARCHES[strategy].search(Parabola(), seed=seed, train=train, on_trial=seen.append)
    assert seen == outcome.results
    return [r.choices for r in outcome.results], outcome


def test_random_search_is_seeded_keeps_the_vali_best_and_is_not_tpe() -> None:
    first, outcome = draws("random", 1)
    again, _ = draws("random", 1)
    assert first == again != draws("random", 2)[0]
    assert first[0] == {"x": 0.5, "k": 8} and len(first) == 14
    best = max(range(14), key=lambda i: -((first[i]["x"] - 0.3) ** 2))
    assert outcome.best == best and outcome.best_model == first[best]
    # TPE starts with Optuna's 10 random trials, the same draws for the same seed; from then on
    # it draws from a model of the trials so far, and random search does not.
    tpe_draws, _ = draws("optuna", 1)
    assert tpe_draws[:10] == first[:10]
    assert all(t != r for t, r in zip(tpe_draws[10:], first[10:], strict=True))


# --- LightGBM's search ------------------------------------------------------------------------


def test_the_paper_grid_stays_the_default_and_sets_no_new_parameter() -> None:
    options = GBDTOptions()
    assert options.search == "paper-grid" and options.objective == "lambdarank"
    training = BoosterOptions(learning_rate=0.05, rounds=5, early_stopping_rounds=5,
                               num_threads=1, seed=0)  # fmt: skip
    assert training.objective == "lambdarank" and training.params == {}


def test_trial_choices_become_lightgbm_parameters() -> None:
    leaves, extra = lightgbm_choices(
        {"objective": "lambdarank", "num_leaves": 7, "min_data_in_leaf": 3,
         "feature_fraction": 0.5, "label_gain": "linear", "lambda_l2": 2.0}
    )  # fmt: skip
    assert (leaves.num_leaves, leaves.min_data_in_leaf, leaves.feature_fraction) == (7, 3, 0.5)
    assert extra["label_gain"] == list(range(31)) and extra["lambda_l2"] == 2.0
    assert "label_gain" not in lightgbm_choices({"label_gain": "exp"})[1]


def test_a_fixed_lightgbm_parameter_is_used_and_not_searched(tmp_path: Path) -> None:
    report = run(["baseline", "gbdt-optuna", *DATA, *FAST["gbdt-optuna"], "gbdt.params.lambda_l2=3",
                  "gbdt.params.max_bin=63", f"run_dir={tmp_path}"])  # fmt: skip
    assert all("lambda_l2" not in trial for trial in report["grid"])
    assert report["search"] == "optuna" and report["objective"] in ("lambdarank", "rank_xendcg")
    model = (tmp_path / "bundle" / "model.txt").read_text()
    assert "[lambda_l2: 3]" in model and "[max_bin: 63]" in model


def test_gbdt_pseudo_takes_the_objective_key(tmp_path: Path) -> None:
    report = run(["baseline", "gbdt-pseudo", *DATA, "gbdt.num_threads=1", "gbdt.max_rounds=10",
                  "gbdt.objective=rank_xendcg", "gbdt.num_leaves=[31]",
                  "gbdt.min_data_in_leaf=[20]", "gbdt.feature_fraction=[1.0]",
                  "scarcity.fraction=0.3",
                  f"run_dir={tmp_path}"])  # fmt: skip
    assert report["objective"] == "rank_xendcg"
    assert "[objective: rank_xendcg]" in (tmp_path / "bundle" / "model.txt").read_text()


@pytest.mark.parametrize(("name", "section"), [("gbdt-optuna", "gbdt"), ("xgboost", "xgboost")])
def test_every_backend_takes_the_random_search(tmp_path: Path, name, section) -> None:
    report = run(["baseline", name, *DATA, *FAST[name], f"{section}.n_trials=12",
                  f"{section}.search=random", f"run_dir={tmp_path}"])  # fmt: skip
    trials = report.get("trials") or report["grid"]
    assert report["search"] == "random" and [t["trial"] for t in trials] == list(range(12))
    scored = [t["vali_ndcg@5"] for t in trials if t["vali_ndcg@5"] is not None]
    assert report["selected"]["vali_ndcg@5"] == max(scored)


# --- every backend end to end -----------------------------------------------------------------


@pytest.mark.parametrize("name", list(FAST))
def test_same_seed_same_scores_and_the_bundle_scores_as_the_run_did(runs, name) -> None:
    first, second = runs[f"{name}/a"], runs[f"{name}/b"]
    with np.load(first / "scores.npz") as a, np.load(second / "scores.npz") as b:
        np.testing.assert_array_equal(a["test"], b["test"])
        np.testing.assert_array_equal(a["vali"], b["vali"])
        expected = a["test"]
    assert np.unique(expected).size > 1  # a model that ranks, not a constant
    ranker = scarce_ltr.load_ranker(first)
    np.testing.assert_array_equal(ranker.score_split(raw_test()), expected)
    report = json.loads((first / "report.json").read_text())
    trials = report.get("trials") or report["grid"]
    chosen = report["selected"]["vali_ndcg@5"]
    assert chosen == max(t["vali_ndcg@5"] for t in trials if t["vali_ndcg@5"] is not None)
    assert report["metrics"]["vali"]["ndcg@5"] == pytest.approx(chosen)
    # Every trial's per-QG vali (trials.npz): its mean is the trial's vali score, its argmax
    # the chosen trial, and the same seed writes the same values.
    qids, per_trial = read_trial_scores(first)
    assert per_trial.shape == (len(trials), report["n_vali_labeled_groups"])
    assert len(qids) == per_trial.shape[1]
    means = [np.nanmean(row) if not np.isnan(row).all() else None for row in per_trial]
    assert means == pytest.approx([t["vali_ndcg@5"] for t in trials], abs=1e-12)
    np.testing.assert_array_equal(per_trial, read_trial_scores(second)[1])


def test_a_backend_reads_its_own_section_through_the_pipelines_base_config() -> None:
    """A backend's `main` takes a `TreeRunConfig` and reads its section by the options' name
    (`section_of`): it never imports `BaselineConfig`, which imports it for that section."""
    cfg = BaselineConfig(method="xgboost", xgboost=XGBoostOptions(n_trials=3))
    assert section_of(cfg, XGBoostOptions) is cfg.xgboost
    with pytest.raises(TypeError, match="TreeRunConfig holds no catboost: section of CatBoost"):
        section_of(TreeRunConfig(), CatBoostOptions)


def test_the_tree_rankers_fall_into_the_gbdt_group() -> None:
    from scarce_ltr.models.names import model_group

    assert {model_group(m) for m in ("gbdt-optuna", "catboost", "xgboost")} == {"gbdt"}


# --- each backend's own NDCG ------------------------------------------------------------------


def test_catboost_ndcg_equals_the_project_ndcg_under_policy_one(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # eval_metrics leaves catboost_info/ in the working directory
    train, vali = split_of(list(range(3, 40)), seed=9), split_of([12, 3, 1, 20, 8, 15], seed=10)
    vali.labels[:12] = 0.0  # a QG without relevant item: CatBoost counts it as 1
    backend = CatBoostBackend(CatBoostOptions(num_threads=1, max_rounds=30), seed=0, epochs=None)
    model, _, _ = backend.fit(backend.first(), train, vali, lambda step, value: None)
    scores = backend.predict(model, vali.features)
    pool = backend._pool(vali)
    theirs = model.eval_metrics(pool, [CATBOOST_NDCG])[CATBOOST_NDCG][-1]
    ours = mean_ndcg(scores, vali.labels, vali.offsets, k=5, policy="one")
    assert ours == pytest.approx(theirs, abs=1e-9)


def test_xgboost_ndcg_equals_the_project_ndcg_under_policy_one() -> None:
    train, vali = split_of(list(range(3, 40)), seed=9), split_of([12, 3, 1, 20, 8, 15], seed=10)
    vali.labels[:12] = 0.0  # a QG without relevant item: XGBoost's ndcg@5 counts it as 1
    backend = XGBoostBackend(XGBoostOptions(num_threads=1, max_rounds=30), seed=0, epochs=None)
    model, _, _ = backend.fit(backend.first(), train, vali, lambda step, value: None)
    scores = backend.predict(model, vali.features)
    line = model.eval(backend._matrix(vali), name="vali")  # "[0]\tvali-ndcg@5:0.93..."
    theirs = float(re.search(r"vali-ndcg@5:([0-9.eE+-]+)", line).group(1))
    ours = mean_ndcg(scores, vali.labels, vali.offsets, k=5, policy="one")
    assert ours == pytest.approx(theirs, abs=1e-6)  # XGBoost prints 6 to 9 digits


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "override", "message"),
    [
        ("gbdt-optuna", "gbdt.params.lambda_l3=1", "gbdt.params.lambda_l3: LightGBM has no"),
        ("gbdt", "gbdt.params.eta=0.1", "set by the project; use gbdt.learning_rate"),
        ("gbdt", "gbdt.params.num_leaves=7", "the paper grid varies it"),
        ("gbdt-optuna", "gbdt.n_trials=0", "gbdt.n_trials must be >= 1"),
        ("gbdt", "gbdt.search=bayes", "gbdt.search must be one of paper-grid, optuna, random"),
        ("catboost", "catboost.search=tpe", "catboost.search must be one of paper-grid, optuna"),
        (
            "xgboost",
            "xgboost.search=paper-grid",
            "rank:ndcg has no search 'paper-grid'; it offers optuna, random",
        ),
        ("gbdt", "gbdt.objective=rank_ndcg", "'rank_ndcg' is not one of lambdarank"),
        ("catboost", "catboost.params.dept=3", "catboost.params.dept: CatBoost has no"),
        ("catboost", "catboost.loss=LambdaMart", "catboost.loss must be one of YetiRank"),
        ("catboost", "catboost.n_trials=0", "catboost.n_trials must be >= 1"),
        ("xgboost", "xgboost.params.max_depht=3", "xgboost.params.max_depht: XGBoost has no"),
        ("xgboost", "xgboost.params.objective=rank:map", "use xgboost.objective"),
        ("xgboost", "xgboost.objective=rank:map", "xgboost.objective must be one of rank:ndcg"),
        ("xgboost", "xgboost.n_trials=-1", "xgboost.n_trials must be >= 1"),
    ],
)
def test_bad_options_stop_with_one_clear_message(tmp_path, name, override, message) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        run(["baseline", name, *DATA, override, f"run_dir={tmp_path}"])


def test_labels_a_backend_cannot_take_are_refused() -> None:
    split = split_of([4, 4], seed=0)
    xgb = XGBoostBackend(XGBoostOptions(), seed=0, epochs=None)
    cat = CatBoostBackend(CatBoostOptions(), seed=0, epochs=None)
    xgb.check_labels(split, "train")
    cat.check_labels(split, "train")
    split.labels[0] = 31.0
    with pytest.raises(UserError, match="train: label 31 is above 30; XGBoost rank:ndcg"):
        xgb.check_labels(split, "train")
    cat.check_labels(split, "train")  # YetiRank takes any non-negative relevance
    split.labels[0] = 1.5
    with pytest.raises(UserError, match="XGBoost rank:ndcg needs integer labels"):
        xgb.check_labels(split, "train")
    split.labels[0] = -1.0
    with pytest.raises(UserError, match="CatBoost YetiRank needs finite labels >= 0"):
        cat.check_labels(split, "train")


def test_a_missing_backend_names_the_package_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "catboost", None)  # `import catboost` raises ImportError
    with pytest.raises(UserError, match=r"catboost backend needs catboost, which is not installed"):
        CatBoostBackend(CatBoostOptions(), seed=0, epochs=None)


def test_the_trees_sweep_plans_every_tree_ranker_in_the_gbdt_group(tmp_path: Path) -> None:
    cells = run(["sweep", "trees", "--dry-run", "logger=none", f"run_dir={tmp_path / 'sweep'}"])
    assert {c["model"] for c in cells} == {"gbdt", "gbdt-optuna", "catboost", "xgboost"}
    assert {c["group"] for c in cells} == {"gbdt"} and len(cells) == 4 * 3 * 3
