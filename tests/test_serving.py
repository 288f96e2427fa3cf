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

DATA = [*tiny_data(), "logger=none"]
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=30", "gbdt.early_stopping_rounds=10"]
DEEP = ["deep.lrs=[5e-3]", "deep.hidden=16", "epochs=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One finished tiny run of each model kind a bundle holds."""
    root = tmp_path_factory.mktemp("serving")
    torch.set_num_threads(1)
    out = {name: root / name for name in ("pretrain", "full", "lp", "gbdt", "pca", "deepfm", "ens")}
    pretrained = f"pretrained={out['pretrain']}"
    run(["pretrain", "simclr-rank", *DATA, *small_encoder(), "epochs=1", "monitor.enabled=false",
         f"run_dir={out['pretrain']}"])  # fmt: skip
    for strategy in ("full", "lp"):
        run(["finetune", strategy, *DATA, "epochs=2", "head_hidden=16", pretrained,
             f"run_dir={out[strategy]}"])  # fmt: skip
    run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={out['gbdt']}"])
    run(["baseline", "gbdt-pca", *DATA, *GBDT, "gbdt.pca_components=[3]",
         f"run_dir={out['pca']}"])  # fmt: skip
    run(["baseline", "deepfm", *DATA, *DEEP, f"run_dir={out['deepfm']}"])
    run(["ensemble", *DATA, f"runs=[{out['full']},{out['gbdt']}]", f"run_dir={out['ens']}"])
    return out


def raw_test():
    cfg, _ = load_config(CommonConfig, DATA)
    return load_dataset(cfg.data)["test"]


@pytest.mark.parametrize("kind", ["full", "lp", "gbdt", "pca", "deepfm", "ens"])
def test_a_bundle_scores_the_test_split_as_the_run_did(runs, kind) -> None:
    manifest = json.loads((runs[kind] / "bundle" / "bundle.json").read_text())
    assert manifest["n_features"] == 12 and manifest["transform"]["kind"] == "log1p-standardize"
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
    assert "NDCG@5" in capsys.readouterr().out


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
    with pytest.raises(UserError, match="has 20 features; the model .* takes 12"):
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
    """The commands and the snippet of README's "Use a trained ranker", on a tiny run."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## Use a trained ranker") :].split("\n## ", 1)[0]
    shell, python = section.split("```bash\n")[1].split("```")[0], section.split("```python\n")[1]
    python = python.split("```")[0]
    readme_run = "runs/synthetic/baseline/gbdt/frac=0.02/seed=0"
    monkeypatch.chdir(tmp_path)
    write_letor(raw_test(), tmp_path / "new.txt", precision=9)
    predict = next(line for line in shell.splitlines() if "predict" in line)
    args = predict.split("#")[0].split()[1:]
    run([arg.replace(readme_run, str(runs["gbdt"])) for arg in args])
    assert (tmp_path / "scores.csv").read_text().startswith("qid,position,score,rank")
    namespace: dict = {}
    exec(python.replace(readme_run, str(runs["gbdt"])), namespace)  # noqa: S102
    assert namespace["scores"].shape == (10,)
    assert len(namespace["file_scores"]) == namespace["split"].n_items == raw_test().n_items
