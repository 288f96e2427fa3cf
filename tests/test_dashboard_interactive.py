"""The dashboard's interactive part: data from the run folders, and the page in headless
Chromium (scripts run, tables sort, curves and the per-QG view are drawn)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from scarce_ltr.cli import run
from scarce_ltr.core.files import npz_bytes
from scarce_ltr.reports import interactive

MODELS = {
    "gbdt": ("baseline", 0.40),
    "resnet": ("baseline", 0.45),
    "simclr-rank+full": ("finetune", 0.5),
}


def _scores(folder: Path, shift: float) -> None:
    """Three test QGs of four items; the last QG is an outlier."""
    labels = np.array([2, 0, 1, 0, 0, 1, 0, 0, 1, 0, 2, 0], dtype=np.float32)
    rng = np.random.default_rng(int(shift * 100))
    test = rng.normal(size=12) + shift * labels
    offsets = np.array([0, 4, 8, 12])
    data = npz_bytes(
        vali=np.zeros(4), test=test, vali_offsets=np.array([0, 4]), test_offsets=offsets,
        vali_qids=np.array([9]), test_qids=np.array([1, 2, 3]), test_labels=labels,
        test_outliers=np.array([False, False, True]),
    )  # fmt: skip
    (folder / "scores.npz").write_bytes(data)


def _runs(root: Path) -> None:
    encoder = root / "enc"
    encoder.mkdir(parents=True)
    history = [
        {"epoch": e, "loss": 5.0 - e, "monitor": {"knn_ndcg@5": 0.2 + e / 10}} for e in (1, 2)
    ]
    (encoder / "report.json").write_text(json.dumps({"stage": "pretrain", "history": history}))
    for model, (stage, test) in MODELS.items():
        for seed in (0, 1):
            folder = root / model / f"seed={seed}"
            folder.mkdir(parents=True)
            config = {"data": {"name": "synthetic"}, "seed": seed, "scarcity": {"fraction": 0.1}}
            (folder / "config.yaml").write_text(json.dumps(config))
            report = {
                "stage": stage,
                "seed": seed,
                "seconds": 10.0 * (1 + len(model)),
                "metrics": {
                    "vali": {"ndcg@5": test + 0.1},
                    "test": {
                        "ndcg@5": test + seed / 100,
                        "outlier_ndcg@5": test / 2 + seed / 50,
                        "n_outlier_groups": 1,
                    },
                },
            }
            if stage == "finetune":
                report |= {
                    "strategy": "full",
                    "pretrained": str(encoder),
                    "pretraining_method": "simclr-rank",
                }
                report["history"] = [
                    {"epoch": e, "vali_ndcg@5": 0.3 + e / 20, "train_loss": 2 - e / 5}
                    for e in range(4)
                ]
                report |= {"labels": {"train_labeled_items": 300}, "train_seconds_per_epoch": 0.5}
            elif model == "gbdt":
                report |= {"method": model, "grid": [{"vali_ndcg@5": 0.3}, {"vali_ndcg@5": 0.35}]}
            else:
                report["method"] = model
            (folder / "report.json").write_text(json.dumps(report))
            (folder / "DONE").write_text("")
            _scores(folder, test * 4 + seed)


def test_collect_reads_curves_costs_and_per_qg(tmp_path: Path) -> None:
    _runs(tmp_path)
    report = run(["report", f"runs_root={tmp_path}"])
    data = report["interactive"]
    by_model = {r["model"]: r for r in data["runs"] if r["seed"] == 0}
    full = by_model["simclr-rank+full"]
    assert full["curves"]["vali NDCG@5 per epoch"][0] == [0, 0.3]
    assert full["curves"]["pretraining loss"] == [[1, 4.0], [2, 3.0]]
    assert np.allclose(full["curves"]["pretraining k-NN probe"], [[1, 0.3], [2, 0.4]])
    assert full["items_per_s"] == 600.0
    assert by_model["gbdt"]["curves"]["vali NDCG@5 per grid point (trees)"] == [[1, 0.3], [2, 0.35]]
    qg = by_model["gbdt"]["qg"]
    assert qg["qids"] == [1, 2, 3] and qg["outlier"] == [False, False, True]
    # gbdt, seed 0: the scores _scores wrote (shift 4 * 0.40), NDCG@5 per QG by a plain loop.
    labels = np.array([2, 0, 1, 0, 0, 1, 0, 0, 1, 0, 2, 0], dtype=np.float32)
    scores = np.random.default_rng(160).normal(size=12) + 1.6 * labels
    assert qg["ndcg"] == pytest.approx([_ndcg5(labels[o : o + 4], scores[o : o + 4])
                                        for o in (0, 4, 8)], abs=1e-5)  # fmt: skip
    colours = data["colours"]
    assert len(set(colours.values())) == len(colours) == 3  # one colour per model


def _ndcg5(labels: np.ndarray, scores: np.ndarray) -> float:
    """Gain 2^y - 1, discount 1 / log2(rank + 1), ties in input order (the one convention)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    dcg = sum((2 ** labels[i] - 1) / np.log2(r + 2) for r, i in enumerate(order[:5]))
    ideal = sorted(labels, reverse=True)[:5]
    return dcg / sum((2**y - 1) / np.log2(r + 2) for r, y in enumerate(ideal))


def test_colours_stay_distinct_past_ten_models() -> None:
    colours = interactive.model_colours([f"m{i}" for i in range(16)])
    assert len(set(colours.values())) == 16


def test_page_runs_its_script_and_sorts_in_headless_chromium(tmp_path: Path) -> None:
    from headless_chromium import dump_dom, ensure_chromium, external_urls, render

    chromium, reason = ensure_chromium()
    if chromium is None:
        pytest.skip(reason)
    root = tmp_path / "runs"
    _runs(root)
    run(["report", f"runs_root={root}"])
    page = root / "report" / "dashboard.html"
    html = page.read_text()
    assert external_urls(html) == []  # offline: nothing to fetch
    png, dom, console = render(chromium, page, tmp_path)
    assert png.is_file()
    assert console == []  # no error, nothing logged
    # Drawn by the script: the cost table, one plotly chart per curve kind, the per-QG scatter.
    assert 'id="ltr-cost-table"' in dom
    assert dom.count('class="ltr-chart js-plotly-plot"') >= 4
    qg = dom.split('id="ltr-qg-chart"')[1]
    assert 'class="main-svg"' in qg and ">outlier QGs<" in qg and "test QGs scored by both" in dom
    assert dom.count('type="checkbox"') == 3
    # #sort=<table>:<column> sorts on load: mean test NDCG (column 5), highest first.
    for fragment, order in (("#sort=ltr-cost-table:5", [0.505, 0.455, 0.405]),
                            ("#sort=ltr-cost-table:5:asc", [0.405, 0.455, 0.505])):  # fmt: skip
        table = dump_dom(chromium, page, tmp_path, fragment=fragment)[0]
        table = table.split('id="ltr-cost-table"')[1]
        table = table.split("</table>")[0]
        means = [float(v) for v in re.findall(r"<td>(0\.\d{4})</td></tr>", table)]
        assert means == order


def test_a_deep_baseline_shows_its_chosen_learning_rates_epochs() -> None:
    history = [
        {"epoch": 0, "vali_ndcg@5": 0.2},
        {"epoch": 1, "vali_ndcg@5": 0.4, "train_loss": 1.5},
    ]
    shown = interactive.curves({"selected": {"lr": 0.01, "history": history}})
    assert shown == {"vali NDCG@5 per epoch": [[0, 0.2], [1, 0.4]], "train loss": [[1, 1.5]]}
