"""The robust choice among models (search.robust_choice, reports.choice).

On per-QG fixtures where the vali argmax is a complex model with a tiny edge from a few QGs (and
a worse test score), the rule keeps the simpler model; where the complex model wins on most QGs,
it switches. The simplicity levels from names, per-QG vali NDCG read back from scores.npz, and
the per-unit study of a sweep's rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny import tiny_data

from scarce_ltr.core.config import load_config
from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.data.evaluation import save_scores, vali_metrics
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.models.names import model_group
from scarce_ltr.reports import stats
from scarce_ltr.reports.choice import (
    choose_robust,
    crossfit_per_group,
    simplicity,
    unit_study,
    vali_per_group,
)
from scarce_ltr.reports.choice_summary import html, setting_summary, text_lines
from scarce_ltr.search.robust_choice import keep_simpler
from scarce_ltr.search.trial_scores import read_trial_scores, write_trial_scores
from scarce_ltr.sweeps import select

N_GROUPS = 30
WRONG = 1 / np.log2(3)  # NDCG@5 of a 2-item QG (labels 1, 0) ranked backwards


def _ndcgs(right: set[int]) -> np.ndarray:
    return np.array([1.0 if g in right else WRONG for g in range(N_GROUPS)])


# The tree is right on QGs 0-19. The overfit model wins 3 QGs the tree loses and loses 2 it wins:
# the vali argmax by one QG. The clear winner is right on 28.
TREE = set(range(20))
OVERFIT = (TREE - {0, 1}) | {20, 21, 22}
CLEAR = set(range(28))
COMPLEX = "ensemble:gbdt,resnet"  # a mix: the most complex level


def test_keeps_the_simpler_model_unless_the_other_wins_clearly() -> None:
    tree, overfit, clear = _ndcgs(TREE), _ndcgs(OVERFIT), _ndcgs(CLEAR)
    kept = keep_simpler([tree, overfit], [0, 4])
    assert kept.argmax == 1 and kept.chosen == 0 and kept.n_groups == N_GROUPS
    (challenge,) = kept.challenges
    assert challenge.mean_diff > 0 and challenge.p > 0.2 and not challenge.switched
    switched = keep_simpler([tree, clear], [0, 4])
    assert switched.chosen == 1 and switched.challenges[0].p < 0.01
    # alpha is the bar: a lenient one lets the overfit model through.
    assert keep_simpler([tree, overfit], [0, 4], alpha=0.5).chosen == 1
    # Seeded: the same p every time; the level order, not the list order, decides.
    again = keep_simpler([overfit, tree], [4, 0])
    assert again.chosen == 1 and again.challenges[0].p == challenge.p
    # Within a level the argmax stands; each level's best challenges the incumbent in turn.
    chain = keep_simpler([tree, overfit, clear], [0, 1, 2])
    assert [c.switched for c in chain.challenges] == [False, True] and chain.chosen == 2
    assert keep_simpler([tree, overfit], [1, 1]).chosen == 1
    # A QG undefined for a candidate is left out of the comparison.
    with_nan = np.append(tree, np.nan), np.append(clear, 0.5)
    assert keep_simpler(list(with_nan), [0, 4]).n_groups == N_GROUPS
    with pytest.raises(ValueError, match="alpha"):
        keep_simpler([tree, clear], [0, 1], alpha=0.0)


def test_simplicity_levels_from_names() -> None:
    levels = {
        "gbdt": 0, "gbdt-pseudo": 0, "gbdt-optuna": 0, "catboost": 0, "xgboost": 0,
        "resnet": 1, "simclr-rank+full": 1, "simclr-rank@zero0.1+full": 1,
        "gbdt-ssl+simclr-rank": 2, "simclr-rank+simsiam+combine": 2, "resnet~gbdt-optuna": 2,
        "ensemble:gbdt,resnet": 3, "stack:gbdt,resnet": 3, "seed-ensemble:resnet": 3,
        "ensemble:gbdt,gbdt-optuna": 3,
    }  # fmt: skip
    assert {model: simplicity(model) for model in levels} == levels


def test_vali_per_group_from_scores(tmp_path) -> None:
    data = [*tiny_data(), "data.synthetic.n_vali_groups=20", "scarcity.fraction=0.5"]
    cfg, _ = load_config(CommonConfig, [*data, "scarcity.val=same"])
    prepared = prepare_data(cfg)
    scores = np.random.default_rng(0).normal(size=prepared.vali.n_items)
    save_scores(tmp_path, prepared, scores, np.zeros(prepared.test.n_items))
    qids, values = vali_per_group(tmp_path)
    labeled = prepared.labels.vali_labeled
    assert len(values) == labeled.sum() < prepared.vali.n_groups  # the labeled QGs only
    assert np.array_equal(qids, prepared.vali.qids[labeled])
    expected = vali_metrics(prepared, scores, cfg.metrics)["ndcg@5"]
    assert np.nanmean(values) == pytest.approx(expected)
    # A scores.npz written before vali_labels were kept: named, not guessed.
    with np.load(tmp_path / "scores.npz") as stored:
        old = {k: stored[k] for k in stored.files if k not in ("vali_labels", "vali_labeled")}
    np.savez(tmp_path / "scores.npz", **old)
    with pytest.raises(ValueError, match="before vali_labels"):
        vali_per_group(tmp_path)


def _run(folder: Path, right: set[int]) -> Path:
    """A run whose 2-item vali QGs are ranked right exactly on the QGs in ``right``."""
    folder.mkdir(parents=True)
    labels = np.tile([1.0, 0.0], N_GROUPS)
    vali = np.array([s for g in range(N_GROUPS) for s in ((1, 0) if g in right else (0, 1))])
    np.savez(
        folder / "scores.npz", vali=vali.astype(float), vali_labels=labels,
        vali_labeled=np.ones(N_GROUPS, dtype=bool), vali_offsets=np.arange(0, 2 * N_GROUPS + 1, 2),
        vali_qids=np.arange(N_GROUPS),
    )  # fmt: skip
    assert mean_ndcg(vali, labels, np.arange(0, 2 * N_GROUPS + 1, 2), k=5) == pytest.approx(
        _ndcgs(right).mean()
    )
    return folder


def _rows(tmp_path: Path, challenger: set[int], tests: dict[str, float]) -> list[dict]:
    rows = []
    for fold in (1, 2):
        for model, right in (("gbdt", TREE), (COMPLEX, challenger)):
            folder = _run(tmp_path / f"{model.replace(':', '-')}-{fold}", right)
            rows.append(
                {"dataset": "ohsumed", "setting": "frac=0.2", "fraction": 0.2, "fold": fold,
                 "seed": 0, "model": model, "group": model_group(model), "run_dir": str(folder),
                 "policy": "skip", "vali_ndcg@5": _ndcgs(right).mean(),
                 "test_ndcg@5": tests[model] + 0.01 * fold, "status": "done"}
            )  # fmt: skip
    return rows


def test_unit_study_and_select_keep_the_tree_when_vali_overfits(tmp_path) -> None:
    rows = _rows(tmp_path, OVERFIT, {"gbdt": 0.50, COMPLEX: 0.45})
    units = unit_study(rows)
    assert len(units) == 2 and {u["fold"] for u in units} == {1, 2}
    assert all(u["argmax_model"] == COMPLEX and u["robust_model"] == "gbdt" for u in units)
    assert all(u["tree_model"] == "gbdt" for u in units)  # the unit's one tree
    (summary,) = setting_summary(units)
    assert summary["n_units"] == 2 and summary["n_differ"] == 2
    assert summary["robust_test_mean"] == pytest.approx(0.515)
    assert summary["argmax_test_mean"] == pytest.approx(0.465)
    assert summary["robust_vs_argmax"] == pytest.approx(0.05)
    # select's rule=robust: the same rule over both units' QGs pooled.
    entries = stats.model_table(rows, k=5, select_k=5)
    assert stats.choose_best(entries)["model"] == COMPLEX  # rule=argmax
    runs = {(r["dataset"], r["setting"], r["model"], (r["fold"], r["seed"])): r for r in rows}
    chosen, details = choose_robust(entries, runs)
    assert chosen["model"] == "gbdt" and details["n_groups"] == 2 * N_GROUPS
    # Two seeds of one fold score the same vali QGs: each QG enters the bootstrap once.
    seeds = [{**r, "fold": 1, "seed": r["fold"]} for r in rows]
    runs = {(r["dataset"], r["setting"], r["model"], (r["fold"], r["seed"])): r for r in seeds}
    assert choose_robust(stats.model_table(seeds, k=5, select_k=5), runs)[1]["n_groups"] == N_GROUPS
    assert not details["challenges"][0]["switched"]
    (argmax,) = select.choose(rows, k=5, select_k=5)
    (robust,) = select.choose(rows, k=5, select_k=5, rule="robust")
    assert argmax["model"] == COMPLEX and "robust" not in argmax
    assert robust["model"] == "gbdt" and robust["robust"]["argmax"] == COMPLEX
    assert robust["test_mean"] == pytest.approx(0.515)
    with pytest.raises(ValueError, match="rule must be one of argmax, robust"):
        select.SelectConfig(sweep="s", rule="best")
    text = "\n".join(text_lines(setting_summary(units)))
    assert "robust Δ argmax" in text and "+0.0500" in text
    assert "choice-table" in html(setting_summary(units))


def test_unit_study_switches_when_the_complex_model_wins_clearly(tmp_path) -> None:
    rows = _rows(tmp_path, CLEAR, {"gbdt": 0.45, COMPLEX: 0.50})
    units = unit_study(rows)
    assert all(u["robust_model"] == u["argmax_model"] == COMPLEX for u in units)
    assert setting_summary(units)[0]["n_differ"] == 0
    # A run without per-QG vali (an old scores.npz) is left out and named.
    (tmp_path / "old").mkdir()
    old = {**rows[0], "model": "xgboost", "run_dir": str(tmp_path / "old")}
    units = unit_study([*rows[:2], old])
    assert units[0]["left_out"] == ["xgboost"] and units[0]["n_candidates"] == 2
    json.dumps(units)  # plain data, for the report's JSON


def test_a_trials_file_keeps_every_trial_of_two_or_more(tmp_path) -> None:
    write_trial_scores(tmp_path, np.arange(3), [np.ones(3)])
    assert read_trial_scores(tmp_path) is None  # one trial: its vali score is not a maximum
    write_trial_scores(tmp_path, np.arange(3), [np.ones(3), None])  # None: a pruned trial
    qids, per_trial = read_trial_scores(tmp_path)
    assert qids.tolist() == [0, 1, 2] and per_trial.shape == (2, 3)
    assert np.isnan(per_trial[1]).all()
    with pytest.raises(ValueError, match=r"trial 1 has \(2,\) per-QG values, expected \(3,\)"):
        write_trial_scores(tmp_path, np.arange(3), [np.ones(3), np.ones(2)])


def _searched_rows(tmp_path: Path) -> tuple[list[dict], list[float]]:
    """Two units of a 20-trial tree search whose trials are right on random halves of the QGs
    (its vali-best trial wins by luck), beside a one-recipe ResNet right on 16 QGs of 30."""
    rng = np.random.default_rng(0)
    rows, searched_vali = [], []
    for fold in (1, 2):
        trials = [set(np.flatnonzero(rng.random(N_GROUPS) < 0.5).tolist()) for _ in range(20)]
        per_trial = [_ndcgs(right) for right in trials]
        best = int(np.argmax([p.mean() for p in per_trial]))
        for model, right in (("gbdt-optuna", trials[best]), ("resnet", set(range(16)))):
            folder = _run(tmp_path / f"{model}-{fold}", right)
            if model == "gbdt-optuna":
                write_trial_scores(folder, np.arange(N_GROUPS), per_trial)
                searched_vali.append(per_trial[best].mean())
            rows.append(
                {"dataset": "ohsumed", "setting": "frac=1", "fraction": 1.0, "fold": fold,
                 "seed": 0, "model": model, "group": model_group(model), "run_dir": str(folder),
                 "policy": "skip", "vali_ndcg@5": _ndcgs(right).mean(),
                 "test_ndcg@5": {"gbdt-optuna": 0.40, "resnet": 0.45}[model], "status": "done"}
            )  # fmt: skip
    return rows, searched_vali


def test_crossfit_discounts_the_vali_maximum_of_a_search(tmp_path) -> None:
    rows, searched_vali = _searched_rows(tmp_path)
    plain = _ndcgs(set(range(16))).mean()
    assert min(searched_vali) > plain  # the argmax follows the search's luckiest trial
    units = unit_study(rows)
    assert [u["argmax_model"] for u in units] == ["gbdt-optuna"] * 2
    assert [u["crossfit_model"] for u in units] == ["resnet"] * 2
    assert all(u["searched"] == ["gbdt-optuna"] for u in units)
    (summary,) = setting_summary(units)
    assert summary["crossfit_vs_argmax"] == pytest.approx(0.05)
    assert summary["n_crossfit_differ"] == 2 and summary["n_differ"] == 0
    assert "crossfit Δ argmax" in "\n".join(text_lines([summary]))
    # select rule=crossfit: the cross-fitted vali of the search is about its trials' mean, below
    # both its reported vali and the ResNet's plain one.
    (chosen,) = select.choose(rows, k=5, select_k=5, rule="crossfit")
    details = chosen["crossfit"]
    assert chosen["model"] == "resnet" and details["argmax"] == "gbdt-optuna"
    assert details["searched"] == ["gbdt-optuna"] and details["plain_vali"] == []
    assert details["vali_crossfit"]["resnet"] == pytest.approx(plain)
    assert details["vali_crossfit"]["gbdt-optuna"] < plain < np.mean(searched_vali)
    assert chosen["vali_crossfit_mean"] == pytest.approx(plain)
    table = select.text_table({"k": 5, "select_k": 5, "rule": "crossfit", "choices": [chosen]})
    assert "vali NDCG@5 (cross-fitted)" in table and f"{plain:.4f}" in table
    (argmax,) = select.choose(rows, k=5, select_k=5)
    assert argmax["model"] == "gbdt-optuna"
    with pytest.raises(ValueError, match="rule=crossfit chooses on vali NDCG@5"):
        select.SelectConfig(sweep="s", rule="crossfit", select_k=10)


def test_crossfit_keeps_the_plain_vali_of_trials_on_other_qgs(tmp_path, capsys) -> None:
    rows, _ = _searched_rows(tmp_path)
    row = next(r for r in rows if r["model"] == "gbdt-optuna")
    qids, values = vali_per_group(row["run_dir"])
    _, per_trial = read_trial_scores(row["run_dir"])
    write_trial_scores(Path(row["run_dir"]), qids + 100, list(per_trial))
    assert crossfit_per_group(row, (qids, values)) == (values, "uncorrected")
    # A run that lists several trials but keeps no trials.npz (made before they were kept) is
    # named, a run of one trial is not; rule=crossfit says so on stderr.
    (Path(row["run_dir"]) / "trials.npz").unlink()
    (Path(row["run_dir"]) / "report.json").write_text(json.dumps({"trials": [{}, {}]}))
    assert crossfit_per_group(row, (qids, values))[1] == "uncorrected"
    (Path(row["run_dir"]) / "report.json").write_text(json.dumps({"grid": [{}]}))
    assert crossfit_per_group(row, (qids, values))[1] == "plain"
    (Path(row["run_dir"]) / "report.json").write_text(json.dumps({"trials": [{}, {}]}))
    (chosen,) = select.choose(rows, k=5, select_k=5, rule="crossfit")
    assert chosen["crossfit"]["uncorrected"] == ["gbdt-optuna"]
    select._warn_uncorrected([chosen])
    assert "runs of gbdt-optuna chose among trials before" in capsys.readouterr().err


def _entry(model: str, vali: list) -> dict:
    return {"model": model, "vali": vali, "vali_mean": stats.mean_std(vali)[0]}


def _old_member_rule(entries: list[dict]) -> dict:
    """The report's own rule before it went through `search.selection.select_best`."""

    def key(entry: dict) -> tuple:
        vali = entry["vali_mean"]
        seeds = -len(stats.finite(entry["vali"]))
        return (-vali if np.isfinite(vali) else np.inf, seeds, entry["model"])

    return min(entries, key=key)


def test_the_reports_group_member_is_searchs_choice_with_its_ties_and_nan() -> None:
    nan = float("nan")
    # the highest mean vali; a tie to the member with more seeds, then to the first name
    assert stats.choose_best([_entry("b", [0.4]), _entry("a", [0.5])])["model"] == "a"
    tied = [_entry("c", [0.5, 0.5]), _entry("b", [0.5]), _entry("a", [0.5, nan])]
    assert stats.choose_best(tied)["model"] == "c"
    assert stats.choose_best(tied[1:])["model"] == "a"
    # no finite vali ranks below every score, as search.selection.select_best has it
    assert stats.choose_best([_entry("a", [nan]), _entry("z", [0.1])])["model"] == "z"
    assert stats.choose_best([_entry("b", [nan]), _entry("a", [None])])["model"] == "a"
    # bit for bit the report's rule before: many random tables with ties and NaN
    rng = np.random.default_rng(0)
    for _ in range(500):
        entries = [
            _entry(name, [float(v) if v < 0.8 else nan for v in rng.integers(0, 10, n) / 10])
            for name, n in zip("edcba", rng.integers(1, 4, 5), strict=True)
        ][: rng.integers(1, 6)]
        assert stats.choose_best(entries) is _old_member_rule(entries)
