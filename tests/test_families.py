"""One entry per model family: the tables derived from them hold every family, once."""

from __future__ import annotations

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.run import BASELINES
from scarce_ltr.core.config import available
from scarce_ltr.families import FAMILIES, bundle_kinds, export_formats, scorers, torch_builders
from scarce_ltr.finetune.config import STRATEGIES


def test_every_command_line_name_has_one_family() -> None:
    names = [(family.stage, name) for family in FAMILIES for name in family.names]
    assert len(names) == len(set(names))
    baselines = [name for stage, name in names if stage == "baseline"]
    assert list(BASELINES) == baselines and sorted(baselines) == sorted(available("baseline"))
    assert [name for stage, name in names if stage == "finetune"] == list(STRATEGIES)


def test_a_baseline_run_files_its_model_under_its_familys_group() -> None:
    for family in FAMILIES:
        if family.stage != "baseline":
            continue
        for name in family.names:
            assert BaselineConfig(method=name).identity().group == family.group, name


def test_every_bundle_kind_has_exactly_one_scorer() -> None:
    """The families sharing a bundle kind name one scorer object (the kind's owner defines it)."""
    for kind in bundle_kinds():
        named = {family.scorer for family in FAMILIES if family.bundle_kind == kind}
        assert len(named) == 1, kind
    kinds = ["torch", "lightgbm", "catboost", "xgboost", "ensemble"]  # the error message's order
    assert list(scorers()) == bundle_kinds() == kinds
    assert {kind: s.__name__ for kind, s in scorers().items()} == {
        "torch": "TorchScorer",
        "lightgbm": "LightGBMScorer",
        "catboost": "CatBoostScorer",
        "xgboost": "XGBoostScorer",
        "ensemble": "EnsembleScorer",
    }


def test_serving_scores_and_exports_every_bundle_kind() -> None:
    assert set(bundle_kinds()) == set(scorers())
    assert export_formats("torch") == ("onnx", "torchscript")
    assert export_formats("lightgbm") == ("lightgbm",)
    assert export_formats("catboost") == export_formats("ensemble") == ()
    assert set(torch_builders()) == {"deepfm", "dcnv2", "dasalc"}


def test_the_sweep_planner_runs_each_family_in_its_stage() -> None:
    """`sweeps.model_jobs.sweep_job` writes the stages out (the driver loads no backend): they
    are the families'."""
    from scarce_ltr.baselines.config import HYBRID_BASELINES
    from scarce_ltr.finetune.config import COMBINE
    from scarce_ltr.sweeps.jobs import cli_stage
    from scarce_ltr.sweeps.model_jobs import sweep_job

    for family in FAMILIES:
        for name in family.names:
            if name == COMBINE:  # planned as a job of its own wave, run by ./run.sh finetune
                assert cli_stage(COMBINE) == family.stage
                continue
            if family.stage == "ensemble":
                model = f"{name}:gbdt,resnet"
            elif family.stage == "finetune":
                model = f"simclr-rank+{name}"
            else:
                model = f"{name}+simclr-rank" if name in HYBRID_BASELINES else name
            assert sweep_job(model)[1] == family.stage, model
