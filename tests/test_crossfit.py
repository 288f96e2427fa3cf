"""Cross-fitted ensemble weights (``weights=crossfit``) and the ``stack:`` model.

The folds by hand, the estimate on per-QG matrices where the in-sample choice is lucky and where
it is real, and the ensemble end to end on members where one is noise that fits a few vali QGs:
the cross-fitted vali NDCG@5 is below the in-sample one, the weights lean away from the noise.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.evaluation import save_scores
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.ensembles.config import EnsembleConfig
from scarce_ltr.models.names import ModelName, model_group
from scarce_ltr.search.crossfit import assign_folds, crossfit
from scarce_ltr.search.trial_scores import read_trial_scores

DATA = [*tiny_data(), "data.synthetic.n_vali_groups=30", "logger=none"]


def test_folds_are_balanced_seeded_and_skip_undefined_groups() -> None:
    defined = np.array([True, False, True, True])
    assert assign_folds(defined, 2, seed=0).tolist() == [0, -1, 0, 1]
    defined = np.ones(23, dtype=bool)
    defined[[3, 7]] = False
    folds = assign_folds(defined, 5, seed=4)
    assert (folds[[3, 7]] == -1).all() and sorted(np.bincount(folds[folds >= 0])) == [4, 4, 4, 4, 5]
    assert np.array_equal(folds, assign_folds(defined, 5, seed=4))
    assert not np.array_equal(folds, assign_folds(defined, 5, seed=5))
    assert assign_folds(np.ones(3, dtype=bool), 5, seed=0).max() == 2  # one QG per fold at most
    with pytest.raises(ValueError, match="2 or more labeled vali QGs"):
        assign_folds(np.array([True, False]), 5, seed=0)


def test_crossfit_by_hand() -> None:
    # Vector 0 is right on 3 QGs of 4, vector 1 on the fourth: every fold keeps vector 0.
    fit = crossfit(np.array([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]), n_folds=4, seed=0)
    assert fit.fold_choices.tolist() == [0, 0, 0, 0]
    assert fit.estimate == pytest.approx(0.75) and fit.in_sample == pytest.approx(0.75)
    # A QG without a defined value (NaN in every row) joins no fold and no mean.
    fit = crossfit(np.array([[1.0, np.nan, 0.5], [0.0, np.nan, 0.0]]), n_folds=5, seed=0)
    assert fit.fold_of_group[1] == -1 and fit.n_folds == 2 and fit.estimate == pytest.approx(0.75)


def test_estimate_is_honest_where_the_in_sample_choice_is_luck() -> None:
    rng = np.random.default_rng(0)
    # 40 vectors that are all equally good (0.6) on 21 QGs, up to per-QG noise: the best
    # in-sample mean is luck, and only the cross-fitted estimate says so.
    # Averaged over 20 draws: in-sample about 0.07 too high, cross-fitted about right.
    fits = [
        crossfit(0.6 + rng.normal(scale=0.2, size=(40, 21)), n_folds=5, seed=s) for s in range(20)
    ]
    in_sample, estimate = np.mean([f.in_sample for f in fits]), np.mean([f.estimate for f in fits])
    assert in_sample > 0.65 and abs(estimate - 0.6) < 0.02
    assert sum(f.estimate < f.in_sample for f in fits) >= 18
    # One vector really better: every fold finds it, and the two scores agree.
    per_group = 0.6 + rng.normal(scale=0.05, size=(40, 21))
    per_group[17] += 0.2
    real = crossfit(per_group, n_folds=5, seed=0)
    assert real.fold_choices.tolist() == [17] * 5 and real.in_sample_choice == 17
    assert real.estimate == pytest.approx(real.in_sample)


def _member(folder: Path, prepared, vali: np.ndarray, test: np.ndarray, data=DATA) -> Path:
    """A finished baseline run whose scores.npz holds the given scores."""
    _, resolved = load_config(EnsembleConfig, [*data, "runs=[a,b]"])
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    save_scores(folder, prepared, vali, test)
    (folder / "report.json").write_text(json.dumps({"stage": "baseline", "method": "gbdt"}))
    (folder / "DONE").write_text("")
    return folder


def test_crossfit_ensemble_reports_the_honest_score(tmp_path) -> None:
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]"])
    prepared = prepare_data(cfg)
    rng = np.random.default_rng(0)
    vali_y, test_y, offsets = prepared.vali.labels, prepared.test.labels, prepared.vali.offsets
    # A: the labels plus noise, on vali and test alike. B: noise that ranks 4 vali QGs perfectly.
    noisy_a = vali_y + rng.normal(scale=1.5, size=len(vali_y))
    a = _member(tmp_path / "a", prepared, noisy_a, test_y + rng.normal(scale=1.5, size=len(test_y)))
    b_vali = rng.normal(size=len(vali_y))
    b_vali[: offsets[4]] = vali_y[: offsets[4]]
    b = _member(tmp_path / "b", prepared, b_vali, rng.normal(size=len(test_y)))
    ens = ["ensemble", *DATA, f"runs=[{a},{b}]", "normalize=rank"]
    grid = run([*ens, f"run_dir={tmp_path / 'grid'}"])
    stack = run([*ens, "weights=crossfit", f"run_dir={tmp_path / 'stack'}"])
    fit, vali = stack["crossfit"], stack["metrics"]["vali"]
    # The in-sample score is the grid's; the reported (chosen-by) score is the held-out one.
    assert vali["in_sample_ndcg@5"] == pytest.approx(grid["metrics"]["vali"]["ndcg@5"])
    assert fit["in_sample_weights"] == pytest.approx(list(grid["weights"].values()))
    assert vali["ndcg@5"] == pytest.approx(fit["vali_ndcg@5"])
    assert vali["ndcg@5"] < vali["in_sample_ndcg@5"] - 0.02
    # The weights are the mean of the five fold choices, and lean more on A than the grid's.
    assert fit["folds"] == 5 and len(fit["fold_weights"]) == 5
    weights = list(stack["weights"].values())
    assert weights == pytest.approx(np.mean(fit["fold_weights"], axis=0).tolist())
    assert weights[0] > grid["weights"][str(a)] and sum(weights) == pytest.approx(1.0)
    assert stack["method"] == "stack:gbdt,gbdt" and stack["group"] == "hybrid"
    # Seeded: the same seed gives the same folds and weights; the vali scores kept are those
    # the report scored (out of fold).
    again = run([*ens, "weights=crossfit", f"run_dir={tmp_path / 'again'}"])
    assert again["crossfit"] == fit and again["weights"] == stack["weights"]
    with np.load(tmp_path / "stack" / "scores.npz") as saved:
        mixed = saved["vali"]
        assert saved["vali_labels"].tolist() == vali_y.tolist() and saved["vali_labeled"].all()
    with np.load(tmp_path / "grid" / "scores.npz") as saved:
        assert not np.allclose(mixed, saved["vali"])
    # The grid's in-sample choice keeps every vector's per-QG vali (trials.npz): select
    # rule=crossfit cross-fits it into the stack's honest score; the stack keeps none.
    _, per_vector = read_trial_scores(tmp_path / "grid")
    tried = [t["vali_ndcg@5"] for t in grid["tried"]]
    assert np.nanmean(per_vector, axis=1) == pytest.approx(tried)
    assert crossfit(per_vector, n_folds=5, seed=0).estimate == pytest.approx(fit["vali_ndcg@5"])
    assert read_trial_scores(tmp_path / "stack") is None


def test_crossfit_config_and_names(tmp_path) -> None:
    with pytest.raises(UserError, match="crossfit_folds must be 2 or more"):
        load_config(EnsembleConfig, [*DATA, "runs=[a,b]", "weights=crossfit", "crossfit_folds=1"])
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]", "weights=crossfit"])
    assert cfg.mix_kind == "ensemble" and cfg.identity().model.startswith("ensemble:")
    cfg, _ = load_config(
        EnsembleConfig, [*DATA, "runs=[a,b]", "weights=crossfit", "normalize=rank"]
    )
    assert cfg.mix_kind == "stack" and cfg.identity().model == "stack:a,b"
    assert model_group("stack:gbdt,catboost") == "hybrid"  # a stack is never one family's model
    assert model_group("ensemble:gbdt,catboost") == "gbdt"
    assert [str(m) for m in ModelName.parse("stack:gbdt,resnet").members] == ["gbdt", "resnet"]
    with pytest.raises(UserError, match="stack:<model>,<model>"):
        model_group("stack:gbdt")
    # Too few labeled vali QGs to cross-fit: one message naming the key.
    few = [*DATA, "scarcity.fraction=0.03", "scarcity.val=same"]  # 1 labeled vali QG of 30
    prepared = prepare_data(load_config(EnsembleConfig, [*few, "runs=[a,b]"])[0])
    y_vali, y_test = prepared.vali.labels + 0.0, prepared.test.labels + 0.0
    members = [_member(tmp_path / n, prepared, y_vali, y_test, few) for n in ("a", "b")]
    with pytest.raises(UserError, match="weights=crossfit: cross-fitting needs 2 or more"):
        run(["ensemble", *few, f"runs=[{members[0]},{members[1]}]", "weights=crossfit",
             f"run_dir={tmp_path / 'e'}"])  # fmt: skip
