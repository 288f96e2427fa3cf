"""The estimators of `scarce_ltr.api`: the same runs as ``./run.sh``, the inputs users have, and
one clear message for each bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import sparse
from sklearn.base import clone
from tiny import tiny_data

import scarce_ltr
from scarce_ltr.api import PretrainedRanker, TreeRanker, fit_data, lgbm, load_estimator
from scarce_ltr.api.inputs import as_features
from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.arrays import write_arrays
from scarce_ltr.data.cache import load_split
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.letor import write_letor
from scarce_ltr.data.scarcity import ScarcityConfig, apply_scarcity
from scarce_ltr.data.stage_config import CommonConfig

DATA = [*tiny_data(), "logger=none"]
ENCODER = {"encoder__width": 8, "encoder__hidden": 16, "encoder__n_blocks": 1}
DEEP = {**ENCODER, "epochs": 2, "head_hidden": 16, "pretrain__monitor__enabled": False}
GBDT = {"gbdt__num_threads": 1, "gbdt__max_rounds": 20, "gbdt__early_stopping_rounds": 5}


def cli_keys(params: dict) -> list[str]:
    return [f"{k.replace('__', '.')}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in params.items()]  # fmt: skip


@pytest.fixture(scope="module")
def splits():
    cfg, _ = load_config(CommonConfig, DATA)
    return load_dataset(cfg.data)


def arrays(split, rows=None):
    """``(X, y, qid)`` of a split (its ``rows`` only)."""
    rows = np.arange(split.n_items) if rows is None else rows
    qid = np.repeat(split.qids, split.group_sizes)
    return np.asarray(split.features)[rows], np.asarray(split.labels)[rows], qid[rows]


def drawn_mask(split, fraction: float, seed: int = 0) -> np.ndarray:
    """``[n_groups]`` bool: the train QGs ``./run.sh`` labels at ``fraction`` (its draw)."""
    return apply_scarcity(split, split, ScarcityConfig(fraction=fraction), seed=seed).train_labeled


def at_fraction(split, fraction: float, seed: int = 0):
    """``(X, y, qid)`` of the QGs ``./run.sh`` labels at ``fraction``, and ``(X_u, qid_u)`` of
    the others."""
    mask = drawn_mask(split, fraction, seed=seed)[split.group_index]
    x, y, qid = arrays(split)
    return (x[mask], y[mask], qid[mask]), (x[~mask], qid[~mask])


@pytest.mark.cpu  # bit-equal to the bundle's CPU scores
def test_an_estimator_gives_the_scores_of_the_run_sh_commands(splits, tmp_path) -> None:
    """pretrain + finetune at 10% labels: `./run.sh` on the synthetic data set and the
    estimator on its arrays give the same test scores, bit for bit."""
    train, vali, test = splits["train"], splits["vali"], splits["test"]
    keys = {**DEEP, "seed": 1}
    run(["pretrain", "simclr-rank", *DATA, "epochs=2", "seed=1", "monitor.enabled=false",
         *cli_keys(ENCODER), f"run_dir={tmp_path / 'p'}"])  # fmt: skip
    run(["finetune", "full", *DATA, "epochs=2", "seed=1", "head_hidden=16",
         f"pretrained={tmp_path / 'p'}", "scarcity.fraction=0.1",
         f"run_dir={tmp_path / 'f'}"])  # fmt: skip
    with np.load(tmp_path / "f" / "scores.npz") as saved:
        expected = saved["test"]
    labeled, unlabeled = at_fraction(train, 0.1, seed=1)
    ranker = PretrainedRanker("simclr-rank", "full", **keys)
    assert ranker.fit(*labeled, unlabeled=unlabeled, eval_set=arrays(vali)) is ranker
    assert ranker.n_labeled_groups_ == 3 and ranker.report_["labels"]["train_labeled_groups"] == 3
    x_test, y_test, qid_test = arrays(test)
    np.testing.assert_array_equal(ranker.predict(x_test, qid_test), expected)
    report = json.loads((tmp_path / "f" / "report.json").read_text())
    assert ranker.score(x_test, y_test, qid_test) == report["metrics"]["test"]["ndcg@5"]
    assert [c[0] for c in ranker.commands_] == ["pretrain", "finetune"]
    # the same encoder finetuned at another budget: no pretraining again
    finetune_keys = {k: v for k, v in keys.items() if not k.startswith(("enc", "pre"))}
    again = PretrainedRanker(pretrained=ranker.encoder_, **finetune_keys)
    again.fit(*arrays(train), eval_set=arrays(vali))
    assert [c[0] for c in again.commands_] == ["finetune"]
    assert again.encoder_ is ranker.encoder_ and again.pretrain_run_ is None  # in memory
    assert clone(again).pretrained is ranker.encoder_  # clone shares the encoder, not a copy


def test_a_tree_gives_the_scores_of_run_sh_baseline(splits, tmp_path) -> None:
    train, vali, test = splits["train"], splits["vali"], splits["test"]
    run(["baseline", "gbdt", *DATA, *cli_keys(GBDT), "scarcity.fraction=0.5",
         "data.transform=none", f"run_dir={tmp_path / 'g'}"])  # fmt: skip
    with np.load(tmp_path / "g" / "scores.npz") as saved:
        expected = saved["test"]
    labeled, unlabeled = at_fraction(train, 0.5)
    tree = TreeRanker("gbdt", **GBDT).fit(*labeled, unlabeled=unlabeled, eval_set=arrays(vali))
    np.testing.assert_array_equal(tree.predict(*arrays(test)[::2]), expected)


def frame(x: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(x, columns=[f"f{j}" for j in range(x.shape[1])])


def interleaved(qid: np.ndarray, seed: int = 0) -> np.ndarray:
    """A row order that mixes the QGs and keeps each QG's items in their order."""
    order = np.random.default_rng(seed).permutation(len(qid))
    for q in np.unique(qid):
        at = np.flatnonzero(qid[order] == q)
        order[at] = np.sort(order[at])
    return order


def test_clone_round_trip_and_the_parameter_protocol(splits) -> None:
    ranker = PretrainedRanker("simsiam", "lp", epochs=3, optimizer__lr=1e-4, missing="median")
    assert scarce_ltr.PretrainedRanker is PretrainedRanker and scarce_ltr.TreeRanker is TreeRanker
    params = ranker.get_params()
    assert params["optimizer__lr"] == 1e-4 and params["method"] == "simsiam"
    twin = clone(ranker)
    assert twin is not ranker and twin.get_params() == params
    assert twin.set_params(optimizer__lr=2e-4, strategy="full") is twin
    assert twin.optimizer__lr == 2e-4 and ranker.optimizer__lr == 1e-4
    tree = TreeRanker("gbdt", **GBDT)
    fitted = tree.fit(*arrays(splits["train"]), eval_set=arrays(splits["vali"]))
    assert fitted is tree and tree.n_features_in_ == 12
    assert {"ranker_", "run_", "commands_", "n_features_in_"} <= set(vars(tree))
    assert all(k.endswith("_") or k.startswith("_") for k in vars(tree) if k not in params
               and k not in tree.get_params())  # fmt: skip
    copy = clone(tree)
    assert copy.get_params() == tree.get_params() and not hasattr(copy, "ranker_")
    held_out = copy.fit(*arrays(splits["train"]))  # no eval_set: 20% of the labeled QGs
    assert held_out.n_labeled_groups_ == 24  # 6 of the 30 labeled QGs validate
    copy = clone(tree)
    with pytest.raises(ValueError, match="not fitted"):
        copy.predict(*arrays(splits["test"])[::2])


def test_rows_in_any_order_give_the_same_scores(splits) -> None:
    """QGs interleaved in fit and rows shuffled in predict: the same scores, in input order."""
    train, vali, test = (arrays(splits[s]) for s in ("train", "vali", "test"))
    first = TreeRanker("gbdt", **GBDT).fit(*train, eval_set=vali)
    rows, vali_rows = interleaved(train[2]), interleaved(vali[2], seed=1)
    mixed = TreeRanker("gbdt", **GBDT).fit(
        *(a[rows] for a in train), eval_set=tuple(a[vali_rows] for a in vali)
    )
    expected = first.predict(test[0], test[2])
    shuffled = np.random.default_rng(2).permutation(len(test[2]))
    np.testing.assert_array_equal(mixed.predict(test[0][shuffled], test[2][shuffled]),
                                  expected[shuffled])  # fmt: skip
    assert mixed.score(test[0][shuffled], test[1][shuffled], test[2][shuffled]) == first.score(
        *test
    )
    deep = {"epochs": 1, "head_hidden": 16, **ENCODER}
    first = PretrainedRanker(None, **deep).fit(*train, eval_set=vali)
    mixed = PretrainedRanker(None, **deep).fit(
        *(a[rows] for a in train), eval_set=tuple(a[vali_rows] for a in vali)
    )
    np.testing.assert_array_equal(
        mixed.predict(test[0][shuffled], test[2][shuffled]),
        first.predict(test[0], test[2])[shuffled],
    )


def test_dataframe_columns_are_matched_by_name_and_saved(splits, tmp_path) -> None:
    (x, y, qid), vali, (x_test, _, qid_test) = (arrays(splits[s]) for s in splits)
    tree = TreeRanker("gbdt", **GBDT).fit(
        frame(x), y, qid, eval_set=(frame(vali[0]), vali[1], vali[2])
    )
    assert list(tree.feature_names_in_) == [f"f{j}" for j in range(12)]
    expected = tree.predict(frame(x_test), qid_test)
    reordered = frame(x_test).iloc[:, ::-1].assign(extra=1.0)
    np.testing.assert_array_equal(tree.predict(reordered, qid_test), expected)
    np.testing.assert_array_equal(tree.predict(x_test, qid_test), expected)  # arrays: by position
    with pytest.raises(ValueError, match="lacks the column.*'f3'"):
        tree.predict(frame(x_test).drop(columns="f3"), qid_test)
    saved = tree.save(tmp_path / "saved")
    assert json.loads((saved / "estimator.json").read_text())["feature_names"][3] == "f3"
    loaded = load_estimator(saved)
    np.testing.assert_array_equal(loaded.predict(reordered, qid_test), expected)
    with pytest.raises(ValueError, match="lacks the column"):
        loaded.predict(frame(x_test).drop(columns="f0"), qid_test)
    bundled = scarce_ltr.load_ranker(saved)  # the saved folder is the run's bundle
    order = np.argsort(qid_test, kind="stable")
    np.testing.assert_array_equal(bundled.predict(x_test[order], qid_test[order]), expected[order])


def test_sparse_and_float64_inputs_give_the_arrays_of_the_letor_cache(splits, tmp_path) -> None:
    train, vali = splits["train"], splits["vali"]
    path = tmp_path / "train.txt"
    write_letor(train, path, precision=9)  # float32 round-trips at 9 significant digits
    cached = load_split(path, name="train")
    x, y, qid = arrays(train)
    csr = sparse.csr_matrix(x.astype(np.float64))
    assert_same_bits(as_features(csr).values, np.asarray(cached.features))
    assert_same_bits(as_features(x.astype(np.float64)).values, x)
    tree = TreeRanker("gbdt", **GBDT)
    sets = lgbm.eval_sets(arrays(vali), None, None)
    split = fit_data.read(tree, csr, y, qid, None, None, sets, "auto", {}).train  # fit's train
    for key in ("features", "labels", "offsets", "qids"):
        assert_same_bits(np.asarray(getattr(split, key)), np.asarray(getattr(cached, key)))


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_missing_values_trees_keep_them_deep_models_refuse_or_impute(splits) -> None:
    (x, y, qid), vali, (x_test, _, qid_test) = (arrays(splits[s]) for s in splits)
    x = x.copy()
    x[::7, 3] = np.nan
    tree = TreeRanker("gbdt", **GBDT).fit(frame(x), y, qid, eval_set=vali)
    x_test = x_test.copy()
    x_test[::5, 3] = np.nan
    assert np.isfinite(tree.predict(x_test, qid_test)).all()
    deep = PretrainedRanker(None, "full", epochs=2, head_hidden=16, **ENCODER)
    with pytest.raises(ValueError, match="column 'f3' is NaN .*missing='median'"):
        deep.fit(frame(x), y, qid, eval_set=vali)
    deep.set_params(missing="median").fit(frame(x), y, qid, eval_set=vali)
    assert deep.medians_[3] == np.nanmedian(x[:, 3]) and deep.commands_[0][0] == "finetune"
    assert np.isfinite(deep.predict(x_test, qid_test)).all()
    with pytest.raises(ValueError, match="missing='keep' is for the trees"):
        PretrainedRanker(missing="keep").fit(x, y, qid)


def bad_inputs(x, y, qid, vali) -> list[tuple[str, tuple, dict]]:
    """``(message, fit's arguments, fit's keywords)`` of each bad input."""
    names = frame(x).assign(site=["a"] * len(x))
    all_nan = x.copy()
    all_nan[:, 2] = np.nan
    return [
        ("y has 10 labels; its X has", (x, y[:10], qid), {}),
        ("qid has 5 ids; its X has", (x, y, qid[:5]), {}),
        ("qid must hold integers or other ids; row 0 is 1.5", (x, y, qid + 0.5), {}),
        ("unlabeled X has 11 features; X has 12", (x, y, qid), {"unlabeled": (x[:, 1:], -qid)}),
        ("non-numeric column.*'site'", (names, y, qid), {}),
        ("the labeled set is empty", (x[:0], y[:0], qid[:0]), {"unlabeled": (x, qid)}),
        ("column 2 is NaN in every row", (all_nan, y, qid), {}),
        ("label 31 is outside the relevance grades", (x, np.where(y > 0, 31, 0), qid), {}),
        ("qid .* is in both the labeled and the unlabeled", (x, y, qid), {"unlabeled": (x, qid)}),
        ("eval_set's y has no label above 0", (x, y, qid),
         {"eval_set": (vali[0], vali[1] * 0, vali[2])}),
    ]  # fmt: skip


def test_bad_input_gets_one_clear_message_and_leaves_no_run_folder(splits, tmp_path) -> None:
    (x, y, qid), vali = arrays(splits["train"]), arrays(splits["vali"])
    work = tmp_path / "work"
    for message, args, keywords in bad_inputs(x, y, qid, vali):
        with pytest.raises(ValueError, match=message):
            TreeRanker("gbdt", work_dir=work, **GBDT).fit(*args, **({"eval_set": vali} | keywords))
    with pytest.raises(ValueError, match="unknown keyword 'epoch'"):
        PretrainedRanker(epoch=3, work_dir=work).fit(x, y, qid, eval_set=vali)
    with pytest.raises(ValueError, match="sets scarcity itself"):
        TreeRanker("gbdt", scarcity__fraction=0.5, work_dir=work).fit(x, y, qid, eval_set=vali)
    # a value a stage refuses: its one message, and the fit's folder is gone
    with pytest.raises(UserError, match="gbdt.max_rounds"):
        TreeRanker("gbdt", gbdt__max_rounds=-1, work_dir=work).fit(x, y, qid, eval_set=vali)
    assert not work.exists() or list(work.iterdir()) == []


def test_data_arrays_reads_folders_of_npy_arrays(splits, tmp_path, capsys) -> None:
    for name, split in splits.items():
        write_arrays(split, tmp_path / "d" / name)
    cfg, _ = load_config(CommonConfig, ["data=arrays", f"data.path={tmp_path / 'd'}"])
    assert cfg.data.run_name == "arrays-d"
    for name, split in load_dataset(cfg.data).items():
        assert_same_bits(np.asarray(split.features), np.asarray(splits[name].features))
    run(["data-info", "data=arrays", f"data.path={tmp_path / 'd'}"])
    assert "train" in capsys.readouterr().out
    (tmp_path / "d" / "test" / "features.npy").unlink()
    with pytest.raises(UserError, match=r"missing folders of \.npy arrays:\n.*test/"):
        run(["data-info", "data=arrays", f"data.path={tmp_path / 'd'}"])


FAST_TREES = {
    "gbdt-optuna": {**GBDT, "gbdt__n_trials": 3},
    "catboost": {"catboost__num_threads": 1, "catboost__max_rounds": 20,
                 "catboost__early_stopping_rounds": 5, "catboost__n_trials": 2},
    "xgboost": {"xgboost__num_threads": 1, "xgboost__max_rounds": 20,
                "xgboost__early_stopping_rounds": 5, "xgboost__n_trials": 2},
}  # fmt: skip


@pytest.mark.parametrize("method", FAST_TREES)
def test_every_tree_ranker_fits_on_arrays_with_missing_values(splits, method) -> None:
    (x, y, qid), vali, (x_test, y_test, qid_test) = (arrays(splits[s]) for s in splits)
    x = x.copy()
    x[::5, 0] = np.nan  # taken as missing by each backend
    tree = TreeRanker(method, **FAST_TREES[method]).fit(x, y, qid, eval_set=vali)
    assert tree.ranker_.kind == ("lightgbm" if method.startswith("gbdt") else method)
    assert tree.report_["method"] == method and 0 < tree.score(x_test, y_test, qid_test) <= 1
    x_test = x_test.copy()
    x_test[::3, 0] = np.nan
    assert np.isfinite(tree.predict(x_test, qid_test)).all()


def test_the_hybrid_reuses_an_encoder_or_pretrains_its_own(splits) -> None:
    (x, y, qid), vali, test = (arrays(splits[s]) for s in splits)
    keys = {**GBDT, "embedding__components": [4], "embedding__raw": False}
    deep = PretrainedRanker(None, "full", epochs=1, head_hidden=16, **ENCODER)
    with pytest.raises(ValueError, match="without a pretrained encoder"):
        TreeRanker("gbdt-ssl", pretrained=deep, **keys).fit(x, y, qid, eval_set=vali)
    own = TreeRanker("gbdt-ssl", pretrain__epochs=1, **{f"pretrain__{k}": v for k, v in
                     ENCODER.items()}, **keys)  # fmt: skip
    own.fit(x, y, qid, eval_set=vali)
    assert [c[0] for c in own.commands_] == ["pretrain", "baseline"]
    hybrid = TreeRanker("gbdt-ssl", pretrained=own.encoder_, **keys).fit(x, y, qid, eval_set=vali)
    assert [c[0] for c in hybrid.commands_] == ["baseline"]
    np.testing.assert_array_equal(hybrid.predict(*test[::2]), own.predict(*test[::2]))
    with pytest.raises(ValueError, match="pretrained= is for gbdt-ssl"):
        TreeRanker("gbdt", pretrained=own.encoder_).fit(x, y, qid, eval_set=vali)


def test_the_readme_from_python_section_runs(tmp_path, monkeypatch, capsys) -> None:
    """README's "From Python", on tiny data and budgets."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## From Python") :].split("\n## ", 1)[0]
    code = section.split("```python\n")[1].split("```")[0]
    fast = ", ".join(f"{k}={v!r}" for k, v in DEEP.items() if k != "epochs")
    for old, new in [
        ("SyntheticSpec(seed=0)", "SyntheticSpec(seed=0, n_train_groups=40, n_vali_groups=10, "
         "n_test_groups=10, n_features=12)"),
        ("round(0.05 * len(qids))", "round(0.2 * len(qids))"),
        ("pretrain__epochs=40, finetune__epochs=100", f"pretrain__epochs=1, epochs=2, {fast}"),
        ('TreeRanker("gbdt")', f'TreeRanker("gbdt", **{GBDT!r})'),
    ]:  # fmt: skip
        assert old in code, old
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102
    shown = capsys.readouterr().out
    assert "SimCLR-Rank + full: test NDCG@5 0." in shown and "LightGBM: test NDCG@5 0." in shown
    test, deep = namespace["test"], namespace["deep"]
    expected = deep.predict(test[namespace["features"]], test.qid)
    np.testing.assert_array_equal(namespace["scores"], expected)
    assert (tmp_path / "my-ranker" / "bundle.json").is_file()


def test_a_fit_without_work_dir_writes_no_file(splits, tmp_path, monkeypatch) -> None:
    """The stages run in memory: fit and predict write nothing to the working folder, the runs'
    and the cache's folders or the temporary folder (``TMPDIR``), not even for the fit's length
    (gbdt-ssl hands its encoder on in memory)."""
    import tempfile

    empty = {name: tmp_path / name for name in ("cwd", "runs", "cache", "tmp")}
    for folder in empty.values():
        folder.mkdir()
    monkeypatch.chdir(empty["cwd"])
    monkeypatch.setenv("LTR_RUNS_DIR", str(empty["runs"]))
    monkeypatch.setenv("LTR_CACHE_DIR", str(empty["cache"]))
    monkeypatch.setenv("TMPDIR", str(empty["tmp"]))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    made: list[str] = []  # temporary folders, gone by the end but written all the same
    mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(
        tempfile, "mkdtemp", lambda *a, **k: made.append(mkdtemp(*a, **k)) or made[-1]
    )
    (labeled, unlabeled), vali = at_fraction(splits["train"], 0.5), arrays(splits["vali"])
    x_test, _, qid_test = arrays(splits["test"])
    for ranker in (
        PretrainedRanker("simclr-rank", "full", **DEEP),
        TreeRanker("gbdt", **GBDT),
        TreeRanker(n_estimators=5, verbose=-1),
        # its encoder pretrained in fit and handed on in memory, never saved for the hybrid
        TreeRanker(
            "gbdt-ssl",
            pretrain__epochs=1,
            embedding__components=[4],
            embedding__raw=False,
            **{f"pretrain__{k}": v for k, v in ENCODER.items()},
            **GBDT,
        ),
    ):
        given = {} if ranker.method == "lightgbm" else {"unlabeled": unlabeled}  # LGBMRanker's
        ranker.fit(*labeled, eval_set=vali, **given)
        assert np.isfinite(ranker.predict(x_test, qid_test)).all() and ranker.run_ is None
    written = {name: sorted(p for p in folder.rglob("*") if not _torch_own(p, folder))
               for name, folder in empty.items()}  # fmt: skip
    assert written == {name: [] for name in empty} and made == []


def _torch_own(path: Path, folder: Path) -> bool:
    """torch's compiler cache folder, which torch makes in TMPDIR on first use, empty."""
    top = path.relative_to(folder).parts[0]
    return top.startswith("torchinductor_") and not any(p.is_file() for p in path.rglob("*"))
