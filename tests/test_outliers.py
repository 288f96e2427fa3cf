"""Outlier QG detection: hand-built histograms with known thresholds, QG flagging, the gap
search, the k-NN detector, the qid list, the dispatcher, and the paper's rule on OHSUMED."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scarce_ltr.data.outliers import METHODS, detect_outlier_groups, outlier_groups_from_qids
from scarce_ltr.data.outliers.histogram import (
    _histogram,
    choose_gap,
    histogram_bounds,
    outlier_groups_from_bounds,
)
from scarce_ltr.data.outliers.knn import knn_outlier_groups
from scarce_ltr.data.ranking_split import RankingSplit

OHSUMED = Path(__file__).parents[1].parent / "shared/data/ohsumed-letor3/Fold1"
BELOW = np.nextafter  # readability: BELOW(x, -inf) is the float just below x


def _column(counts: dict[int, int], *, n: int, n_bins: int) -> np.ndarray:
    """``[n]`` values whose ``n_bins``-bin histogram has ``counts[j]`` items in bin ``j``.

    Bin 0 takes the remaining items, at 0.0, and the last bin's items sit at ``n_bins``, so the
    range is ``[0, n_bins]`` and bin ``j`` is ``[j, j + 1)``; other items sit at bin centres.
    """
    assert counts.get(n_bins - 1, 0) > 0
    values = [np.full(n - sum(counts.values()), 0.0)]
    for j, c in counts.items():
        values.append(np.full(c, float(n_bins) if j == n_bins - 1 else j + 0.5))
    return np.concatenate(values)


def _split(features: np.ndarray, sizes: list[int], name: str = "test") -> RankingSplit:
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    features = np.ascontiguousarray(features, dtype=np.float32)
    labels = np.zeros(len(features), dtype=np.float32)
    return RankingSplit(
        features, labels, offsets, np.arange(len(sizes), dtype=np.int64) + 100, name
    )


def test_histogram_matches_numpy_on_continuous_data():
    x = np.random.default_rng(0).standard_t(3, size=(3000, 4)).astype(np.float32)
    _, counts = _histogram(x, n_bins=100)
    for f in range(4):
        np.testing.assert_array_equal(counts[f], np.histogram(x[:, f], bins=100)[0])


def test_run_of_exactly_gap_empty_bins_qualifies_and_one_fewer_does_not():
    # Feature 0: empty bins 15..18 (a run of 4); feature 1: empty bins 16..18 (a run of 3).
    # Both keep 10 of 1510 items (< 1%) in the last bin.
    bulk0 = {j: 100 for j in range(1, 15)}
    bulk1 = {j: 90 for j in range(1, 16)}
    reference = np.stack(
        [
            _column({**bulk0, 19: 10}, n=1510, n_bins=20),
            _column({**bulk1, 19: 10}, n=1510, n_bins=20),
        ],
        axis=1,
    )
    lower, upper = histogram_bounds(reference, gap=4, n_bins=20)
    # The threshold is the right edge of the 4th empty bin (bin 18), i.e. 19.0: a value on the
    # edge is an outlier, one in the empty bins before it is not.
    assert upper[0] == BELOW(19.0, -np.inf)
    assert 19.0 > upper[0] and not 18.99 > upper[0]
    assert upper[1] == np.inf
    np.testing.assert_array_equal(lower, [-np.inf, -np.inf])  # leftward runs hold > 1% beyond
    _, upper3 = histogram_bounds(reference, gap=3, n_bins=20)
    assert upper3[0] == BELOW(18.0, -np.inf)  # the run reaches 3 at bin 17
    assert upper3[1] == BELOW(19.0, -np.inf)


def test_run_with_a_heavy_tail_is_skipped_and_the_scan_goes_on():
    # Bulk in bins 0..9, empty 10..14, 30 items (3%) in bin 15, empty 16..38, 5 items in bin 39.
    counts = {j: 100 for j in range(1, 10)} | {15: 30, 39: 5}
    reference = _column(counts, n=1000, n_bins=40)[:, None]
    lower, upper = histogram_bounds(reference, gap=5, n_bins=40)
    # The first run (10..14) has 35 items beyond it, 3.5%: not a cut. The second run reaches 5
    # empty bins at bin 20, with 5 items (0.5%) beyond.
    assert upper[0] == BELOW(21.0, -np.inf)
    assert lower[0] == -np.inf
    # Without the far 5 items the 3% bump is the end of the range and nothing is cut.
    bump_only = _column({j: 100 for j in range(1, 10)} | {15: 30}, n=1000, n_bins=16)[:, None]
    assert histogram_bounds(bump_only, gap=5, n_bins=16)[1][0] == np.inf


def test_left_tail_threshold_is_the_left_edge_of_the_gap_th_empty_bin_from_the_right():
    # 5 items (0.5%) at 0.0 in bin 0, empty bins 1..6, bulk in bins 7..19.
    counts = {j: 82 for j in range(7, 19)} | {19: 11}
    reference = _column(counts, n=1000, n_bins=20)[:, None]
    assert (reference == 0.0).sum() == 5
    lower, upper = histogram_bounds(reference, gap=4, n_bins=20)
    assert lower[0] == 3.0  # empty bins 6, 5, 4, 3 counted from the right
    assert upper[0] == np.inf  # rightward, the run 1..6 has the bulk beyond it
    assert 2.99 < lower[0] and not 3.0 < lower[0]
    assert histogram_bounds(reference, gap=6, n_bins=20)[0][0] == 1.0
    assert histogram_bounds(reference, gap=7, n_bins=20)[0][0] == -np.inf


def test_constant_feature_and_bad_gap():
    reference = np.stack([np.full(50, 3.0), np.arange(50.0)], axis=1)
    lower, upper = histogram_bounds(reference, gap=1)
    assert lower[0] == -np.inf and upper[0] == np.inf
    with pytest.raises(ValueError, match="gap"):
        histogram_bounds(reference, gap=0)
    with pytest.raises(ValueError, match="NaN"):
        histogram_bounds(np.array([[0.0], [np.nan]]), gap=1)


def test_outlier_groups_from_bounds_flags_any_item_beyond_either_bound():
    features = np.array([[0.5, 0.0], [0.2, 9.0], [-1.0, 0.0], [0.5, 5.0], [0.5, 5.1], [1.0, 1.0]])
    split = _split(features, [1, 1, 0, 1, 2, 1])  # QG 2 is empty
    lower, upper = np.array([0.0, -np.inf]), np.array([1.0, 5.0])
    mask = outlier_groups_from_bounds(split, lower, upper)
    np.testing.assert_array_equal(mask, [False, True, False, True, True, False])
    with pytest.raises(ValueError, match="features"):
        outlier_groups_from_bounds(split, lower[:1], upper[:1])


def _heavy_tailed(n_groups: int, seed: int) -> tuple[np.ndarray, RankingSplit]:
    rng = np.random.default_rng(seed)
    reference = rng.standard_t(2, size=(3000, 5))
    test = _split(rng.standard_t(2, size=(n_groups * 4, 5)), [4] * n_groups)
    return reference, test


@pytest.mark.parametrize("target", [0.01, 0.05, 0.2])
def test_choose_gap_picks_the_share_closest_to_target_and_matches_the_direct_rule(target):
    reference, test = _heavy_tailed(300, seed=1)
    gap, mask = choose_gap(reference, test, target_share=target, gaps=range(1, 40))
    masks = {
        g: outlier_groups_from_bounds(test, *histogram_bounds(reference, gap=g))
        for g in range(1, 40)
    }
    distance = {g: abs(m.mean() - target) for g, m in masks.items()}
    best = min(distance.values())
    assert gap == max(g for g, dist in distance.items() if dist <= best + 1e-12)
    np.testing.assert_array_equal(mask, masks[gap])
    shares = [masks[g].mean() for g in range(1, 40)]
    assert shares == sorted(shares, reverse=True)  # the monotonicity choose_gap relies on


def test_choose_gap_prefers_the_largest_gap_on_ties():
    reference, test = _heavy_tailed(50, seed=2)
    # With 100 bins no run of 99 empty bins exists, so many large gaps tie at share 0.
    gap, mask = choose_gap(reference, test, target_share=0.0)
    assert gap == 99 and not mask.any()


def test_knn_flags_a_planted_far_away_group():
    rng = np.random.default_rng(3)
    reference = rng.standard_normal((500, 4))
    features = rng.standard_normal((150, 4))
    features[87] += 40.0  # an item of QG 17
    split = _split(features, [5] * 30)
    mask = knn_outlier_groups(reference, split, target_share=0.01, k=5)
    np.testing.assert_array_equal(np.flatnonzero(mask), [17])


def test_knn_on_its_own_reference_matches_brute_force_without_self_matches():
    rng = np.random.default_rng(4)
    split = _split(rng.standard_normal((120, 3)), [6] * 20)
    distances = np.linalg.norm(split.features[:, None] - split.features[None], axis=-1)
    np.fill_diagonal(distances, np.inf)
    item_scores = np.sort(distances, axis=1)[:, :3].mean(axis=1)
    group_scores = item_scores.reshape(20, 6).max(axis=1)
    expected = np.sort(np.argsort(-group_scores)[:6])
    mask = knn_outlier_groups(split.features, split, target_share=0.3, k=3)
    np.testing.assert_array_equal(np.flatnonzero(mask), expected)


def test_knn_self_exclusion_keeps_exact_duplicates_as_neighbours():
    rng = np.random.default_rng(5)
    features = rng.standard_normal((40, 2))
    features[0] = features[1] = 100.0  # QG 0: a far pair of identical items
    features[12] = 5.0  # QG 3: one moderately far item
    split = _split(features, [4] * 10)
    # Each twin's nearest other item is its twin (distance 0), so QG 3 is the outlier.
    mask = knn_outlier_groups(split.features, split, target_share=0.1, k=1)
    np.testing.assert_array_equal(np.flatnonzero(mask), [3])
    # Subsampling the reference still finds the far pair (k=5 reaches past the twin).
    mask = knn_outlier_groups(split.features, split, k=5, max_reference=30, seed=1)
    np.testing.assert_array_equal(np.flatnonzero(mask), [0])


def test_outlier_groups_from_qids():
    split = _split(np.zeros((6, 2)), [2, 2, 2])  # qids 100, 101, 102
    np.testing.assert_array_equal(outlier_groups_from_qids(split, [102, 100]), [1, 0, 1])
    with pytest.raises(ValueError, match=r"not in split 'test': 7, 99"):
        outlier_groups_from_qids(split, [99, 100, 7])


def test_detect_outlier_groups_dispatches_and_reports():
    reference, test = _heavy_tailed(100, seed=6)
    mask, info = detect_outlier_groups(method="histogram", reference=reference, split=test)
    gap, expected = choose_gap(reference, test)
    np.testing.assert_array_equal(mask, expected)
    assert info == {"method": "histogram", "gap": gap, "count": mask.sum(), "share": mask.mean()}
    mask, info = detect_outlier_groups(method="histogram", reference=reference, split=test, gap=3)
    assert info["gap"] == 3
    np.testing.assert_array_equal(
        mask, outlier_groups_from_bounds(test, *histogram_bounds(reference, gap=3))
    )
    mask, info = detect_outlier_groups(method="knn", reference=reference, split=test)
    assert info["count"] == 1 and info["gap"] is None
    mask, info = detect_outlier_groups(method="qids", reference=None, split=test, qids=[105])
    assert np.flatnonzero(mask).tolist() == [5]
    mask, info = detect_outlier_groups(method="none", reference=None, split=test)
    assert not mask.any() and info["count"] == 0
    with pytest.raises(ValueError, match="valid: histogram, knn, qids, none"):
        detect_outlier_groups(method="iforest", reference=reference, split=test)
    with pytest.raises(ValueError, match="needs a list"):
        detect_outlier_groups(method="qids", reference=None, split=test)
    assert set(METHODS) == {"histogram", "knn", "qids", "none"}


@pytest.mark.skipif(
    not (OHSUMED / "vali.txt.gz").exists() or not (OHSUMED / "test.txt.gz").exists(),
    reason=f"OHSUMED Fold1 vali/test files not found under {OHSUMED}",
)
def test_choose_gap_on_ohsumed_fold1(capsys):
    from scarce_ltr.data.letor import read_letor

    vali, test = read_letor(OHSUMED / "vali.txt.gz"), read_letor(OHSUMED / "test.txt.gz")
    assert vali.n_features == test.n_features == 45
    gap, mask = choose_gap(vali.features, test, target_share=0.01)
    share = mask.mean()
    assert 0.0 <= share <= 0.10
    with capsys.disabled():
        print(f"\nOHSUMED Fold1: G={gap}, outlier QGs {mask.sum()}/{test.n_groups} = {share:.3f}")
