"""Issue 48, robustness round 3: tables matched by column name, one missing-value story, and the
inputs that crashed or trained silently wrong (each test failed before its fix)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import DataFormatError, UserError
from scarce_ltr.data.arrays import read_arrays, write_arrays
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.letor import read_letor
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.data.transforms import FeatureTransform, fit_transform
from scarce_ltr.serving.ranker import load_ranker

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=10", "logger=none"]


@pytest.fixture(scope="module")
def tables() -> dict[str, dict[str, np.ndarray]]:
    """Columns per split of the tiny synthetic data: qid, f0..f11 (float64), label."""
    cfg, _ = load_config(CommonConfig, tiny_data())
    out = {}
    for name, split in load_dataset(cfg.data).items():
        columns = {"qid": np.repeat(split.qids, split.group_sizes)}
        x = np.asarray(split.features, dtype=np.float64)
        columns |= {f"f{j}": x[:, j] for j in range(split.n_features)}
        columns["label"] = np.asarray(split.labels).astype(np.int32)
        out[name] = columns
    return out


def write(folder: Path, tables, edit=None) -> Path:
    """train/vali/test.parquet of ``tables``; ``edit(split, columns) -> pyarrow table``."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, columns in tables.items():
        table = pa.table(dict(columns))
        if edit is not None:
            table = edit(split, dict(columns), table)
        pq.write_table(table, folder / f"{split}.parquet")
    return folder


def metrics(result: dict) -> str:
    """A run's metrics as text: NaN (an Outlier-NDCG without outliers) equals NaN."""
    return json.dumps(result["metrics"], sort_keys=True)


def gbdt(folder: Path, run_dir: Path, *extra: str) -> dict:
    return run(["baseline", "gbdt", "data=table", f"data.path={folder}", *GBDT, *extra,
                f"run_dir={run_dir}"])  # fmt: skip


def with_column(split: str, which: str, values):
    """An edit: ``values(column)`` replaces column ``which`` of ``split``."""

    def edit(name, columns, table):
        if name != split:
            return table
        return table.set_column(table.schema.get_field_index(which), which, values(columns))

    return edit


# 1. Columns matched by name across splits and at predict.


def test_a_reordered_vali_trains_as_the_same_table_in_order(tables, tmp_path) -> None:
    """Before: columns matched by position, vali NDCG@5 fell without a message."""
    same = gbdt(write(tmp_path / "a", tables), tmp_path / "ra")

    def reverse(name, columns, table):
        return table.select(table.column_names[::-1]) if name == "vali" else table

    turned = gbdt(write(tmp_path / "b", tables, reverse), tmp_path / "rb")
    assert metrics(turned) == metrics(same)


def test_a_column_missing_from_one_split_is_named(tables, tmp_path) -> None:
    def drop(name, columns, table):
        return table.drop_columns(["f3"]) if name == "test" else table

    folder = write(tmp_path, tables, drop)
    with pytest.raises(UserError, match=r"test.parquet lacks the column\(s\) 'f3' of .*train"):
        gbdt(folder, tmp_path / "r")


def test_a_text_column_in_train_only_shifts_nothing(tables, tmp_path, capsys) -> None:
    """Before: a numeric column of vali only (or a text one of train only) shifted the rest."""
    same = gbdt(write(tmp_path / "a", tables), tmp_path / "ra")

    def extra(name, columns, table):
        if name == "train":
            return table.add_column(1, "site", pa.array(["a"] * len(table)))
        return table.add_column(2, "clicks", pa.array(np.ones(len(table))))

    got = gbdt(write(tmp_path / "b", tables, extra), tmp_path / "rb")
    assert metrics(got) == metrics(same)
    err = capsys.readouterr().err
    assert re.search(r"vali.parquet: numeric column\(s\) 'clicks' not in .*train.parquet", err)


def test_predict_of_a_table_run_takes_the_columns_by_name(tables, tmp_path) -> None:
    """Before: `predict` of a data=table run on a reordered table scored by position."""
    run_dir = tmp_path / "r"
    gbdt(write(tmp_path / "d", tables), run_dir)
    assert load_ranker(run_dir).manifest["feature_names"] == [f"f{j}" for j in range(12)]
    test = pa.table(tables["test"])
    pq.write_table(test, tmp_path / "in_order.parquet")
    pq.write_table(test.select(test.column_names[::-1]), tmp_path / "reversed.parquet")
    scores = {}
    for name in ("in_order", "reversed"):
        run(["predict", str(run_dir), f"data.path={tmp_path / name}.parquet",
             f"out={tmp_path / name}.csv"])  # fmt: skip
        scores[name] = np.loadtxt(tmp_path / f"{name}.csv", delimiter=",", skiprows=1)[:, 2]
    np.testing.assert_array_equal(scores["reversed"], scores["in_order"])
    pq.write_table(test.drop_columns(["f5"]), tmp_path / "less.parquet")
    with pytest.raises(UserError, match=r"less.parquet lacks the column\(s\) 'f5'"):
        run(["predict", str(run_dir), f"data.path={tmp_path / 'less.parquet'}"])


def test_a_bundle_without_column_names_still_predicts_by_position(tables, tmp_path) -> None:
    """Bundles written before names were kept: the table's numeric columns, in order."""
    run_dir = tmp_path / "r"
    gbdt(write(tmp_path / "d", tables), run_dir)
    pq.write_table(pa.table(tables["test"]), tmp_path / "t.parquet")
    run(["predict", str(run_dir), f"data.path={tmp_path / 't.parquet'}", f"out={tmp_path}/a.csv"])
    manifest = run_dir / "bundle" / "bundle.json"
    old = json.loads(manifest.read_text())
    del old["feature_names"]
    manifest.write_text(json.dumps(old))
    run(["predict", str(run_dir), f"data.path={tmp_path / 't.parquet'}", f"out={tmp_path}/b.csv"])
    assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text()


# 2. One missing-value story.


def nulls_in(split: str, column: str = "f2", every: int = 3):
    def values(columns):
        data = columns[column]
        return pa.array(data, mask=np.arange(len(data)) % every == 0)  # nulls, its type kept

    return with_column(split, column, values)


def test_the_transform_is_fitted_on_the_finite_values() -> None:
    """Before: one NaN made its column's mean and std NaN, so the whole column became NaN."""
    x = np.array([[1.0, 5.0], [np.nan, 7.0], [3.0, 9.0], [5.0, np.nan]], dtype=np.float32)
    split = RankingSplit(x, np.zeros(4, np.float32), np.array([0, 2, 4]), np.arange(2), "t")
    for kind in ("standardize", "log1p-standardize", "qg-standardize"):
        out = np.asarray(fit_transform(kind, split)(split).features)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(x))  # NaN stays where it was
    fitted = fit_transform("standardize", split)
    np.testing.assert_allclose(fitted.mean, [3.0, 7.0])
    np.testing.assert_allclose(fitted.std, [np.std([1, 3, 5]), np.std([5, 7, 9])])
    finite = x[[0, 2]][:, :1]
    alone = RankingSplit(finite, np.zeros(2, np.float32), np.array([0, 2]), np.arange(1), "t")
    assert fit_transform("standardize", alone).mean[0] == 2.0


def test_finite_input_fits_bit_identically() -> None:
    """The NaN-aware fit changes nothing for finite input (the arithmetic of before)."""
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(500, 4)) * [1, 1e6, 1e-3, 7] + [0, 1e9, 5, -3]).astype(np.float32)
    split = RankingSplit(x, np.zeros(500, np.float32), np.array([0, 200, 500]), np.arange(2), "t")
    fitted = fit_transform("standardize", split)
    xs = x.astype(np.float64) - x[0].astype(np.float64)
    mean = xs.sum(axis=0) / 500
    var = np.maximum((xs * xs).sum(axis=0) / 500 - mean**2, 0.0)
    assert fitted.mean.tobytes() == (mean + x[0].astype(np.float64)).tobytes()
    assert fitted.std.tobytes() == np.sqrt(var).tobytes()


def test_trees_keep_a_missing_value_and_deep_models_name_it(tables, tmp_path) -> None:
    """Before: the column became NaN in the bundle; finetuning died in a long traceback."""
    folder = write(tmp_path / "d", tables, nulls_in("train"))
    result = gbdt(folder, tmp_path / "g")
    assert np.isfinite(result["metrics"]["test"]["ndcg@5"])
    transform = load_ranker(tmp_path / "g").transform
    assert transform.mean is None or np.isfinite(transform.mean).all()
    for stage in (["baseline", "resnet", "epochs=1"], ["baseline", "gbdt-pca", *GBDT[:2]]):
        with pytest.raises(UserError) as info:
            run([*stage, "data=table", f"data.path={folder}", "logger=none",
                 f"run_dir={tmp_path / stage[1]}"])  # fmt: skip
        message = str(info.value)
        assert "train.parquet: column 'f2' is missing (null or NaN) at row 0" in message
        assert "needs every value" in message and "\n" not in message


def test_a_missing_vali_value_is_named_for_the_histogram_detector(tables, tmp_path) -> None:
    folder = write(tmp_path, tables, nulls_in("vali"))
    with pytest.raises(UserError, match=r"vali.parquet: column 'f2' .* data.outliers.method=none"):
        gbdt(folder, tmp_path / "a")
    assert np.isfinite(gbdt(folder, tmp_path / "b", "data.outliers.method=none")["metrics"]
                       ["vali"]["ndcg@5"])  # fmt: skip


def test_a_deep_bundle_never_scores_a_missing_value(tables, tmp_path) -> None:
    """Before: NaN scores were written and ranked (exit 0)."""
    run_dir = tmp_path / "r"
    run(["baseline", "resnet", "data=table", f"data.path={write(tmp_path / 'd', tables)}",
         "epochs=1", "logger=none", f"run_dir={run_dir}"])  # fmt: skip
    table = nulls_in("test", every=7)("test", tables["test"], pa.table(tables["test"]))
    pq.write_table(table, tmp_path / "new.parquet")
    out = tmp_path / "out.csv"
    with pytest.raises(UserError, match=r"new.parquet: column 'f2' is missing \(NaN\) at row 0"):
        run(["predict", str(run_dir), f"data.path={tmp_path / 'new.parquet'}", f"out={out}"])
    assert not out.exists()
    ranker = load_ranker(run_dir)
    with pytest.raises(UserError, match="needs every value"):
        ranker.predict(np.full((3, 12), np.nan, dtype=np.float32))
    # a bundle fitted on missing values before this version: NaN statistics, named
    mean = ranker.transform.mean.copy()
    mean[2] = np.nan
    ranker.transform = FeatureTransform(ranker.transform.kind, mean=mean, std=ranker.transform.std)
    with pytest.raises(UserError, match="its transform's statistics are NaN.*train the run again"):
        ranker.predict(np.ones((3, 12), dtype=np.float32))


@pytest.mark.parametrize(
    "value, what", [(np.inf, "infinite"), (-np.inf, "infinite"), (1e300, "beyond float32")]
)
def test_inf_and_values_beyond_float32_are_named(tables, tmp_path, value, what) -> None:
    def values(columns):
        data = columns["f4"].copy()
        data[6] = value
        return pa.array(data)

    folder = write(tmp_path, tables, with_column("train", "f4", values))
    with pytest.raises(UserError, match=rf"train.parquet: column 'f4', row 6: .* is {what}"):
        gbdt(folder, tmp_path / "r")


def test_arrays_refuse_inf_and_keep_nan_for_the_trees(tables, tmp_path) -> None:
    cfg, _ = load_config(CommonConfig, tiny_data())
    splits = load_dataset(cfg.data)
    for name, split in splits.items():
        x = np.array(split.features)
        if name == "train":
            x[4, 1] = np.nan
        write_arrays(split.with_features(x), tmp_path / "a" / name)
    keys = ["data=arrays", f"data.path={tmp_path / 'a'}", "data.outliers.method=none"]
    assert np.isfinite(run(["baseline", "gbdt", *keys, *GBDT, f"run_dir={tmp_path / 'g'}"])
                       ["metrics"]["test"]["ndcg@5"])  # fmt: skip
    with pytest.raises(UserError, match=r"train: column 1 of features.npy is missing .* row 4"):
        run(["baseline", "resnet", *keys, "epochs=1", "logger=none", f"run_dir={tmp_path / 'd'}"])
    x = np.array(splits["vali"].features)
    x[2, 3] = np.inf
    write_arrays(splits["vali"].with_features(x), tmp_path / "a" / "vali")
    with pytest.raises(UserError, match=r"vali/features.npy: column '3', row 2: inf is infinite"):
        run(["data-info", *keys])


# 3. Inputs that crashed, and a few the issue did not name.


def test_bad_tables_are_one_line_naming_the_file_and_column(tables, tmp_path) -> None:
    n = len(tables["train"]["qid"])
    cases = {
        "words": (with_column("train", "label", lambda c: pa.array(["good"] * n)),
                  r"train.parquet: the data.label column 'label' holds string, not relevance"),
        "lists": (with_column("train", "label", lambda c: pa.array([[1, 2]] * n)),
                  r"the data.label column 'label' holds list<.*>, not relevance grades"),
        "null label": (nulls_in("train", "label", 5),
                       r"train.parquet \(column label\): row 0: label nan is outside"),
        "null qid": (nulls_in("train", "qid", 9), r"train.parquet: column qid: row 0 is nan"),
        "qid 1e19": (with_column("train", "qid", lambda c: pa.array(c["qid"] * 1e19)),
                     r"column qid: row 0 is 1e\+19, beyond 2\^53"),
        "twice": (lambda s, c, t: pa.Table.from_arrays([*t.columns, t.column("f1")],
                                                       names=[*t.column_names, "f1"]),
                  r"column name\(s\) 'f1' appear more than once"),
        "empty vali": (lambda s, c, t: t.slice(0, 0) if s == "vali" else t,
                       r"vali.parquet: no rows; the vali split needs at least one QG"),
        "all missing": (nulls_in("train", "f7", 1),
                        r"train.parquet: column 'f7' is missing \(null or NaN\) in every row"),
    }  # fmt: skip
    for name, (edit, expected) in cases.items():
        folder = write(tmp_path / name.replace(" ", "_"), tables, edit)
        with pytest.raises(UserError, match=expected) as info:
            run(["data-info", "data=table", f"data.path={folder}"])
        assert "\n" not in str(info.value), name


def test_float_qids_beyond_int64_are_no_longer_one_query(tables, tmp_path) -> None:
    """Before: every qid beyond int64 became -2^63, one QG, in training and at predict."""
    run_dir = tmp_path / "r"
    gbdt(write(tmp_path / "d", tables), run_dir)
    test = pa.table(tables["test"] | {"qid": tables["test"]["qid"] * 1e19})
    pq.write_table(test, tmp_path / "new.parquet")
    with pytest.raises(UserError, match=r"new.parquet: column qid: row 0 is \S+, beyond 2\^53"):
        run(["predict", str(run_dir), f"data.path={tmp_path / 'new.parquet'}"])


def test_a_corrupt_npz_is_one_line(tables, tmp_path) -> None:
    for name, columns in tables.items():
        np.savez(tmp_path / f"{name}.npz", **columns)
    data = bytearray((tmp_path / "train.npz").read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    (tmp_path / "train.npz").write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"train.npz: not readable as .npz \(BadZipFile"):
        run(["data-info", "data=table", f"data.path={tmp_path}"])


@pytest.mark.parametrize("digits", [63, 64, 65, 200])
def test_numbers_of_64_or_more_digits_in_letor_text(tmp_path, digits) -> None:
    """Before: a 47-line broadcast ValueError (the digit count was packed in 6 bits)."""
    path = tmp_path / "f.txt"
    path.write_text(f"1 qid:1 1:0.5 2:0.{'1' * digits}\n0 qid:1 1:1 2:2\n")
    np.testing.assert_allclose(read_letor(path).features[0], [0.5, 1 / 9], rtol=1e-6)
    path.write_text(f"1 qid:1 1:0.5 2:2\n0 qid:1 1:1 2:{'1' * digits}\n")
    with pytest.raises(
        DataFormatError, match=r"f.txt:2: value of feature 2 is 1+(\.\.\.)?, beyond"
    ):
        read_letor(path)


_ULIMIT = """
import re, resource, sys
from pathlib import Path
from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor import read_letor
vm = int(re.search(r"VmSize:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
try:
    read_letor(sys.argv[1])
except DataFormatError as exc:
    print(exc)
"""


def test_a_feature_index_beyond_ulimit_v_is_refused_before_allocating(tmp_path) -> None:
    """Before: MemAvailable and cgroups only; under ``ulimit -v`` numpy's MemoryError."""
    path = tmp_path / "f.txt"
    path.write_text("".join(f"0 qid:{i // 10} 999999:1\n" for i in range(100)))  # 400 MB
    child = subprocess.run([sys.executable, "-c", _ULIMIT, str(path)], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    assert re.fullmatch(r".*f.txt:1: 100 items x 999,999 features need 381.5 MiB .*renumber.*\n",
                        child.stdout)  # fmt: skip


def test_arrays_with_float_qids_beyond_int64_or_text_labels_are_named(tmp_path) -> None:
    cfg, _ = load_config(CommonConfig, tiny_data())
    for name, split in load_dataset(cfg.data).items():
        write_arrays(split, tmp_path / name)
    qids = np.load(tmp_path / "train" / "qids.npy")
    np.save(tmp_path / "train" / "qids.npy", qids * 1e19)
    with pytest.raises(UserError, match=r"train/qids.npy: qid 0 is 1e\+19, not an integer qid"):
        read_arrays(tmp_path / "train", name="train")
    np.save(tmp_path / "train" / "qids.npy", qids)
    labels = np.load(tmp_path / "train" / "labels.npy")
    np.save(tmp_path / "train" / "labels.npy", labels.astype(str))
    with pytest.raises(UserError, match=r"train/labels.npy holds <U32, not numbers"):
        read_arrays(tmp_path / "train", name="train")
