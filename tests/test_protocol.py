"""The paper's protocol in sweeps: variants of a method's pretraining tuned on validation, SSL-Val
checkpoint selection without labels, the combination as a sweep model, and every shipped sweep
planning without error."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tiny import tiny_data, tiny_pretraining

from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.outliers.histogram import (
    feature_histogram,
    flagged_by_feature,
    histogram_bounds,
)
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.models.names import ModelName, model_group
from scarce_ltr.pretrain import train as pretrain_train
from scarce_ltr.pretrain.ssl_val import SslVal, ssl_val_split
from scarce_ltr.reports import stats

SWEEPS = sorted(p.stem for p in (CONFIG_ROOT / "sweep").glob("*.yaml"))
VARIANTS = "{a: [augment.zero_p=0.1, augment.noise_scale=0.0], b: [augment.noise_scale=2.0]}"


@pytest.mark.parametrize("name", SWEEPS)
def test_every_shipped_sweep_plans(name: str, tmp_path: Path, capsys) -> None:
    cells = run(["sweep", name, "--dry-run", "logger=none", f"run_dir={tmp_path / name}"])
    out = capsys.readouterr().out
    assert cells and f"{len(cells)} cells" in out
    assert not (tmp_path / name).exists()


def test_paper_sweeps_pretrain_at_the_papers_budgets(capsys, tmp_path: Path) -> None:
    run(["sweep", "mslr-web30k-table1", "--dry-run", f"run_dir={tmp_path}"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "] pretrain " in ln]
    assert len(lines) == 28 * 3  # every augmentation candidate of the 8 methods, 3 seeds
    assert all("epochs=300" in ln for ln in lines)
    for method, budget in (("simclr-rank", 200000), ("simclr", 2000), ("scarf", 2000)):
        mine = [ln for ln in lines if f"] pretrain {method} " in ln]
        assert mine and all(f"item_budget={budget}" in ln for ln in mine)
    assert any("augment.corrupt_p=0.9 variant=corrupt0.9" in ln for ln in lines)


def _sweep(tmp_path: Path, models: str, *extra: str) -> list[str]:
    return [
        "sweep",
        "quick",
        f"models={models}",
        "fractions=[0.2]",
        "seeds=[0]",
        "logger=none",
        "report=false",
        f"variants={VARIANTS}",
        f"overrides.common=[{','.join(tiny_data())}]",
        "overrides.per_model={}",
        f"run_dir={tmp_path / 'sweep'}",
        *extra,
    ]


def test_variants_pretrain_in_folders_of_their_own(tmp_path: Path, capsys) -> None:
    args = _sweep(tmp_path, "[simclr-rank@a+full,simclr-rank@b+full,simclr-rank+full]")
    run([*args, "--dry-run", "overrides.per_method={simclr-rank: [item_budget=300]}"])
    pretrain = [ln for ln in capsys.readouterr().out.splitlines() if "] pretrain " in ln]
    assert len(pretrain) == 3
    (a,) = [ln for ln in pretrain if "simclr-rank@a/" in ln]
    # the variant's keys come after the stage's and the method's lists, so they win
    assert a.index("item_budget=300") < a.index("augment.zero_p=0.1") < a.index("variant=a")
    assert str(ModelName.parse("simclr-rank@a+full").without_variants()) == "simclr-rank+full"
    assert model_group("simclr-rank@a+full") == "pretrained-dl"


@pytest.mark.parametrize(
    ("models", "extra", "message"),
    [
        ("[simclr-rank@zz+full]", [], "no variant 'zz' under variants"),
        ("[nope@a+full]", [], "unknown pretraining method 'nope@a'"),
        ("[simclr-rank@a+full]", ["variants={a: [augment.nope=1]}"], "variants.a"),
        ("[simclr-rank@a+full]", ["variants={a: [seed=3]}"], "names the run"),
        ("[simclr-rank@a+full]", ["variants={'a/b': []}"], "a variant's name"),
        ("[simclr-rank+full]", ["overrides.per_method={nope: []}"], "per_method.nope"),
        ("[simclr-rank+full]", ["overrides.per_method={simclr: [seed=1]}"], "per_method"),
        ("[simclr-rank+full,simclr-rank+simsiam+combine]", [], "member 'simsiam\\+full'"),
        ("[simclr-rank+combine]", [], "two or more pretraining methods"),
    ],
)
def test_bad_variants_and_combinations_stop_before_any_cell(
    tmp_path: Path, models: str, extra: list[str], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        run([*_sweep(tmp_path, models), *extra])
    assert not (tmp_path / "sweep").exists()


def _entry(model: str, vali: list[float], test: list[float]) -> list[dict]:
    return [
        {
            "dataset": "synthetic",
            "model": model,
            "group": "pretrained-dl",
            "setting": "frac=0.1",
            "fraction": 0.1,
            "seed": seed,
            "status": "done",
            "vali_ndcg@5": v,
            "test_ndcg@5": t,
        }
        for seed, (v, t) in enumerate(zip(vali, test, strict=True))
    ]


def test_the_tuned_table_picks_the_validation_best_variant() -> None:
    rows = [
        # zero0.1 wins on validation although test would pick noise1
        *_entry("simclr-rank@zero0.1+full", [0.62, 0.61, 0.63], [0.50, 0.51, 0.49]),
        *_entry("simclr-rank@noise1+full", [0.58, 0.57, 0.59], [0.70, 0.71, 0.69]),
        *_entry("simsiam+full", [0.60, 0.60, 0.60], [0.60, 0.60, 0.60]),
    ]
    summary = stats.summarize(rows)
    (tuned,) = summary["tuned"]
    assert tuned["model"] == "simclr-rank+full"
    assert tuned["member"] == "simclr-rank@zero0.1+full" and tuned["n_candidates"] == 2
    assert math.isclose(tuned["test_mean"], 0.50)
    # the group, too, stands for its validation-best member, never the test-best
    (group,) = [g for g in summary["groups"] if g["group"] == "pretrained-dl"]
    assert group["member"] == "simclr-rank@zero0.1+full"


def _pretrain(tmp_path: Path, *extra: str) -> dict:
    folder = tmp_path / "run"
    run(
        [
            "pretrain",
            "simclr-rank",
            *tiny_pretraining(),
            "monitor.enabled=false",
            "epochs=4",
            "item_budget=64",
            f"run_dir={folder}",
            *extra,
        ]
    )
    return json.loads((folder / "report.json").read_text())


def test_ssl_val_keeps_the_best_epoch(tmp_path: Path, monkeypatch) -> None:
    curve = iter([3.0, 1.0, 2.0, 4.0])
    states: list[dict] = []

    def scripted(self, objective, *, device) -> float:
        states.append({k: v.cpu().clone() for k, v in objective.encoder.state_dict().items()})
        return next(curve)

    monkeypatch.setattr(SslVal, "loss", scripted)
    report = _pretrain(tmp_path)
    assert report["ssl_val"] == {
        "criterion": "loss",
        "curve": [3.0, 1.0, 2.0, 4.0],
        "chosen_epoch": 2,
    }
    saved = torch.load(tmp_path / "run" / "encoder.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(saved[k], states[1][k]) for k in saved)
    assert not all(torch.equal(saved[k], states[3][k]) for k in saved)
    assert report["pretraining_set"]["include_vali"] is False


def test_ssl_val_never_reads_a_label(tmp_path: Path, monkeypatch) -> None:
    clean = _pretrain(tmp_path / "clean")
    prepare = pretrain_train.prepare_data

    def garbage_labels(cfg):
        prepared = prepare(cfg)
        nan = np.full(prepared.vali.n_items, np.nan, dtype=np.float32)
        junk = np.random.default_rng(0).normal(size=prepared.train.n_items).astype(np.float32)
        return replace(
            prepared,
            vali=replace(prepared.vali, labels=nan),
            train=replace(prepared.train, labels=junk),
        )

    monkeypatch.setattr(pretrain_train, "prepare_data", garbage_labels)
    dirty = _pretrain(tmp_path / "dirty")
    assert all(math.isfinite(v) for v in clean["ssl_val"]["curve"])
    assert dirty["ssl_val"] == clean["ssl_val"]
    assert dirty["loss_curve"] == clean["loss_curve"]


def test_ssl_val_none_keeps_the_last_epoch(tmp_path: Path) -> None:
    report = _pretrain(tmp_path, "ssl_val=none", "epochs=2")
    assert report["ssl_val"]["chosen_epoch"] == 2
    assert report["ssl_val"]["curve"] == [None, None]


def test_an_empty_ssl_val_split_is_one_clear_error() -> None:
    empty = RankingSplit(
        np.zeros((0, 4), np.float32),
        np.zeros(0, np.float32),
        np.zeros(1, np.int64),
        np.zeros(0, np.int64),
        "vali",
    )
    with pytest.raises(UserError, match="ssl_val=none"):
        ssl_val_split(SimpleNamespace(vali=empty), method="simsiam")  # type: ignore[arg-type]


def test_empty_vali_file_stops_a_pretraining_sweep(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    line = "1 qid:1 1:0.5 2:0.1\n0 qid:1 1:0.2 2:0.3\n"
    for split, text in (("train", line), ("vali", ""), ("test", line)):
        (folder / f"{split}.txt").write_text(text)
    args = [
        "sweep",
        "quick",
        "datasets=[letor]",
        "models=[simsiam+full]",
        f"overrides.common=[data.path={folder}]",
        "overrides.per_model={}",
        f"run_dir={tmp_path / 'sweep'}",
    ]
    with pytest.raises(UserError, match="vali file .* is empty"):
        run(args)
    assert not (tmp_path / "sweep").exists()


def test_a_malformed_sweep_file_is_one_line_naming_it(tmp_path: Path) -> None:
    from scarce_ltr.sweeps.sweep import SweepConfig

    bad = tmp_path / "bad.yaml"
    bad.write_text("datasets: [synthetic\nmodels: gbdt\n")
    with pytest.raises(UserError, match=r"bad.yaml:2: not valid YAML"):
        load_config(SweepConfig, [], stage_file=bad)


def test_a_tuned_sweep_with_a_combination_runs_end_to_end(tmp_path: Path, capsys) -> None:
    """Two variants of SimCLR-Rank pretrained and finetuned, and their combination (A.3.7)."""
    models = "[simclr-rank@a+full,simclr-rank@b+full,simclr-rank@a+simclr-rank@b+combine]"
    small = "[epochs=2,encoder.width=8,encoder.hidden=16,encoder.n_blocks=1,monitor.n_items=64]"
    cells = run(
        [
            *_sweep(tmp_path, models),
            "workers=2",
            f"overrides.pretrain={small}",
            "overrides.finetune=[head_epochs=2,full_epochs=1]",
            "overrides.per_model={simclr-rank@a+simclr-rank@b+combine: [head_epochs=2]}",
        ]
    )
    assert [c["status"] for c in cells] == ["done"] * 3
    # a sweep in a folder of its own is reported by that folder, not by its name
    assert f"next: ./run.sh report {tmp_path / 'sweep'}" in capsys.readouterr().out
    root = tmp_path / "sweep" / "synthetic"
    pretrain = json.loads((root / "pretrain/simclr-rank@b/seed=0/report.json").read_text())
    assert pretrain["model"] == "simclr-rank@b" and pretrain["ssl_val"]["chosen_epoch"] >= 1
    config = (root / "pretrain/simclr-rank@b/seed=0/config.yaml").read_text()
    assert "noise_scale: 2.0" in config
    combined = root / "finetune/simclr-rank@a+simclr-rank@b+combine/frac=0.2/seed=0"
    spec = json.loads((combined / "report.json").read_text())
    assert spec["strategy"] == "combine" and len(spec["runs"]) == 2
    # named after its members' variants, as the sweep names it
    assert spec["model"] == "simclr-rank@a+simclr-rank@b+combine"
    finetuned = json.loads(
        (root / "finetune/simclr-rank@a+full/frac=0.2/seed=0/report.json").read_text()
    )
    assert finetuned["model"] == "simclr-rank@a+full"
    assert finetuned["pretraining_method"] == "simclr-rank@a"


def test_figure_5_histogram_matches_the_rule() -> None:
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(500, 3))
    reference[0, 1] = 40.0  # a far value: a run of empty bins, then a tail of one item
    offsets = np.arange(0, 61, 6, dtype=np.int64)
    test_features = rng.normal(size=(60, 3)).astype(np.float32)
    test_features[7, 1] = 60.0  # QG 1 holds a value beyond the cut of feature 2 (column 1)
    test = RankingSplit(
        test_features, np.zeros(60, np.float32), offsets, np.arange(10, dtype=np.int64), "test"
    )
    lower, upper = histogram_bounds(reference, gap=5)
    for column in range(3):
        hist = feature_histogram(reference, feature=column, gap=5)
        assert (hist["lower"], hist["upper"]) == (lower[column], upper[column])
        assert hist["counts"].sum() == 500 and hist["edges"].shape == (101,)
    flagged = flagged_by_feature(reference, test, gap=5)
    assert flagged.tolist() == [0, 1, 0]


def test_the_report_draws_figure_5(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run(
        [
            "baseline",
            "gbdt",
            *tiny_data(),
            "logger=none",
            "gbdt.num_threads=1",
            "data.outliers.gap=3",
            f"run_dir={runs / 'gbdt'}",
        ]
    )
    report = run(["report", f"runs_root={runs}", f"out={tmp_path / 'report'}"])
    (figure,) = report["outlier_figures"]
    assert figure["dataset"] == "synthetic" and figure["gap"] == 3 and figure["feature"] >= 1
    assert (tmp_path / "report" / "outliers_synthetic.png").stat().st_size > 1000
    html = (tmp_path / "report" / "dashboard.html").read_text()
    assert "the histogram rule" in html


@pytest.mark.parametrize(
    ("data", "extra", "dropout"),
    [("yahoo-set1", [], 0.0), ("mslr-web30k", [], 0.7), ("synthetic", [], 0.7)]
    + [("yahoo-set1", ["combine_dropout=0.3"], 0.3)],
)
def test_combine_dropout_per_data_preset(data: str, extra: list[str], dropout: float) -> None:
    from scarce_ltr.finetune.config import FinetuneConfig

    cfg, _ = load_config(
        FinetuneConfig,
        [f"data={data}", "runs=[a,b]", *extra],
        stage_file=CONFIG_ROOT / "finetune" / "combine.yaml",
    )
    assert cfg.combination_dropout == dropout
