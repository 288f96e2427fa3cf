"""GBDT baselines: pseudo-label binning, PCA features, grid selection on vali only, the project's
NDCG against LightGBM's, every ``./run.sh baseline gbdt*`` command end to end, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.teachers import pseudo_labels, with_pseudo_labels
from scarce_ltr.search.selection import select_best
from scarce_ltr.trees.lightgbm import grid as gbdt_grid
from scarce_ltr.trees.lightgbm.config import PCA_METHODS, GBDTOptions
from scarce_ltr.trees.lightgbm.grid import CENTRE, capped, grid_points, run_grid
from scarce_ltr.trees.lightgbm.lightgbm_ranker import (
    BoosterOptions,
    LeafSettings,
    RankingData,
    check_labels,
    fit,
    lightgbm_params,
    min_data_cap,
)
from scarce_ltr.trees.lightgbm.semi_supervised import PCAFeatures

METHODS = ("gbdt", "gbdt-pseudo", "gbdt-pca", "gbdt-pca-pseudo")
TINY = [
    "data.synthetic.n_train_groups=40",
    "data.synthetic.n_vali_groups=15",
    "data.synthetic.n_test_groups=15",
    "logger=none",
    "gbdt.num_threads=1",
    "gbdt.max_rounds=20",
    "gbdt.early_stopping_rounds=10",
]
TRAINING = BoosterOptions(
    learning_rate=0.1, rounds=15, early_stopping_rounds=15, num_threads=1, seed=0
)


def split_of(sizes: list[int], *, seed: int, n_features: int = 5) -> RankingSplit:
    """Random features; labels 0..4 loosely tied to feature 0."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    x = rng.normal(size=(int(offsets[-1]), n_features)).astype(np.float32)
    y = np.clip(np.round(x[:, 0] + 0.7 * rng.normal(size=len(x)) + 1.5), 0, 4)
    return RankingSplit(x, y.astype(np.float32), offsets, np.arange(len(sizes)), "split")


def baseline(tmp_path: Path, method: str, *overrides: str) -> dict | None:
    pca = ["gbdt.pca_components=[2,3]"] if method in PCA_METHODS else []  # refused by the others
    return run(["baseline", method, *TINY, *pca, f"run_dir={tmp_path / method}", *overrides])


# --- pseudo-labels ----------------------------------------------------------------------------


def test_pseudo_labels_equal_width_hand_values() -> None:
    # 0..30 over the range [0, 30] cuts into 31 bins of width 30/31: each score its own level.
    np.testing.assert_array_equal(pseudo_labels(np.arange(31.0)), np.arange(31))
    np.testing.assert_array_equal(pseudo_labels(np.array([-1.0, 0.0, 1.0])), [0, 15, 30])
    # Ties share a level, the maximum gets the top level, order does not matter.
    np.testing.assert_array_equal(pseudo_labels(np.array([2.0, 1.0, 1.0, 3.0])), [15, 0, 0, 30])
    np.testing.assert_array_equal(pseudo_labels(np.array([0.0, 0.1, 10.0]), levels=5), [0, 0, 4])
    assert pseudo_labels(np.full(4, 7.5)).tolist() == [0, 0, 0, 0]  # constant: no signal
    assert pseudo_labels(np.zeros(0)).shape == (0,)


def test_pseudo_labels_quantile_bins_have_equal_counts() -> None:
    scores = np.random.default_rng(0).permutation(62).astype(float)
    levels = pseudo_labels(scores, binning="quantile")
    assert np.bincount(levels.astype(int)).tolist() == [2] * 31
    assert np.all(np.diff(levels[np.argsort(scores)]) >= 0)
    np.testing.assert_array_equal(
        pseudo_labels(np.array([5.0, 5.0, 5.0, 9.0]), levels=2, binning="quantile"), [0, 0, 0, 1]
    )


def test_pseudo_labels_never_read_hidden_labels() -> None:
    train = split_of([3, 4, 2], seed=0)
    labeled = np.array([True, False, True])
    pseudo = np.array([30.0, 0.0, 7.0, 7.0])
    hidden = train.labels.copy()
    hidden[3:7] = 99.0  # whatever the unlabeled QG's true labels are
    a = with_pseudo_labels(train, labeled, pseudo)
    b = with_pseudo_labels(train.with_labels(hidden), labeled, pseudo)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.labels[3:7], pseudo)
    np.testing.assert_array_equal(a.labels[:3], train.labels[:3])


# --- PCA --------------------------------------------------------------------------------------


def test_pca_columns_are_appended_identically_to_every_split() -> None:
    train, vali, test = split_of([20, 30], seed=1), split_of([6, 5], seed=2), split_of([8], seed=3)
    # One item present in vali and test with the same features.
    test.features[3] = vali.features[7]
    pca = PCAFeatures(train.features, max_components=4, seed=0)
    out = {name: pca.append(s, 3) for name, s in (("train", train), ("vali", vali), ("test", test))}
    for name, split in (("train", train), ("vali", vali), ("test", test)):
        assert out[name].n_features == 5 + 3
        np.testing.assert_array_equal(out[name].features[:, :5], split.features)
        want = pca.pca.transform(split.features.astype(np.float64))[:, :3]
        np.testing.assert_allclose(out[name].features[:, 5:], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["test"].features[3], out["vali"].features[7])
    # The first k directions do not depend on how many are fitted: a smaller PCA is a slice.
    small = PCAFeatures(train.features, max_components=2, seed=0)
    np.testing.assert_allclose(small.pca.components_, pca.pca.components_[:2], atol=1e-6)
    with pytest.raises(ValueError, match="6 PCA components"):
        PCAFeatures(train.features, max_components=6, seed=0)


# --- grid and selection -----------------------------------------------------------------------


def test_paper_grid_is_one_at_a_time_around_the_defaults_and_the_cap_merges_points() -> None:
    points = grid_points(GBDTOptions())
    assert points[0] == CENTRE and len(points) == 7  # 9 choices, the default counted once
    assert len(grid_points(GBDTOptions(grid="full"))) == 27
    assert min_data_cap(240) == 60 and min_data_cap(3) == 1
    trained = capped(points, 60)
    assert [p.min_data_in_leaf for p, _ in trained] == [20, 20, 20, 60, 20, 20]
    assert (LeafSettings(31, 60, 1.0), 60) in trained  # 200 capped to 60 merges with 60


def test_selection_uses_validation_only_even_when_test_disagrees() -> None:
    vali = [0.50, 0.70, float("nan"), 0.70, 0.65]
    test = [0.90, 0.60, 0.99, 0.80, 0.95]  # test would pick point 2
    assert select_best(vali) == 1  # the first of the vali-best, test never enters
    assert int(np.argmax(test)) != select_best(vali)
    assert select_best([float("nan")] * 3) == 0


def test_run_grid_keeps_the_vali_best_booster_when_test_prefers_another(monkeypatch) -> None:
    train, vali, test = (
        split_of([15] * 20, seed=4),
        split_of([12] * 8, seed=5),
        split_of([12] * 8, seed=6),
    )
    data = RankingData(train=train, vali=vali, num_threads=1)
    fits = []

    def spy(*args, **kwargs):
        fits.append(fit(*args, **kwargs))
        return fits[-1]

    def ndcg(model, split):
        return mean_ndcg(
            model.predict(split.features, num_threads=1), split.labels, split.offsets, k=5
        )

    monkeypatch.setattr(gbdt_grid, "fit", spy)
    points = grid_points(
        GBDTOptions(
            grid="full", num_leaves=[2, 8], min_data_in_leaf=[5, 40], feature_fraction=[0.3, 1.0]
        )
    )
    outcome = run_grid(
        points,
        data=data,
        training=TRAINING,
        phase="labeled",
        pca_components=0,
        score_vali=lambda m: (ndcg(m, vali), None),
    )
    vali_scores = [ndcg(f, vali) for f in fits]
    test_scores = [ndcg(f, test) for f in fits]
    assert select_best(test_scores) != select_best(vali_scores)  # the case under test
    assert outcome.best == select_best(vali_scores)
    assert outcome.best_fit is fits[outcome.best]


def test_a_tree_still_splits_on_a_tiny_labeled_set() -> None:
    tiny = split_of([12, 12], seed=7)
    data = RankingData(train=tiny, vali=split_of([10], seed=8), num_threads=1)
    assert data.cap == 6 and data.dataset_params["min_data_in_bin"] == 3
    (leaves, asked), *_ = capped([CENTRE], data.cap)
    model = fit(leaves, TRAINING, data)
    assert asked == 20 and leaves.min_data_in_leaf == 6
    assert model.booster.dump_model()["tree_info"][0]["num_leaves"] > 1


def test_project_ndcg_equals_lightgbm_ndcg_under_policy_one() -> None:
    train, vali = split_of(list(range(3, 40)), seed=9), split_of([12, 3, 1, 20, 8, 15], seed=10)
    vali.labels[:12] = 0.0  # a QG without relevant item: LightGBM counts it as 1
    data = RankingData(train=train, vali=vali, num_threads=1)
    params = lightgbm_params(CENTRE, TRAINING, data)
    params["min_data_in_leaf"] = 5
    history: dict = {}
    booster = lgb.train(
        params,
        data.train,
        num_boost_round=12,
        valid_sets=[data.vali],
        valid_names=["vali"],
        callbacks=[lgb.record_evaluation(history)],
    )
    recorded = history["vali"]["ndcg@5"]
    ours = {policy: [] for policy in ("one", "skip")}
    for rounds in range(1, 13):
        scores = booster.predict(vali.features, num_iteration=rounds)
        for policy in ours:
            ours[policy].append(mean_ndcg(scores, vali.labels, vali.offsets, k=5, policy=policy))
    np.testing.assert_allclose(ours["one"], recorded, rtol=0, atol=1e-9)
    # Early stopping on LightGBM's metric picks the round the project's `skip` mean picks.
    assert int(np.argmax(recorded)) == int(np.argmax(ours["skip"]))
    early = fit(LeafSettings(31, 5, 1.0), TRAINING, data)
    assert early.best_rounds == int(np.argmax(recorded[:15])) + 1


# --- end to end -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_every_gbdt_command_end_to_end(tmp_path: Path, method: str, capsys) -> None:
    report = baseline(tmp_path, method, "scarcity.fraction=0.25")
    out = tmp_path / method
    assert (out / "DONE").is_file() and (out / "config.yaml").is_file()
    assert (out / "model.txt").is_file() and (out / "pca.npz").is_file() == ("pca" in method)
    assert json.loads((out / "report.json").read_text()) == json.loads(json.dumps(report))
    for key in (
        "stage",
        "method",
        "metrics",
        "selected",
        "grid",
        "seconds",
        "label_setting",
        "seed",
        "git",
        "n_train_items",
    ):
        assert key in report
    assert report["stage"] == "baseline" and report["method"] == method
    assert report["label_setting"] == "frac=0.25"
    assert set(report["metrics"]) >= {"vali", "test"}
    assert "outlier_ndcg@5" in report["metrics"]["test"]
    selected = report["selected"]
    assert selected["vali_ndcg@5"] == pytest.approx(report["metrics"]["vali"]["ndcg@5"])
    assert selected["vali_ndcg@5"] == max(
        p["vali_ndcg@5"] for p in report["grid"] if p["phase"] == selected["phase"]
    )
    assert {p["pca_components"] for p in report["grid"]} == ({2, 3} if "pca" in method else {0})
    if "pseudo" in method:
        assert selected["phase"] == "pseudo" and report["teacher"]["phase"] == "labeled"
        assert len(report["pseudo_labels"]["level_counts"]) == 31
    scores = np.load(out / "scores.npz")
    assert len(scores["test"]) == scores["test_offsets"][-1]
    assert len(scores["vali"]) == scores["vali_offsets"][-1]
    assert baseline(tmp_path, method, "scarcity.fraction=0.25") is None  # DONE: skipped
    assert "skipped" in capsys.readouterr().err


def test_runs_are_deterministic_and_binary_labels_work(tmp_path: Path) -> None:
    options = ["scarcity.binary_tau=2.5", "gbdt.feature_fraction=[0.5]"]
    a = baseline(tmp_path / "a", "gbdt-pseudo", *options)
    b = baseline(tmp_path / "b", "gbdt-pseudo", *options)
    assert a["label_setting"] == "tau=2.5"
    assert json.dumps(a["metrics"]) == json.dumps(b["metrics"])  # NaN != NaN in a dict compare
    assert [p["rounds"] for p in a["grid"]] == [p["rounds"] for p in b["grid"]]
    sa = np.load(tmp_path / "a" / "gbdt-pseudo" / "scores.npz")
    sb = np.load(tmp_path / "b" / "gbdt-pseudo" / "scores.npz")
    np.testing.assert_array_equal(sa["test"], sb["test"])


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "message"),
    [(31.0, "above 30"), (-1.0, "not a relevance level"), (0.5, "not a relevance level")],
)
def test_labels_lightgbm_cannot_take_are_refused(label: float, message: str) -> None:
    split = split_of([4, 4], seed=0)
    check_labels(split.with_labels(np.full(8, 30.0, dtype=np.float32)), "train")  # 30 is fine
    split.labels[2] = label
    with pytest.raises(UserError, match=message):
        check_labels(split, "train")


def test_a_letor_file_with_label_31_stops_with_a_clear_message(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for name in ("train", "vali", "test"):
        lines = [
            f"{int(rng.integers(0, 3))} qid:{q} "
            + " ".join(f"{j}:{rng.random():.3f}" for j in (1, 2, 3))
            for q in range(6)
            for _ in range(5)
        ]
        if name == "train":
            lines[0] = "31" + lines[0][1:]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    # The data layer stops it first, at its line (the README's bad-input policy).
    with pytest.raises(UserError, match=r"train:1: label 31 is outside the relevance grades 0..30"):
        run(
            [
                "baseline",
                "gbdt",
                "data=letor",
                f"data.path={tmp_path}",
                "data.outliers.method=none",
                "logger=none",
                f"run_dir={tmp_path / 'run'}",
            ]
        )


def test_no_labeled_qg_with_a_relevant_item_stops(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="none has a relevant item"):
        baseline(tmp_path, "gbdt", "scarcity.binary_tau=50")


def test_bad_options_stop_with_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="gbdt.grid"):
        baseline(tmp_path, "gbdt", "gbdt.grid=huge")
    with pytest.raises(UserError, match="epochs must be >= 1"):
        baseline(tmp_path, "gbdt", "epochs=0")
    with pytest.raises(UserError, match="contradicts the command-line name 'gbdt'"):
        baseline(tmp_path, "gbdt", "method=lambdamart")
    with pytest.raises(UserError, match="unknown baseline 'lambdamart'"):
        baseline(tmp_path, "lambdamart")
    with pytest.raises(UserError, match="components"):
        baseline(tmp_path, "gbdt-pca", "gbdt.pca_components=[50]")
