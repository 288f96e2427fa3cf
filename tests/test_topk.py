"""The vali-best k members averaged, k cross-fitted (``weights=topk``, the ``topk:`` model).

By hand on per-QG matrices: the order, a dominant member alone, two complementary members
together; the fixture where the vali argmax overfits (a member that wins a few vali QGs by luck
tops the in-sample order, and averaging keeps the real one in); then the ensemble end to end:
the reported vali score is out of fold, the weights are equal on the chosen runs, the same seed
gives the same run, and a sweep plans ``topk:`` with its options.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_crossfit import DATA, _member

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.ensembles.config import MIX_OPTIONS, EnsembleConfig
from scarce_ltr.models.names import ModelName, model_group
from scarce_ltr.search.topk import choose_members, order_members, top_k, weights_of


def _mean_mix(per_group: np.ndarray, gain: float = 0.0):
    """Per-QG value of a mix: the members' mean, plus ``gain`` for a mix of several."""
    return lambda members: per_group[list(members)].mean(axis=0) + gain * (len(members) > 1)


def test_order_and_weights() -> None:
    values = np.array([[0.2, 0.4, np.nan], [0.5, 0.1, np.nan], [0.3, 0.3, np.nan]])
    assert order_members(values, np.array([True, True, False])) == [0, 1, 2]  # 0.3 each: a tie
    assert order_members(values, np.array([True, False, False])) == [1, 2, 0]
    assert order_members(values, np.array([False, True, False])) == [0, 2, 1]
    assert weights_of((2, 0), 4).tolist() == [0.5, 0.0, 0.5, 0.0]


def test_a_dominant_member_is_kept_alone() -> None:
    values = np.array([[0.9] * 8, [0.5] * 8, [0.4] * 8])
    fit = top_k(values, _mean_mix(values), n_folds=4, seed=0)
    assert fit.members == (0,) and fit.k == 1
    assert fit.held_out_by_k == pytest.approx([0.9, 0.7, 0.6])
    assert fit.estimate == pytest.approx(0.9) and fit.in_sample == pytest.approx(0.9)
    assert fit.fold_members == [(0,)] * 4 and sorted(np.bincount(fit.fold_of_group)) == [2] * 4


def test_complementary_members_are_averaged() -> None:
    # Two members of 0.6 whose average is worth 0.75 on every QG (their errors differ).
    values = np.array([[0.6] * 6, [0.6] * 6, [0.2] * 6])
    fit = top_k(values, _mean_mix(values, gain=0.15), n_folds=3, seed=0)
    assert fit.members == (0, 1) and fit.held_out_by_k[:2] == pytest.approx([0.6, 0.75])
    assert fit.estimate == pytest.approx(0.75)


def test_averaging_holds_where_the_vali_argmax_overfits() -> None:
    # Member 1 is the real one (0.6 on every QG); member 0 is noise that wins 3 of 20 QGs by
    # a mile: the in-sample argmax picks it. Cross-fitted, k = 2 keeps member 1 in the mix.
    values = np.array([[0.3] * 20, [0.6] * 20])
    values[0, :3] = 3.0  # an impossible NDCG, as a stand-in for a few lucky QGs
    mix = _mean_mix(values)
    assert order_members(values, np.ones(20, dtype=bool))[0] == 0  # the argmax's pick
    fit = top_k(values, mix, n_folds=5, seed=0)
    assert fit.members == (0, 1)
    # Out of fold, the folds whose held-out QGs hold no lucky one see member 1 alone win.
    assert fit.estimate < fit.in_sample
    members, by_k = choose_members(values, mix, np.ones(20, dtype=bool), n_folds=5, seed=0)
    assert members == fit.members and len(by_k) == 2
    with pytest.raises(ValueError, match="2 or more labeled vali QGs"):
        top_k(values[:, :1], mix, n_folds=5, seed=0)


def test_topk_ensemble_end_to_end(tmp_path) -> None:
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]"])
    prepared = prepare_data(cfg)
    rng = np.random.default_rng(0)
    vali_y, test_y = prepared.vali.labels, prepared.test.labels
    runs = []
    for name, scale in (("a", 1.0), ("b", 1.5), ("c", 50.0)):  # c is noise
        vali = vali_y + rng.normal(scale=scale, size=len(vali_y))
        test = test_y + rng.normal(scale=scale, size=len(test_y))
        runs.append(_member(tmp_path / name, prepared, vali, test))
    ens = ["ensemble", *DATA, f"runs=[{','.join(map(str, runs))}]", *MIX_OPTIONS["topk"]]
    report = run([*ens, f"run_dir={tmp_path / 'topk'}"])
    fit, vali = report["topk"], report["metrics"]["vali"]
    assert report["method"] == "topk:gbdt,gbdt,gbdt" and report["group"] == "hybrid"
    assert report["weighting"] == "topk" and fit["folds"] == 5 and fit["k"] == len(fit["members"])
    weights = list(report["weights"].values())
    assert 2 not in fit["members"] and weights[2] == 0.0  # the noise is left out
    assert weights == pytest.approx(weights_of(tuple(fit["members"]), 3).tolist())
    assert vali["ndcg@5"] == pytest.approx(fit["vali_ndcg@5"])
    assert vali["in_sample_ndcg@5"] == pytest.approx(fit["in_sample_vali_ndcg@5"])
    assert len(report["tried"]) == 3
    again = run([*ens, f"run_dir={tmp_path / 'again'}"])
    assert again["topk"] == fit and again["weights"] == report["weights"]
    for split in ("vali", "test"):
        assert again["metrics"][split]["ndcg@5"] == report["metrics"][split]["ndcg@5"]


def test_topk_names_and_sweep_options() -> None:
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]", *MIX_OPTIONS["topk"]])
    assert cfg.mix_kind == "topk" and cfg.identity().model == "topk:a,b"
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]", "weights=topk"])
    assert cfg.identity().model == "ensemble:a,b"  # z-scores: not the sweep's topk model
    name = ModelName.parse("topk:gbdt,simclr-rank+full")
    assert name.mixes and [str(m) for m in name.members] == ["gbdt", "simclr-rank+full"]
    assert str(name) == "topk:gbdt,simclr-rank+full" and model_group(str(name)) == "hybrid"
    assert model_group("topk:gbdt,catboost") == "hybrid"
