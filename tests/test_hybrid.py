"""Hybrid rankers: gbdt-ssl (LightGBM on encoder embeddings) and ensembles of finished runs.

Embeddings independent of the batch, within-QG normalisation by hand, weights chosen on vali
only, bad members refused, sweep planning, the report's hybrid group, and both commands end to
end on tiny data."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tiny import small_encoder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.metrics import evaluate_ranking
from scarce_ltr.data.evaluation import save_scores
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.ensembles.config import EnsembleConfig
from scarce_ltr.ensembles.score_fusion import (
    mix,
    rank_within_groups,
    simplex_grid,
    zscore_within_groups,
)
from scarce_ltr.finetune.model import save_model
from scarce_ltr.models.names import model_group
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder
from scarce_ltr.trees.lightgbm.hybrid.embedding_features import (
    EMBEDDINGS_FILE,
    embed_split,
    load_encoder,
)

DATA = [*tiny_data(), "logger=none"]
ENCODER = small_encoder()
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=30", "gbdt.early_stopping_rounds=10"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Finished tiny runs under one runs root: pretraining, gbdt, finetuning, gbdt-ssl."""
    root = tmp_path_factory.mktemp("hybrid") / "runs"
    torch.set_num_threads(1)
    out = {name: root / name for name in ("pretrain", "gbdt", "finetune", "ssl")}
    pretrained = f"pretrained={out['pretrain']}"
    run(["pretrain", "simclr-rank", *DATA, *ENCODER, "epochs=1", "monitor.enabled=false",
         f"run_dir={out['pretrain']}"])  # fmt: skip
    run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={out['gbdt']}"])
    run(["finetune", "full", *DATA, "epochs=2", "head_hidden=16", pretrained,
         f"run_dir={out['finetune']}"])  # fmt: skip
    run(["baseline", "gbdt-ssl", *DATA, *GBDT, pretrained, f"run_dir={out['ssl']}"])
    return out | {"root": root}


def report_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


# --- embeddings -------------------------------------------------------------------------------


def _split(sizes: list[int], n_features: int = 6) -> RankingSplit:
    rng = np.random.default_rng(0)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    x = rng.normal(size=(int(offsets[-1]), n_features)).astype(np.float32)
    labels = rng.integers(0, 3, len(x)).astype(np.float32)
    return RankingSplit(x, labels, offsets, np.arange(len(sizes)), "split")


@pytest.mark.parametrize("kind", ["resnet", "attention"])
def test_embeddings_do_not_depend_on_the_batch(kind: str) -> None:
    torch.manual_seed(0)
    config = EncoderConfig(kind=kind, width=8, hidden=16, n_blocks=2, n_heads=2)
    encoder = build_encoder(config, n_features=6).train()  # embed_split must switch to eval
    split = _split([5, 1, 9, 3, 7])
    alone = embed_split(encoder, split, item_budget=1)  # one QG per batch
    together = embed_split(encoder, split, item_budget=10_000)  # every QG in one padded batch
    assert alone.shape == (25, 8)
    np.testing.assert_allclose(alone, together, atol=1e-5)
    third = split.subset(np.array([2]))  # QG 2 without the others
    np.testing.assert_allclose(embed_split(encoder, third, item_budget=4), alone[6:15], atol=1e-5)


def test_encoder_of_a_finetuning_run_and_refusals(runs, tmp_path) -> None:
    encoder, info = load_encoder(runs["finetune"])
    assert (info["kind"], info["model"], info["n_features"]) == ("finetune", "simclr-rank+full", 12)
    assert not encoder.training
    with pytest.raises(UserError, match="neither encoder.pt nor model.pt"):
        load_encoder(runs["gbdt"])
    with pytest.raises(UserError, match="no such run directory"):
        load_encoder(tmp_path / "nope")


@pytest.mark.parametrize("kind", ["deepfm", "combined"])
def test_a_model_without_one_item_encoder_is_refused_by_its_kind(kind, tmp_path) -> None:
    """A deep baseline's model.pt (DeepFM, DCNv2, DASALC: built a layer above the trees) or a
    combination is refused by its stored kind, before anything is built."""
    save_model(tmp_path, torch.nn.Linear(2, 1), spec={"kind": kind}, data={}, source={})
    with pytest.raises(UserError, match=f"holds a {kind} model, which has no item encoder"):
        load_encoder(tmp_path)


# --- normalisation and weights ----------------------------------------------------------------


def test_rank_normalisation_by_hand() -> None:
    offsets = np.array([0, 4, 5, 5, 8])  # QGs of 4, 1, 0 and 3 items
    scores = np.array([3.0, 1.0, 3.0, 2.0, 7.0, -1.0, -1.0, -1.0])
    # QG 0: ascending ranks 0 (1.0), 1 (2.0), 2.5 (3.0 twice) over 3; one item: 0.5; all tied.
    expected = [2.5 / 3, 0.0, 2.5 / 3, 1 / 3, 0.5, 0.5, 0.5, 0.5]
    np.testing.assert_allclose(rank_within_groups(scores, offsets), expected)


def test_zscore_normalisation_by_hand() -> None:
    offsets = np.array([0, 3, 4, 6])
    scores = np.array([1.0, 2.0, 6.0, 5.0, 1e9, 1e9])
    std = np.sqrt(((np.array([1, 2, 6]) - 3.0) ** 2).mean())  # population std of QG 0
    expected = [-2 / std, -1 / std, 3 / std, 0.0, 0.0, 0.0]  # lone and constant QGs: 0
    np.testing.assert_allclose(zscore_within_groups(scores, offsets), expected)


@pytest.mark.parametrize("normalize", [rank_within_groups, zscore_within_groups])
def test_normalisation_stays_within_each_qg(normalize) -> None:
    offsets = np.array([0, 3, 7])
    scores = np.array([0.3, -2.0, 5.0, 1.0, 4.0, 2.0, 3.0])
    moved = scores.copy()
    moved[3:] = 100.0 * moved[3:] + 7.0  # QG 1 rescaled and shifted: QG 0 must not notice
    np.testing.assert_allclose(normalize(scores, offsets)[:3], normalize(moved, offsets)[:3])
    np.testing.assert_allclose(normalize(scores, offsets)[3:], normalize(moved, offsets)[3:])


def test_simplex_grid() -> None:
    grid = simplex_grid(3, 0.1)
    assert grid.shape == (66, 3)
    np.testing.assert_allclose(grid.sum(axis=1), 1.0)
    assert (grid >= 0).all() and len({tuple(np.round(g, 6)) for g in grid}) == 66
    np.testing.assert_allclose(simplex_grid(2, 0.5), [[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(mix(np.array([[1.0, 2.0], [3.0, 5.0]]), [0.25, 0.75]), [2.5, 4.25])


def _fake_member(folder: Path, prepared, overrides: list[str], vali, test) -> Path:
    """A finished baseline run whose scores.npz holds the given scores."""
    _, resolved = load_config(EnsembleConfig, [*overrides, "runs=[a,b]"])
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    save_scores(folder, prepared, vali, test)
    (folder / "report.json").write_text(json.dumps({"stage": "baseline", "method": "gbdt"}))
    (folder / "DONE").write_text("")
    return folder


def test_weights_chosen_on_vali_not_test(tmp_path) -> None:
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]"])
    prepared = prepare_data(cfg)
    vali_y, test_y = prepared.vali.labels, prepared.test.labels
    rng = np.random.default_rng(0)
    # A ranks vali perfectly and test backwards; B is noise on vali and perfect on test.
    a = _fake_member(tmp_path / "a", prepared, DATA, vali_y + 0.0, -test_y)
    b = _fake_member(tmp_path / "b", prepared, DATA, rng.normal(size=len(vali_y)), test_y + 0.0)
    report = run(["ensemble", *DATA, f"runs=[{a},{b}]", f"run_dir={tmp_path / 'ens'}"])
    tried = [t["vali_ndcg@5"] for t in report["tried"]]
    assert len(tried) == 11
    chosen = report["weights"][str(a)]
    assert chosen >= 0.5 and report["metrics"]["vali"]["ndcg@5"] == pytest.approx(max(tried))
    # On test, B alone would have been far better: the ensemble did not look.
    b_test = evaluate_ranking(test_y, test_y, prepared.test.offsets, ks=[5])["ndcg@5"]
    assert report["metrics"]["test"]["ndcg@5"] < b_test - 0.1
    assert report["group"] == "gbdt" and report["method"] == "ensemble:gbdt,gbdt"


def test_bad_members_are_refused(runs, tmp_path) -> None:
    ens = ["ensemble", *DATA, f"run_dir={tmp_path / 'ens'}"]
    gbdt, ft = runs["gbdt"], runs["finetune"]
    with pytest.raises(UserError, match=f"runs: {runs['pretrain']}: no scores.npz"):
        run([*ens, f"runs=[{gbdt},{runs['pretrain']}]"])
    with pytest.raises(UserError, match=f"runs: {gbdt}: trained on other data .*n_features"):
        run([*ens, "data.synthetic.n_features=10", f"runs=[{gbdt},{ft}]"])
    with pytest.raises(UserError, match=f"runs: {gbdt}: trained with another label setting"):
        run([*ens, "scarcity.fraction=0.5", f"runs=[{gbdt},{ft}]"])
    with pytest.raises(UserError, match="listed twice"):
        run([*ens, f"runs=[{gbdt},{gbdt}/]"])
    with pytest.raises(UserError, match="no such run directory"):
        run([*ens, f"runs=[{gbdt},{tmp_path / 'nope'}]"])
    with pytest.raises(UserError, match="two or more"):
        run([*ens, f"runs=[{gbdt}]"])
    # Same data config, other QGs in the scores (e.g. another split file): refused.
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]"])
    prepared = prepare_data(cfg)
    other = _fake_member(tmp_path / "o", prepared, DATA, prepared.vali.labels, prepared.test.labels)
    with np.load(other / "scores.npz") as stored:
        arrays = dict(stored)
    arrays["test_qids"] = arrays["test_qids"] + 1
    np.savez(other / "scores.npz", **arrays)
    with pytest.raises(UserError, match=f"runs: {other}: its test scores belong to other test QGs"):
        run([*ens, f"runs=[{gbdt},{other}]"])


def test_seed_ensembles_need_seed_free_labels(tmp_path) -> None:
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]"])
    prepared = prepare_data(cfg)
    y_vali, y_test = prepared.vali.labels, prepared.test.labels
    members = []
    for seed in (0, 1, 2):
        extra = [*DATA, "scarcity.fraction=0.5", f"seed={seed}"]
        members.append(_fake_member(tmp_path / f"s{seed}", prepared, extra, y_vali, y_test))
    ens = ["ensemble", *DATA, "scarcity.fraction=0.5", "weights=uniform"]
    with pytest.raises(UserError, match="seed 1 draws other labeled QGs.*scarcity.seed"):
        run([*ens, f"runs=[{','.join(map(str, members))}]", f"run_dir={tmp_path / 'e'}"])
    # DASALC-ens under label scarcity: the members fix their labels with scarcity.seed.
    fixed = []
    for seed in (0, 1, 2):
        extra = [*DATA, "scarcity.fraction=0.5", "scarcity.seed=0", f"seed={seed}"]
        fixed.append(_fake_member(tmp_path / f"f{seed}", prepared, extra, y_vali, y_test))
    runs_arg = f"runs=[{','.join(map(str, fixed))}]"
    # What counts is the seed that draws the labels, not where it is said: an ensemble of seed 1
    # would mix other labeled QGs into its weights, one of seed 0 (or scarcity.seed=0) not.
    with pytest.raises(UserError, match="seed 0 draws other labeled QGs than .*seed 1"):
        run([*ens, "seed=1", runs_arg, f"run_dir={tmp_path / 'e1'}"])
    assert run([*ens, "seed=0", runs_arg, f"run_dir={tmp_path / 'e0'}"])["label_setting"] == (
        "frac=0.5"
    )
    report = run([*ens, "seed=1", "scarcity.seed=0", runs_arg, f"run_dir={tmp_path / 'e'}"])
    assert report["label_setting"] == "frac=0.5,labels=0"
    assert list(report["weights"].values()) == pytest.approx([1 / 3] * 3)


# --- end to end -------------------------------------------------------------------------------


def test_gbdt_ssl_end_to_end(runs, tmp_path) -> None:
    report = report_of(runs["ssl"])
    assert report["method"] == "gbdt-ssl+simclr-rank"
    assert report["embedding"]["candidates"] == ["pca-8", "pca-16", "raw"]  # 32 > width 16
    assert report["embedding"]["dim"] == 16
    assert report["selected"]["embedding"] in report["embedding"]["candidates"]
    assert {"vali", "test"} <= set(report["metrics"])
    best = max(g["vali_ndcg@5"] for g in report["grid"])
    assert report["metrics"]["vali"]["ndcg@5"] == pytest.approx(best)
    assert report["selected"]["vali_ndcg@5"] == pytest.approx(best)
    for name in ("scores.npz", "model.txt", "DONE"):
        assert (runs["ssl"] / name).is_file()
    assert (runs["pretrain"] / EMBEDDINGS_FILE).is_file()
    # A second run on the same encoder reuses the cached embeddings and gets the same scores.
    ssl = ["baseline", "gbdt-ssl", *DATA, *GBDT]
    again = run([*ssl, f"pretrained={runs['pretrain']}", f"run_dir={tmp_path / 'again'}"])
    assert again["embedding"]["cached"] and not report["embedding"]["cached"]
    with np.load(runs["ssl"] / "scores.npz") as one, np.load(tmp_path / "again/scores.npz") as two:
        np.testing.assert_array_equal(one["test"], two["test"])
    # On a finetuning run, with no embedding as a candidate too.
    # On a finetuning run, with no embedding as a candidate too, in the default run folder:
    # named after the encoder's run, as a sweep names the cell.
    options = ["embedding.components=[0,4]", "embedding.raw=false"]
    ft = run([*ssl, f"pretrained={runs['finetune']}", *options])
    assert ft["method"] == "gbdt-ssl+simclr-rank+full"
    assert ft["embedding"]["candidates"] == ["none", "pca-4"]
    folder = Path(os.environ["LTR_RUNS_DIR"]) / "synthetic/baseline/gbdt-ssl+simclr-rank+full"
    assert (folder / "frac=1/seed=0/DONE").is_file()


def test_gbdt_ssl_on_a_variant_names_the_variant(tmp_path) -> None:
    pretrain = tmp_path / "pretrain"
    run(["pretrain", "simclr-rank", *DATA, *ENCODER, "epochs=1", "monitor.enabled=false",
         "variant=zero0.7", "augment.zero_p=0.7", f"run_dir={pretrain}"])  # fmt: skip
    embedding = ["embedding.components=[4]", "embedding.raw=false"]
    ssl = run(["baseline", "gbdt-ssl", *DATA, *GBDT, f"pretrained={pretrain}", *embedding,
               f"run_dir={tmp_path / 'ssl'}"])  # fmt: skip
    assert ssl["method"] == "gbdt-ssl+simclr-rank@zero0.7"
    assert ssl["pretraining_method"] == "simclr-rank@zero0.7"


def test_gbdt_ssl_bad_input(runs, tmp_path) -> None:
    base = ["baseline", "gbdt-ssl", *DATA, *GBDT, f"run_dir={tmp_path / 'x'}"]
    with pytest.raises(UserError, match="gbdt-ssl needs pretrained="):
        run(base)
    with pytest.raises(UserError, match="encoder takes 12 features; data synthetic has 10"):
        run([*base, "data.synthetic.n_features=10", f"pretrained={runs['pretrain']}"])
    with pytest.raises(UserError, match="pretrained is a key of gbdt-ssl, not of gbdt"):
        run(["baseline", "gbdt", *DATA, f"pretrained={runs['pretrain']}"])


def test_ensemble_end_to_end_and_report(runs, tmp_path) -> None:
    members = f"runs=[{runs['finetune']},{runs['gbdt']},{runs['ssl']}]"
    folder = runs["root"] / "ens"
    report = run(["ensemble", *DATA, members, "normalize=rank", f"run_dir={folder}"])
    assert report["method"] == "ensemble:simclr-rank+full,gbdt,gbdt-ssl+simclr-rank"
    assert report["group"] == "hybrid" and len(report["tried"]) == 66
    assert sum(report["weights"].values()) == pytest.approx(1.0)
    assert report["metrics"]["vali"]["ndcg@5"] == pytest.approx(
        max(t["vali_ndcg@5"] for t in report["tried"])
    )
    assert (folder / "scores.npz").is_file() and (folder / "DONE").is_file()
    assert run(["ensemble", *DATA, members, "normalize=rank", f"run_dir={folder}"]) is None
    with pytest.raises(UserError, match="holds (a run|an ensemble) .*other"):
        run(["ensemble", *DATA, members, f"run_dir={folder}"])  # zscore this time
    uniform = run(["ensemble", *DATA, members, "weights=uniform", f"run_dir={tmp_path / 'u'}"])
    assert len(uniform["tried"]) == 1
    assert list(uniform["weights"].values()) == pytest.approx([1 / 3] * 3)
    # The report finds every run; gbdt-ssl and the DL + GBDT ensemble form the hybrid group.
    from scarce_ltr.reports.report import ReportConfig
    from scarce_ltr.reports.report import main as report_main

    with contextlib.redirect_stdout(io.StringIO()) as out:
        built = report_main(ReportConfig(runs_root=str(runs["root"]), out=str(tmp_path / "rep")))
    groups = {g["group"]: g["member"] for g in built["summary"]["groups"]}
    assert set(groups) == {"gbdt", "pretrained-dl", "hybrid"}
    assert groups["hybrid"] in ("gbdt-ssl+simclr-rank", report["method"])
    assert "hybrid" in out.getvalue()
    assert (tmp_path / "rep" / "dashboard.html").is_file()


# --- sweeps -----------------------------------------------------------------------------------


def test_sweep_plans_gbdt_ssl_on_its_pretraining_job(tmp_path, capsys) -> None:
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    args += ["--dry-run", f"run_dir={tmp_path / 'sweep'}"]
    cells = run([*args, "models=[gbdt,gbdt-ssl+simclr-rank]"])
    out = capsys.readouterr().out
    assert [c["group"] for c in cells] == ["gbdt", "hybrid"]
    pretrain_dir = tmp_path / "sweep/synthetic/pretrain/simclr-rank/seed=0"
    assert "pretrain simclr-rank " in out
    assert "baseline gbdt-ssl " in out and f"pretrained={pretrain_dir}" in out
    assert model_group("ensemble:simclr-rank+full,gbdt") == "hybrid"
    assert model_group("ensemble:gbdt,gbdt") == "gbdt"
    with pytest.raises(UserError, match="needs a pretrained encoder: gbdt-ssl\\+<pretraining"):
        run([*args, "models=[gbdt-ssl]"])
    with pytest.raises(UserError, match="unknown pretraining method 'nope'"):
        run([*args, "models=[gbdt-ssl+nope]"])
    cells = run([*args, "models=[gbdt,gbdt-ssl+simclr-rank,'ensemble:gbdt-ssl+simclr-rank,gbdt']"])
    assert [c["group"] for c in cells] == ["gbdt", "hybrid", "hybrid"]
    out = capsys.readouterr().out.splitlines()
    ensemble = next(line for line in out if line.startswith("[to run] ensemble "))
    assert out.index(ensemble) == len(out) - 2  # planned last, after its members' jobs
    members = [tmp_path / "sweep/synthetic/baseline" / m / "frac=0.5/seed=0" for m in
               ("gbdt-ssl+simclr-rank", "gbdt")]  # fmt: skip
    assert f'runs=["{members[0]}","{members[1]}"]' in ensemble


def test_a_gbdt_ssl_encoder_wider_than_its_weights_is_refused_before_allocating(runs, tmp_path):
    """A hostile bundle.json asking for a 2**19-wide encoder (~160 GB once built) is compared
    with the weights on no device first (`finetune.scorer.built_like`), one line."""
    import shutil
    import time

    from scarce_ltr.serving.ranker import load_ranker

    copy = tmp_path / "bundle"
    shutil.copytree(runs["ssl"] / "bundle", copy)
    manifest = json.loads((copy / "bundle.json").read_text())
    encoder = manifest["model"]["embedding"]["encoder"]  # the chosen candidate reads embeddings
    encoder.update(width=2**19, hidden=2**19)
    (copy / "bundle.json").write_text(json.dumps(manifest))
    start = time.monotonic()
    with pytest.raises(UserError, match="bad encoder description .*widths or layers differ"):
        load_ranker(copy)
    assert time.monotonic() - start < 30
