"""The selection score (`data.evaluation.vali_selection`): vali NDCG@5 of the labeled vali QGs,
the same float as the full vali report's ``ndcg@5``, computed without the other metrics."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tiny import tiny_data

from scarce_ltr.core.config import load_config
from scarce_ltr.data import evaluation
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.finetune.config import FinetuneConfig


@pytest.mark.parametrize("policy", ["skip", "one", "zero"])
@pytest.mark.parametrize("val", ["full", "same"])
def test_vali_selection_is_the_reports_ndcg_at_5_bit_for_bit(monkeypatch, policy, val) -> None:
    overrides = [*tiny_data(), "pretrained=none", "logger=none", "scarcity.fraction=0.5"]
    cfg, _ = load_config(FinetuneConfig, [*overrides, f"scarcity.val={val}"])
    prepared = prepare_data(cfg)
    metrics = replace(cfg.metrics, policy=policy)
    labeled = prepared.labels.vali_labeled
    assert labeled.any() and (val == "full" or not labeled.all())
    rng = np.random.default_rng(0)
    for draw in range(5):
        scores = rng.normal(size=prepared.vali.n_items)
        if draw == 4:
            scores = np.round(scores)  # ties: broken by input order in both
        expected = evaluation.vali_metrics(prepared, scores, metrics)["ndcg@5"]
        with monkeypatch.context() as patched:  # the selection computes NDCG@5 alone
            patched.setattr(evaluation, "evaluate_ranking", _refused)
            got = evaluation.vali_selection(prepared, scores, metrics)
            per_group = evaluation.vali_selection_per_group(prepared, scores, metrics)
        assert got == expected or (np.isnan(got) and np.isnan(expected))
        assert len(per_group) == labeled.sum()
        assert got == np.nanmean(per_group) or policy != "skip"


def _refused(*args, **kwargs):
    raise AssertionError("the selection score computed every metric")
