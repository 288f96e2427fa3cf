"""``data=table``: Parquet files and ``.npz`` columns read into the cache LETOR files use."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny import start_together, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data import tables
from scarce_ltr.data.cache import load_split
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.letor import write_letor
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.data.tables import load_table


@pytest.fixture(scope="module")
def splits():
    cfg, _ = load_config(CommonConfig, tiny_data())
    return load_dataset(cfg.data)


def columns(split, order=None) -> dict[str, np.ndarray]:
    """One row per item: qid, label and f0..f11 (rows in ``order``), a text column too."""
    order = np.arange(split.n_items) if order is None else order
    out = {"qid": np.repeat(split.qids, split.group_sizes)[order]}
    out |= {f"f{j}": np.asarray(split.features)[order, j] for j in range(split.n_features)}
    out["label"] = np.asarray(split.labels)[order].astype(np.int32)
    return out


def write_parquet(path, table: dict[str, np.ndarray], *, text: bool = True) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    data = dict(table) | ({"site": np.array(["a"] * len(table["qid"]))} if text else {})
    pq.write_table(pa.table(data), path)


def assert_same_arrays(got, expected) -> None:
    for key in ("features", "labels", "offsets", "qids"):
        a, b = np.asarray(getattr(got, key)), np.asarray(getattr(expected, key))
        assert a.shape == b.shape and a.tobytes() == b.astype(a.dtype).tobytes(), key


def test_npz_and_parquet_give_the_cache_arrays_of_the_letor_text(splits, tmp_path) -> None:
    train = splits["train"]
    write_letor(train, tmp_path / "train.txt", precision=9)
    letor = load_split(tmp_path / "train.txt", name="train")
    shuffled = np.random.default_rng(0).permutation(train.n_items)
    # rows of a QG keep their order; QGs interleave: the table's qid order does not matter
    for q in train.qids:
        at = np.flatnonzero(np.repeat(train.qids, train.group_sizes)[shuffled] == q)
        shuffled[at] = np.sort(shuffled[at])
    np.savez(tmp_path / "train.npz", **columns(train, shuffled))
    assert_same_arrays(load_table(tmp_path / "train.npz", name="train"), letor)
    write_parquet(tmp_path / "train.parquet", columns(train, shuffled))
    from_parquet = load_table(tmp_path / "train.parquet", name="train")
    assert_same_arrays(from_parquet, letor)
    assert isinstance(from_parquet.features, np.memmap)  # from the cache, memory-mapped
    (tmp_path / "parts").mkdir()
    half = train.n_items // 2
    for i, rows in enumerate((shuffled[:half], shuffled[half:])):
        write_parquet(tmp_path / "parts" / f"part-{i}.parquet", columns(train, rows))
    assert_same_arrays(load_table(tmp_path / "parts", name="train"), letor)


def test_data_table_on_the_command_line(splits, tmp_path) -> None:
    for name, split in splits.items():
        write_parquet(tmp_path / f"{name}.parquet", columns(split))
    keys = ["data=table", f"data.path={tmp_path}", "logger=none", "data.transform=none"]
    gbdt = ["gbdt.num_threads=1", "gbdt.max_rounds=10", "gbdt.early_stopping_rounds=5"]
    table = run(["baseline", "gbdt", *keys, *gbdt, f"run_dir={tmp_path / 'a'}"])
    text = run(["baseline", "gbdt", *tiny_data(), "logger=none", "data.transform=none", *gbdt,
                f"run_dir={tmp_path / 'b'}"])  # fmt: skip
    assert table["metrics"]["test"]["ndcg@5"] == text["metrics"]["test"]["ndcg@5"]
    picked = ["data=table", f"data.path={tmp_path}", "data.features=[f3,f1]"]
    cfg, _ = load_config(CommonConfig, picked)
    assert load_dataset(cfg.data)["vali"].n_features == 2


def test_a_table_without_its_qid_or_label_column_names_its_columns(splits, tmp_path) -> None:
    table = columns(splits["train"])
    np.savez(tmp_path / "t.npz", **{k: v for k, v in table.items() if k != "qid"})
    with pytest.raises(UserError, match=r"no data.qid column 'qid'; its columns: f0, f1, .*label"):
        load_table(tmp_path / "t.npz", name="train")
    np.savez(tmp_path / "u.npz", **table)
    with pytest.raises(UserError, match="no data.label column 'grade'.*give data.label="):
        load_table(tmp_path / "u.npz", name="train", label="grade")
    with pytest.raises(UserError, match="row 0 is 0.5, not an integer qid"):
        np.savez(tmp_path / "v.npz", **(table | {"qid": table["qid"] - 0.5}))
        load_table(tmp_path / "v.npz", name="train")
    with pytest.raises(UserError, match="label 31 is outside the relevance grades"):
        np.savez(tmp_path / "w.npz", **(table | {"label": table["label"] + 31}))
        load_table(tmp_path / "w.npz", name="train")
    with pytest.raises(UserError, match=r"missing tables \(Parquet.*\n.*vali\[\.parquet"):
        run(["data-info", "data=table", f"data.path={tmp_path}", "data.splits.train=u"])


def test_without_pyarrow_a_parquet_file_gets_one_clear_message(tmp_path, monkeypatch) -> None:
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    with pytest.raises(UserError, match=r"needs pyarrow.*pip install 'scarce-ltr\[parquet\]'"):
        load_table(tmp_path / "train.parquet", name="train")


def test_one_table_with_a_split_column(splits, tmp_path) -> None:
    table: dict[str, list[np.ndarray]] = {}
    for name, split in splits.items():
        for key, values in (columns(split) | {"split": np.array([name] * split.n_items)}).items():
            table.setdefault(key, []).append(values)
    (tmp_path / "all").mkdir()
    np.savez(tmp_path / "all" / "items.npz", **{k: np.concatenate(v) for k, v in table.items()})
    keys = ["data=table", f"data.path={tmp_path / 'all'}", "data.split_column=split"]
    cfg, _ = load_config(CommonConfig, keys)
    for name, split in load_dataset(cfg.data).items():
        assert_same_arrays(split, splits[name])
    cfg, _ = load_config(CommonConfig, [*keys, "data.splits.vali=valid"])
    with pytest.raises(UserError, match="no row has split=valid .*; it has test, train, vali"):
        load_dataset(cfg.data)
    # The one table given as data.path itself.
    one = ["data=table", f"data.path={tmp_path / 'all' / 'items.npz'}", "data.split_column=split"]
    cfg_one, _ = load_config(CommonConfig, one)
    for name, split in load_dataset(cfg_one.data).items():
        assert_same_arrays(split, splits[name])
    cfg_one, _ = load_config(CommonConfig, one[:2])
    with pytest.raises(UserError, match=r"is one table: give data.split_column=<column"):
        load_dataset(cfg_one.data)
    np.savez(tmp_path / "all" / "more.npz", qid=np.zeros(1))
    with pytest.raises(UserError, match="one table; it holds items.npz, more.npz"):
        load_dataset(cfg.data)


def test_predict_table_scores_a_parquet_file_as_the_run_scored_its_test_split(splits, tmp_path):
    from scarce_ltr.api import TreeRanker, predict_table

    train, vali, test = (columns(splits[s]) for s in ("train", "vali", "test"))
    names = [f"f{j}" for j in range(12)]
    frame = {
        s: pd.DataFrame({n: c[n] for n in names}) for s, c in (("train", train), ("vali", vali))
    }
    # work_dir: the fit's run folder kept, scored as a ./run.sh run is (columns by position)
    tree = TreeRanker("gbdt", gbdt__num_threads=1, gbdt__max_rounds=10, work_dir=tmp_path / "w")
    tree.fit(
        frame["train"], train["label"], train["qid"],
        eval_set=(frame["vali"], vali["label"], vali["qid"]),
    )  # fmt: skip
    rows = np.random.default_rng(0).permutation(len(test["qid"]))
    write_parquet(tmp_path / "new.parquet", {k: v[rows] for k, v in test.items()})
    result = predict_table(tree.run_, tmp_path / "new.parquet")
    pq = pytest.importorskip("pyarrow.parquet")
    out = pq.read_table(result["out"]).to_pydict()
    assert result["out"] == tmp_path / "new.scores.parquet" and out["qid"] == list(
        test["qid"][rows]
    )
    expected = tree.predict(np.column_stack([test[n] for n in names]), test["qid"])
    np.testing.assert_array_equal(out["score"], expected[rows])
    assert result["metrics"]["ndcg@5"] == tree.score(
        np.column_stack([test[n] for n in names]), test["label"], test["qid"]
    )
    first = np.flatnonzero(np.asarray(out["qid"]) == test["qid"][0])
    assert sorted(np.asarray(out["rank"])[first]) == list(range(1, len(first) + 1))
    np.savez(tmp_path / "wide.npz", **{k: v for k, v in test.items()}, extra=test["f0"])
    with pytest.raises(UserError, match="13 feature columns .* takes 12"):
        predict_table(tree.run_, tmp_path / "wide.npz")
    # a saved estimator's columns are taken by name, in any order
    saved = tree.save(tmp_path / "saved")
    assert json.loads((saved / "estimator.json").read_text())["feature_names"] == names
    reordered = {k: test[k] for k in ["label", *names[::-1], "qid"]}
    np.savez(tmp_path / "reordered.npz", **reordered, extra=test["f0"])
    result = predict_table(saved, tmp_path / "reordered.npz", tmp_path / "out.csv")
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert lines[0] == "qid,position,score,rank" and len(lines) == len(test["qid"]) + 1
    np.testing.assert_array_equal([float(line.split(",")[2]) for line in lines[1:]], expected)
    np.savez(tmp_path / "less.npz", **{k: v for k, v in reordered.items() if k != "f3"})
    with pytest.raises(UserError, match="lacks the column.*'f3'"):
        predict_table(saved, tmp_path / "less.npz")


def test_predict_on_the_command_line_scores_a_table_as_a_letor_file(splits, tmp_path) -> None:
    """``./run.sh predict <run> data.path=new.parquet``: scores beside the qids in Parquet, in
    <run>/predictions/ by default, equal to the scores of the same items as LETOR text."""
    pq = pytest.importorskip("pyarrow.parquet")
    run_dir = tmp_path / "gbdt" / "frac=1" / "seed=0"
    gbdt = ["gbdt.num_threads=1", "gbdt.max_rounds=10", "logger=none"]
    run(["baseline", "gbdt", *tiny_data(), *gbdt, f"run_dir={run_dir}"])
    test = splits["test"]
    write_letor(test, tmp_path / "new.txt", precision=9)
    run(["predict", str(run_dir), f"data.path={tmp_path / 'new.txt'}", f"out={tmp_path}"])
    letor = np.loadtxt(tmp_path / "new.csv", delimiter=",", skiprows=1)
    write_parquet(tmp_path / "new.parquet", columns(test))
    result = run(["predict", str(run_dir), f"data.path={tmp_path / 'new.parquet'}"])
    (entry,) = result.values()
    assert entry["out"] == str(run_dir / "predictions" / "new.parquet")
    table = pq.read_table(entry["out"]).to_pydict()
    got = np.column_stack([table[k] for k in ("qid", "position", "score", "rank")])
    np.testing.assert_array_equal(got, letor)
    assert entry["metrics"]["ndcg@5"] == pytest.approx(
        run(["predict", str(run_dir), f"data.path={tmp_path / 'new.txt'}",
             f"out={tmp_path / 'again.csv'}"])[str(tmp_path / "new.txt")]["metrics"]["ndcg@5"],
        abs=1e-12,
    )  # fmt: skip
    np.savez(tmp_path / "new.npz", **columns(test))
    csv = run(["predict", str(run_dir), f"data.path={tmp_path / 'new.npz'}", f"out={tmp_path}"])
    assert next(iter(csv.values()))["out"] == str(tmp_path / "new.csv")  # CSV for an .npz
    np.testing.assert_array_equal(
        np.loadtxt(tmp_path / "new.csv", delimiter=",", skiprows=1), letor
    )


def _load_table_in_child(path: Path, root: Path, out: Path, start) -> None:
    start.wait()
    split = tables.load_table(path, name="train", cache_root=root)
    np.save(out, np.asarray(split.features))


def test_processes_starting_together_on_a_new_table_read_it_once(tmp_path, monkeypatch) -> None:
    """The parse cache's rules hold for tables too: one reader builds the entry under its lock,
    the others open it; an edit keeping size and modification time is read again."""
    import os
    import time

    rng = np.random.default_rng(0)
    path = tmp_path / "train.npz"
    qid = np.repeat(np.arange(20), 5)
    np.savez(path, qid=qid, label=rng.integers(0, 3, 100), f0=rng.normal(size=100))
    marker, real = tmp_path / "reads", tables.read_table

    def counted(*args, **kwargs):
        with open(marker, "a") as f:
            f.write("read\n")
        time.sleep(0.3)  # widen the window in which the others look at the entry
        return real(*args, **kwargs)

    monkeypatch.setattr(tables, "read_table", counted)
    root = tmp_path / "cache"
    outs = [tmp_path / f"out{i}.npy" for i in range(3)]
    assert start_together(_load_table_in_child, [(path, root, o) for o in outs]) == [0, 0, 0]
    assert marker.read_text().count("read") == 1
    for out in outs:
        np.testing.assert_array_equal(np.load(out)[:, 0], np.float32(np.load(path)["f0"]))
    # The same size and modification time, other values: read again.
    stat = path.stat()
    np.savez(path, qid=qid, label=rng.integers(0, 3, 100), f0=rng.normal(size=100))
    assert path.stat().st_size == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = tables.load_table(path, name="train", cache_root=root)
    np.testing.assert_array_equal(again.features[:, 0], np.float32(np.load(path)["f0"]))
