"""End to end: every ``run.sh finetune`` and deep ``run.sh baseline`` command on tiny data."""

from __future__ import annotations

import json

import pytest
import torch
from tiny import small_encoder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError

DATA = [*tiny_data(), "logger=none"]
ENCODER = small_encoder()


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A pretraining run of each kind the finetuning tests need (one epoch each)."""
    root = tmp_path_factory.mktemp("pretrain")
    torch.set_num_threads(1)
    runs = {}
    for name, method, extra in [
        ("resnet", "simclr-rank", []),
        ("attention", "simsiam", ["encoder.kind=attention"]),
        ("variant", "simclr-rank", ["variant=zero0.7", "augment.zero_p=0.7"]),
    ]:
        runs[name] = root / name
        run(
            ["pretrain", method, *DATA, *ENCODER, *extra, "epochs=1", "monitor.enabled=false"]
            + [f"run_dir={runs[name]}"]
        )
    return runs


def finetune(strategy: str, run_dir, *args: str):
    args = ("head_hidden=16", *args)
    return run(["finetune", strategy, *DATA, "epochs=2", f"run_dir={run_dir}", *args])


def report(run_dir) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def test_every_strategy_end_to_end(pretrained, tmp_path) -> None:
    encoder = torch.load(pretrained["resnet"] / "encoder.pt", weights_only=True)["state_dict"]
    for strategy in ("lp", "mp", "full"):
        out = tmp_path / strategy
        result = finetune(strategy, out, f"pretrained={pretrained['resnet']}")
        assert (out / "DONE").is_file() and (out / "scores.npz").is_file()
        assert result["pretraining_method"] == "simclr-rank"
        assert set(result["metrics"]["test"]) >= {"ndcg@1", "ndcg@5", "outlier_ndcg@5"}
        assert result["label_setting"] == "frac=1" and "git" in result
        assert result["parameters"]["total"] > 0 and result["seconds_per_epoch"] > 0
        saved = torch.load(out / "model.pt", weights_only=True)["state_dict"]
        frozen = all(torch.equal(saved[f"encoder.{k}"], v) for k, v in encoder.items())
        # lp, mp: bit-identical encoder; full: trained when the best epoch is a whole-network one
        assert frozen == (strategy != "full" or result["best_epoch"] <= 1), strategy
    assert finetune("full", tmp_path / "full", f"pretrained={pretrained['resnet']}") is None
    combined = finetune("combine", tmp_path / "c", f"runs=[{tmp_path / 'mp'},{tmp_path / 'full'}]")
    assert combined["runs"] and combined["parameters"]["trainable"] == 2 * 16 + 1


def test_attention_encoder_pretrained_and_from_scratch(pretrained, tmp_path) -> None:
    result = finetune("full", tmp_path / "a", f"pretrained={pretrained['attention']}")
    assert result["pretraining_method"] == "simsiam"
    scratch = finetune(
        "full", tmp_path / "s", "pretrained=none", "encoder.kind=attention", *ENCODER
    )
    assert scratch["pretrained"] is None and scratch["epochs_trained"] == 2


def test_a_variants_finetuning_names_it_in_pretraining_method(pretrained, tmp_path) -> None:
    """A sweep's ``<method>@<variant>`` encoder: the report says which variant, and a
    combination of such runs is named after its members' variants."""
    result = finetune("lp", tmp_path / "lp", f"pretrained={pretrained['variant']}")
    assert result["pretraining_method"] == "simclr-rank@zero0.7"
    assert result["model"] == "simclr-rank@zero0.7+lp"
    combined = finetune("combine", tmp_path / "c", f"runs=[{tmp_path / 'lp'},{tmp_path / 'lp'}]")
    assert combined["pretraining_method"] == "simclr-rank@zero0.7+simclr-rank@zero0.7"
    assert combined["model"] == "simclr-rank@zero0.7+simclr-rank@zero0.7+combine"


@pytest.mark.parametrize(
    "method, grid",
    [
        ("resnet", ["deep.lrs=[1e-3,1e-2]", "deep.encoder.width=16", "deep.encoder.hidden=32"]),
        ("deepfm", ["deep.lrs=[5e-3]", "deep.hidden=16"]),
        ("dcnv2", ["deep.lrs=[5e-3]", "deep.cross_layers=[2,3]", "deep.hidden=16"]),
    ],
)
def test_deep_baselines_end_to_end(tmp_path, method: str, grid: list[str]) -> None:
    out = tmp_path / method
    result = run(["baseline", method, *DATA, *grid, "epochs=2", f"run_dir={out}"])
    assert (out / "DONE").is_file() and (out / "model.pt").is_file()
    assert len(result["grid"]) == (2 if method != "deepfm" else 1)
    best = max(r["best_vali_ndcg@5"] for r in result["grid"])
    assert result["selected"]["best_vali_ndcg@5"] == best
    assert "ndcg@5" in result["metrics"]["test"]
    if method != "resnet":
        assert result["categorical_features"] is not None  # the synthetic data has some


def test_bad_input(pretrained, tmp_path) -> None:
    with pytest.raises(UserError, match="no such"):
        finetune("full", tmp_path / "x1", f"pretrained={tmp_path / 'missing'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="encoder.pt"):
        finetune("full", tmp_path / "x2", f"pretrained={tmp_path / 'empty'}")
    with pytest.raises(UserError, match="12 features"):
        finetune(
            "full",
            tmp_path / "x3",
            f"pretrained={pretrained['resnet']}",
            "data.synthetic.n_features=16",
        )
    with pytest.raises(UserError, match="relevant item"):
        finetune("full", tmp_path / "x4", "pretrained=none", "scarcity.binary_tau=40")
    with pytest.raises(UserError, match="pretrained"):
        finetune("full", tmp_path / "x5")
    # a run dir that holds a run of other settings is refused, not skipped or resumed
    finetune("lp", tmp_path / "x6", "pretrained=none", *ENCODER)
    with pytest.raises(UserError, match="other settings"):
        finetune("lp", tmp_path / "x6", f"pretrained={pretrained['resnet']}")
    with pytest.raises(UserError, match="seed"):
        finetune(
            "combine", tmp_path / "x7", f"runs=[{tmp_path / 'x6'},{tmp_path / 'x6'}]", "seed=1"
        )


def test_learning_rate_grid_keeps_the_vali_best_rate_and_resumes(pretrained, tmp_path) -> None:
    run_dir = tmp_path / "grid"
    # keep_checkpoints: the grid points' checkpoints stay, as an interrupted run's do.
    args = (
        f"pretrained={pretrained['resnet']}",
        "lrs=[1e-5,1e-2]",
        "epochs=4",
        "keep_checkpoints=true",
    )
    finetune("full", run_dir, *args)
    got = report(run_dir)
    rows = {row["lr"]: row["best_vali_ndcg@5"] for row in got["lr_grid"]}
    assert sorted(rows) == [1e-5, 1e-2]
    assert got["learning_rate"] == max(rows, key=rows.get)
    assert got["best_vali_ndcg@5"] == rows[got["learning_rate"]]
    chosen = run_dir / "grid" / f"lr={got['learning_rate']:g}"
    assert (run_dir / "model.pt").read_bytes() == (chosen / "model.pt").read_bytes()
    # The run's vali NDCG@5 is that of the chosen model (scored again after the grid).
    assert got["metrics"]["vali"]["ndcg@5"] == pytest.approx(got["best_vali_ndcg@5"], abs=1e-9)

    # Interrupted after the grid, before the run finished: no rate is trained again.
    results = {p: p.read_text() for p in run_dir.glob("grid/*/result.json")}
    (run_dir / "DONE").unlink()
    (run_dir / "report.json").unlink()
    checkpoints = {p: p.stat().st_mtime_ns for p in run_dir.glob("grid/*/checkpoint.pt")}
    assert len(checkpoints) == 2
    finetune("full", run_dir, *args)
    assert report(run_dir)["learning_rate"] == got["learning_rate"]
    assert {p: p.read_text() for p in results} == results
    assert {p: p.stat().st_mtime_ns for p in checkpoints} == checkpoints


def test_bad_learning_rate_grid_is_named(pretrained, tmp_path) -> None:
    with pytest.raises(UserError, match="lrs"):
        finetune("full", tmp_path / "x", f"pretrained={pretrained['resnet']}", "lrs=[1e-3,-1]")
