"""Model bundles and ``predict``: a finished run scores raw items as it scored its test split."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import small_encoder, tiny_data

import scarce_ltr
from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.letor import write_letor
from scarce_ltr.data.stage_config import CommonConfig

# Bundles score as their runs did, bit for bit: runs trained on the CPU (tests/conftest.py).
pytestmark = pytest.mark.cpu

DATA = [*tiny_data(), "logger=none"]
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=30", "gbdt.early_stopping_rounds=10"]
DEEP = ["deep.lrs=[5e-3]", "epochs=2"]


KINDS = ("full", "lp", "mp", "combine", "attention", "mlp", "gbdt", "pca", "ssl", "resnet",
         "deepfm", "dcnv2", "dasalc", "ens")  # fmt: skip
TORCH_KINDS = ("full", "lp", "mp", "combine", "attention", "mlp", "resnet", "deepfm", "dcnv2",
               "dasalc")  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One finished tiny run of each model kind a bundle holds."""
    root = tmp_path_factory.mktemp("serving")
    torch.set_num_threads(1)
    out = {name: root / name for name in ("pretrain", "pretrain-attention", *KINDS)}
    pretrained = f"pretrained={out['pretrain']}"
    run(["pretrain", "simclr-rank", *DATA, *small_encoder(), "epochs=1", "monitor.enabled=false",
         f"run_dir={out['pretrain']}"])  # fmt: skip
    run(["pretrain", "simclr-rank", *DATA, *small_encoder(), "encoder.kind=attention", "epochs=1",
         "monitor.enabled=false", f"run_dir={out['pretrain-attention']}"])  # fmt: skip
    for strategy in ("full", "lp", "mp"):
        run(["finetune", strategy, *DATA, "epochs=2", "head_hidden=16", pretrained,
             f"run_dir={out[strategy]}"])  # fmt: skip
    run(["finetune", "full", *DATA, "epochs=2", "head_hidden=16",
         f"pretrained={out['pretrain-attention']}", f"run_dir={out['attention']}"])  # fmt: skip
    run(["finetune", "full", *DATA, "epochs=2", "head_hidden=16", "pretrained=none",
         "encoder.kind=mlp", *small_encoder(), f"run_dir={out['mlp']}"])  # fmt: skip
    run(["finetune", "combine", *DATA, "epochs=2", f"runs=[{out['mp']},{out['full']}]",
         f"run_dir={out['combine']}"])  # fmt: skip
    run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={out['gbdt']}"])
    run(["baseline", "gbdt-pca", *DATA, *GBDT, "gbdt.pca_components=[3]",
         f"run_dir={out['pca']}"])  # fmt: skip
    run(["baseline", "gbdt-ssl", *DATA, *GBDT, pretrained, "embedding.components=[4]",
         "embedding.raw=false",
         f"run_dir={out['ssl']}"])  # fmt: skip
    for deep in ("resnet", "deepfm", "dcnv2", "dasalc"):
        width = [] if deep == "resnet" else ["deep.hidden=16"]  # resnet's is deep.encoder's
        run(["baseline", deep, *DATA, *DEEP, *width, f"run_dir={out[deep]}"])
    run(["ensemble", *DATA, f"runs=[{out['full']},{out['gbdt']}]", f"run_dir={out['ens']}"])
    return out


def raw_test():
    cfg, _ = load_config(CommonConfig, DATA)
    return load_dataset(cfg.data)["test"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_bundle_scores_the_test_split_as_the_run_did(runs, kind) -> None:
    manifest = json.loads((runs[kind] / "bundle" / "bundle.json").read_text())
    transform = "log1p" if kind == "dasalc" else "log1p-standardize"  # DASALC's own (qin2021)
    assert manifest["n_features"] == 12 and manifest["transform"]["kind"] == transform
    assert manifest["selection"]["split"] == "vali" and manifest["run"]["git"] is not None
    ranker = scarce_ltr.load_ranker(runs[kind])
    with np.load(runs[kind] / "scores.npz") as saved:
        expected = saved["test"]
    np.testing.assert_array_equal(ranker.score_split(raw_test()), expected)


def test_predict_writes_scores_and_ranks_and_prints_ndcg(runs, tmp_path, capsys) -> None:
    test = raw_test()
    path = tmp_path / "new.txt"
    write_letor(test, path, precision=9)  # float32 round-trips at 9 significant digits
    result = run(["predict", str(runs["gbdt"]), f"data.path={path}", f"out={tmp_path / 'p.csv'}"])
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == "qid,position,score,rank" and len(lines) == test.n_items + 1
    rows = np.array([[float(v) for v in line.split(",")] for line in lines[1:]])
    with np.load(runs["gbdt"] / "scores.npz") as saved:
        np.testing.assert_array_equal(rows[:, 2], saved["test"])
    first = rows[: test.group_sizes[0]]
    assert sorted(first[:, 3]) == list(range(1, len(first) + 1))
    assert first[np.argmax(first[:, 2]), 3] == 1
    report = json.loads((runs["gbdt"] / "report.json").read_text())
    metrics = result[str(path)]["metrics"]
    assert metrics["ndcg@5"] == pytest.approx(report["metrics"]["test"]["ndcg@5"], abs=1e-12)
    # MRR, MAP and ERR@k as training computed them (the test file holds the data set's top grade)
    for key in ("mrr", "map", "err@1", "err@5", "err@10"):
        assert metrics[key] == pytest.approx(report["metrics"]["test"][key], abs=1e-12), key
    out = capsys.readouterr().out
    shown = [f"NDCG@{k} {metrics[f'ndcg@{k}']:.4f}" for k in (1, 3, 5, 10)]
    shown += [f"ERR@{k} {metrics[f'err@{k}']:.4f}" for k in (1, 3, 5, 10)]
    shown += [f"MRR {metrics['mrr']:.4f}", f"MAP {metrics['map']:.4f}"]
    assert all(text in out for text in shown), out
    # a higher top grade lowers every ERR stop probability; a label above it is refused
    higher = run(["predict", str(runs["gbdt"]), f"data.path={path}", f"out={tmp_path / 'q.csv'}",
                  "max_grade=9"])[str(path)]["metrics"]  # fmt: skip
    assert higher["err@5"] < metrics["err@5"] and higher["mrr"] == metrics["mrr"]
    with pytest.raises(UserError, match="max_grade"):
        run(["predict", str(runs["gbdt"]), f"data.path={path}", f"out={tmp_path / 'r.csv'}",
             "max_grade=0.5"])  # fmt: skip


def test_predict_prints_the_outlier_versions_of_every_metric(tmp_path, capsys) -> None:
    """A run whose histogram rule (gap 3) flags test QGs: predict's Outlier-NDCG, -ERR, -P, -MRR
    and -MAP over them equal the run's report."""
    gbdt = tmp_path / "gbdt"
    test = raw_test()
    report = run(["baseline", "gbdt", *DATA, *GBDT, "data.outliers.gap=3", f"run_dir={gbdt}"])
    test_metrics = report["metrics"]["test"]
    assert test_metrics["n_outlier_groups"] > 0
    path = tmp_path / "test.txt"
    write_letor(test, path, precision=9)
    capsys.readouterr()
    result = run(["predict", str(gbdt), f"data.path={path}", f"out={tmp_path / 'p.csv'}"])
    metrics = result[str(path)]["metrics"]
    out = capsys.readouterr().out
    assert metrics["n_outlier_groups"] == test_metrics["n_outlier_groups"]
    for key in ("outlier_ndcg@5", "outlier_err@5", "outlier_precision@5", "outlier_mrr"):
        assert metrics[key] == pytest.approx(test_metrics[key], abs=1e-12), key
    assert metrics["outlier_map"] == pytest.approx(test_metrics["outlier_map"], abs=1e-12)
    names = {"NDCG@5": "ndcg@5", "ERR@5": "err@5", "P@5": "precision@5", "MRR": "mrr", "MAP": "map"}
    shown = ", ".join(f"Outlier-{n} {metrics[f'outlier_{m}']:.4f}" for n, m in names.items())
    assert f"{shown} (n={metrics['n_outlier_groups']})" in out


def test_the_python_api(runs) -> None:
    test = raw_test()
    ranker = scarce_ltr.load_ranker(runs["full"] / "bundle")
    qids = np.repeat(test.qids, test.group_sizes)
    scores = ranker.predict(np.asarray(test.features), qids)
    with np.load(runs["full"] / "scores.npz") as saved:
        np.testing.assert_array_equal(scores, saved["test"])
    one_group = ranker.predict(np.asarray(test.features[:7]))
    assert one_group.shape == (7,)
    with pytest.raises(UserError, match="consecutive"):
        ranker.predict(np.asarray(test.features[:3]), np.array([1, 2, 1]))


def test_a_bundle_loads_in_a_fresh_process_from_a_folder_with_core_and_data(runs, tmp_path):
    for shadow in ("core", "data"):
        (tmp_path / shadow).mkdir()
        (tmp_path / shadow / "__init__.py").write_text("raise ImportError('shadowed')\n")
    code = (
        "import sys, numpy as np, scarce_ltr\n"
        f"r = scarce_ltr.load_ranker({str(runs['ens'])!r})\n"
        "print(r.kind, r.predict(np.ones((5, 12), dtype=np.float32)).shape)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ensemble", "(5,)"]


def test_bad_input_gets_one_clear_message(runs, tmp_path) -> None:
    wide = tmp_path / "wide.txt"
    wide.write_text("0 qid:1 1:0.5 20:1\n1 qid:1 1:0.2\n")
    with pytest.raises(UserError, match="wide.txt:1: feature index 20 is beyond the 12 features"):
        run(["predict", str(runs["gbdt"]), f"data.path={wide}", f"out={tmp_path / 'w.csv'}"])
    assert not (tmp_path / "w.csv").exists()
    with pytest.raises(UserError, match="no model bundle"):
        run(["predict", str(runs["pretrain"]), f"data.path={wide}"])
    scattered = tmp_path / "scattered.txt"
    scattered.write_text("0 qid:1 1:0.5\n1 qid:2 1:0.2\n0 qid:1 1:0.1\n")
    with pytest.raises(UserError, match="qid"):
        run(["predict", str(runs["gbdt"]), f"data.path={scattered}"])
    with pytest.raises(UserError, match="no such file or folder"):
        run(["predict", str(runs["gbdt"]), f"data.path={tmp_path / 'missing.txt'}"])


def test_the_readme_section_runs(runs, tmp_path, monkeypatch) -> None:
    """The commands and the snippet of README's "Deploy a ranker", on a tiny run."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## Deploy a ranker") :].split("\n## ", 1)[0]
    shell, python = section.split("```bash\n")[1].split("```")[0], section.split("```python\n")[1]
    python = python.split("```")[0]
    readme_run = "runs/synthetic/baseline/gbdt/frac=0.02/seed=0"
    monkeypatch.chdir(tmp_path)
    write_letor(raw_test(), tmp_path / "new.txt", precision=9)
    for command in ("predict", "export"):
        line = next(line for line in shell.splitlines() if line.startswith(f"./run.sh {command}"))
        run([arg.replace(readme_run, str(runs["gbdt"])) for arg in line.split("#")[0].split()[1:]])
    assert (tmp_path / "scores.csv").read_text().startswith("qid,position,score,rank")
    assert (tmp_path / "raw-model.txt").read_text().startswith("tree")
    namespace: dict = {}
    exec(python.replace(readme_run, str(runs["gbdt"])), namespace)  # noqa: S102
    assert namespace["scores"].shape == (10,)
    assert len(namespace["file_scores"]) == namespace["split"].n_items == raw_test().n_items


def groups_of_1_7_300(test) -> list[np.ndarray]:
    """Raw QGs of 1, 7 and 300 items made of the test split's items."""
    features = np.asarray(test.features)
    return [features[:1], features[:7], features[np.resize(np.arange(test.n_items), 300)]]


def assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    scale = max(1.0, float(np.max(np.abs(expected))))
    assert np.max(np.abs(got - expected)) / scale <= 1e-5


# ONNX export takes seconds per model: lp, mp and deepfm add no graph piece of their own.
EXPORTS = [(kind, "torchscript") for kind in TORCH_KINDS] + [
    (kind, "onnx") for kind in ("full", "combine", "attention", "resnet", "dcnv2", "dasalc")
]


@pytest.mark.parametrize(("kind", "fmt"), EXPORTS)
def test_exports_score_raw_features_as_the_bundle(runs, kind, fmt, tmp_path) -> None:
    from scarce_ltr.serving.export import score_exported

    out = tmp_path / f"model.{fmt}"
    result = run(["export", str(runs[kind]), f"format={fmt}", f"out={out}"])
    assert result["out"] == str(out) and out.is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
    ranker = scarce_ltr.load_ranker(runs[kind])
    groups = groups_of_1_7_300(raw_test())
    for group in groups:
        assert_close(score_exported(fmt, out, group), ranker.predict(group))
    # One padded batch of the three QGs (dynamic B and L) gives each QG's scores.
    batch = np.zeros((3, 300, 12), dtype=np.float32)
    mask = np.zeros((3, 300), dtype=bool)
    for i, group in enumerate(groups):
        batch[i, : len(group)], mask[i, : len(group)] = group, True
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        scores = session.run(None, {"features": batch, "mask": mask})[0]
    else:
        scores = torch.jit.load(str(out))(torch.from_numpy(batch), torch.from_numpy(mask)).numpy()
    for i, group in enumerate(groups):
        assert_close(scores[i, : len(group)], ranker.predict(group))
        assert np.all(scores[i, len(group) :] == 0)


def test_a_lightgbm_export_takes_raw_features(runs, tmp_path) -> None:
    import lightgbm as lgb

    out = tmp_path / "raw.txt"
    run(["export", str(runs["gbdt"]), "format=lightgbm", f"out={out}"])
    test = raw_test()
    with np.load(runs["gbdt"] / "scores.npz") as saved:
        expected = saved["test"]
    np.testing.assert_array_equal(lgb.Booster(model_file=str(out)).predict(test.features), expected)
    bundled = lgb.Booster(model_file=str(runs["gbdt"] / "bundle" / "model.txt"))
    assert not np.array_equal(bundled.predict(test.features), expected)  # not raw features


@pytest.mark.parametrize(
    ("kind", "fmt", "message"),
    [
        ("ens", "onnx", "ensemble mixes its members.*Export each member bundle"),
        ("gbdt", "onnx", "format=onnx cannot hold a lightgbm model; use format=lightgbm"),
        ("full", "lightgbm", "cannot hold a torch model; use format=onnx or format=torchscript"),
        ("pca", "lightgbm", "also reads PCA or encoder-embedding columns"),
        ("ssl", "lightgbm", "also reads PCA or encoder-embedding columns"),
        ("pretrain", "onnx", "no model bundle"),
    ],
)
def test_export_refuses_what_a_format_cannot_hold(runs, kind, fmt, message, tmp_path) -> None:
    with pytest.raises(UserError, match=message):
        run(["export", str(runs[kind]), f"format={fmt}", f"out={tmp_path / 'x'}"])
    assert not list(tmp_path.iterdir())


def test_predict_streams_in_pieces_of_whole_groups(runs, tmp_path, monkeypatch, capsys) -> None:
    """A file read in many small blocks (QGs cut by block ends), gzipped, or without qid: and
    with a .query file scores as the run did, with the run's NDCG and Outlier-NDCG."""
    import gzip

    from scarce_ltr.data.letor import blocks

    test = raw_test()
    plain = tmp_path / "test.txt"
    write_letor(test, plain, precision=9)
    (tmp_path / "test.txt.gz").write_bytes(gzip.compress(plain.read_bytes()))
    bare = tmp_path / "bare.txt"
    bare.write_text("".join(line.split(" ", 2)[0] + " " + line.split(" ", 2)[2] + "\n"
                            for line in plain.read_text().splitlines()))  # fmt: skip
    (tmp_path / "bare.txt.query").write_text("".join(f"{n}\n" for n in test.group_sizes))
    monkeypatch.setattr(blocks, "CHUNK_BYTES", 700)  # a few items per block
    report = json.loads((runs["ssl"] / "report.json").read_text())["metrics"]["test"]
    with np.load(runs["ssl"] / "scores.npz") as saved:
        expected = saved["test"]
    for source in (plain, tmp_path / "test.txt.gz", bare):
        out = tmp_path / f"{source.name}.csv"
        result = run(["predict", str(runs["ssl"]), f"data.path={source}", f"out={out}"])
        rows = np.loadtxt(out, delimiter=",", skiprows=1)
        np.testing.assert_array_equal(rows[:, 2], expected)
        metrics = result[str(source)]["metrics"]
        assert metrics["ndcg@5"] == pytest.approx(report["ndcg@5"], abs=1e-12)
        assert metrics["n_outlier_groups"] == report.get("n_outlier_groups", 0)
        out = capsys.readouterr().out
        if report.get("n_outlier_groups"):
            for key in ("outlier_ndcg@5", "outlier_err@5", "outlier_mrr", "outlier_map"):
                assert metrics[key] == pytest.approx(report[key], abs=1e-12), key
            assert f"Outlier-MRR {metrics['outlier_mrr']:.4f}" in out
            assert f"Outlier-ERR@5 {metrics['outlier_err@5']:.4f}" in out
        else:
            assert "Outlier-NDCG: no outlier QG" in out


def test_a_wheel_installs_and_predicts_in_a_fresh_environment(runs, tmp_path) -> None:
    """The wheel carries code and configs; the environment reuses this one's dependencies
    (a path entry, not its site hooks, so this checkout's editable install stays out)."""
    import shutil
    import site
    import sysconfig

    # Built from a copy: setuptools writes build/ and *.egg-info/ beside the sources.
    source = tmp_path / "source"
    skip = shutil.ignore_patterns(".*", "runs", "build", "*.egg-info", "__pycache__")
    shutil.copytree(Path(__file__).resolve().parents[1], source, ignore=skip)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(wheels), str(source)],
                   check=True, capture_output=True)  # fmt: skip
    env = tmp_path / "env"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(env)}))
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    wheel = next(wheels.glob("scarce_ltr-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                    str(purelib), str(wheel)], check=True, capture_output=True)  # fmt: skip
    data = tmp_path / "new.txt"
    write_letor(raw_test(), data, precision=9)
    out = tmp_path / "scores.csv"
    code = ("import sys, scarce_ltr, scarce_ltr.cli as c;"
            " print(scarce_ltr.__file__, file=sys.stderr);"
            f" sys.argv = ['scarce-ltr', 'predict', {str(runs['gbdt'])!r}, 'data.path={data}',"
            f" 'out={out}']; c.main()")  # fmt: skip
    done = subprocess.run([str(env / "bin" / "python"), "-c", code], cwd=tmp_path,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert str(purelib) in done.stderr.splitlines()[0]  # the wheel's copy, not the checkout
    assert (purelib / "scarce_ltr" / "py.typed").is_file()  # its type hints ship (PEP 561)
    rows = np.loadtxt(out, delimiter=",", skiprows=1)
    with np.load(runs["gbdt"] / "scores.npz") as saved:
        np.testing.assert_array_equal(rows[:, 2], saved["test"])


@pytest.mark.parametrize("kind", ["full", "attention", "gbdt", "pca", "ssl", "dasalc", "ens"])
def test_scoring_in_pieces_gives_the_same_bits(runs, kind, monkeypatch) -> None:
    """Large inputs are transformed and scored piece by piece (a reused buffer), cut where a
    scoring batch ends. With batches of 40 items and pieces of 37 the scores equal scoring the
    whole split at once, bit for bit."""
    from scarce_ltr.data import pieces

    test = raw_test()
    ranker = scarce_ltr.load_ranker(runs[kind])
    for model in [m.model for m in getattr(ranker.model, "members", [])] + [ranker.model]:
        if hasattr(model, "item_budget"):
            model.item_budget = 40
        if getattr(model, "embedding", None) is not None:
            model.embedding.item_budget = 40
    whole = ranker.score_split(test)
    monkeypatch.setattr(pieces, "PIECE_ITEMS", 37)
    assert len(list(pieces.pieces_of(test, 40))) > 2
    np.testing.assert_array_equal(ranker.score_split(test), whole)
