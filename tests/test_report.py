"""``./run.sh report``: gathered table, means and stds, Welch p-values, validation-best members,
CSV and dashboard files, the dashboard rendered by headless Chromium, t-SNE of an encoder."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from fake_sweep import run_cell, write_manifest
from scipy import stats as scipy_stats

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.reports.curve_stats import crossover
from scarce_ltr.reports.report import ReportConfig, main

SEEDS = (0, 1, 2)
FRACTIONS = (0.02, 0.5)
GROUP = {
    "gbdt": "gbdt",
    "gbdt-pseudo": "gbdt",
    "simclr-rank+full": "pretrained-dl",
    "simsiam+full": "pretrained-dl",
}
# (model, fraction) -> per-seed (vali ndcg@5, test ndcg@5, test outlier_ndcg@5).
# At 2%, gbdt-pseudo and simsiam+full are best on TEST but their group-mates gbdt and
# simclr-rank+full are best on VALIDATION: the report must pick the latter.
VALUES = {
    ("gbdt", 0.02): [(0.50, 0.40, 0.30), (0.52, 0.42, 0.33), (0.51, 0.41, 0.31)],
    ("gbdt-pseudo", 0.02): [(0.48, 0.43, 0.32), (0.49, 0.44, 0.30), (0.47, 0.45, 0.35)],
    ("simclr-rank+full", 0.02): [(0.60, 0.46, 0.36), (0.62, 0.47, 0.38), (0.61, 0.49, 0.37)],
    ("simsiam+full", 0.02): [(0.58, 0.50, 0.40), (0.59, 0.52, 0.41), (0.57, 0.51, 0.39)],
    ("gbdt", 0.5): [(0.70, 0.60, 0.50), (0.71, 0.61, 0.52), (0.72, 0.62, 0.51)],
    ("gbdt-pseudo", 0.5): [(0.69, 0.59, 0.49), (0.70, 0.60, 0.50), None],  # seed 2 failed
    ("simclr-rank+full", 0.5): [(0.66, 0.55, 0.45), (0.67, 0.56, 0.47), (0.65, 0.57, 0.44)],
    ("simsiam+full", 0.5): [(0.64, 0.54, 0.46), (0.66, 0.53, 0.43), (0.65, 0.58, 0.42)],
}
KS = (1, 3, 5, 10)


def _metrics(vali: float, test: float, outlier: float) -> dict:
    # Other cutoffs get values apart from @5 so that a wrong key shows.
    return {
        "vali": {**{f"ndcg@{k}": vali - 0.01 * (k != 5) for k in KS}, "n_groups_evaluated": 100},
        "test": {
            **{f"ndcg@{k}": test - 0.01 * (k != 5) for k in KS},
            **{f"outlier_ndcg@{k}": outlier - 0.01 * (k != 5) for k in KS},
            **{f"err@{k}": test - 0.2 - 0.01 * (k != 5) for k in KS},
            **{f"outlier_err@{k}": outlier - 0.2 - 0.01 * (k != 5) for k in KS},
            "mrr": test + 0.1,
            "map": test + 0.05,
            "outlier_mrr": outlier + 0.1,
            "outlier_map": outlier + 0.05,
            "n_groups_evaluated": 100,
            "n_outlier_groups": 7,
        },
        "val_labels": "full",
        "policy": "skip",
        "outliers": {"method": "histogram"},
    }


def make_sweep(
    root: Path, name: str = "demo", *, taus: dict | None = None, values: dict | None = None
) -> Path:
    """Fake run dirs and a manifest under ``root/sweeps/<name>``; returns the sweep folder.

    ``taus`` maps the fractions of `VALUES` to binary-feedback thresholds instead; ``values``
    replaces `VALUES`.
    """
    folder = root / "sweeps" / name
    cells = []
    for (model, key), per_seed in (values or VALUES).items():
        fraction, tau = (1.0, taus[key]) if taus else (key, None)
        report = {"method": model}
        if "+" in model:
            method, strategy = model.split("+")
            report = {"strategy": strategy, "pretrained": "/x", "pretraining_method": method}
        for seed, values in zip(SEEDS, per_seed, strict=True):
            cells.append(
                run_cell(
                    folder, "synthetic", model, dataset="synthetic", fraction=fraction, tau=tau,
                    stage="finetune" if "+" in model else "baseline",
                    group=GROUP.get(model, "pretrained-dl"), seed=seed,
                    metrics=_metrics(*values) if values else {}, report=report,
                    status="failed" if values is None else "done",
                )
            )  # fmt: skip
    return write_manifest(folder, cells)


def column(model: str, fraction: float, index: int) -> list[float]:
    return [v[index] for v in VALUES[(model, fraction)] if v is not None]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[dict, Path, str]:
    root = tmp_path_factory.mktemp("report") / "runs"
    folder = make_sweep(root)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = main(ReportConfig(sweep="demo", runs_root=str(root)))
    return report, folder / "report", out.getvalue()


def _entry(entries: list[dict], **match) -> dict:
    found = [e for e in entries if all(e[k] == v for k, v in match.items())]
    assert len(found) == 1, match
    return found[0]


def test_model_means_and_stds(built) -> None:
    report, _, _ = built
    models = report["summary"]["models"]
    for (model, fraction), _ in VALUES.items():
        entry = _entry(models, model=model, setting=f"frac={fraction:g}")
        test, outlier = column(model, fraction, 1), column(model, fraction, 2)
        assert entry["n_seeds"] == len(test)
        assert entry["test_mean"] == pytest.approx(np.mean(test))
        assert entry["test_std"] == pytest.approx(np.std(test, ddof=1))
        assert entry["outlier_mean"] == pytest.approx(np.mean(outlier))
        assert entry["outlier_std"] == pytest.approx(np.std(outlier, ddof=1))
        assert entry["vali_mean"] == pytest.approx(np.mean(column(model, fraction, 0)))


def test_validation_best_member_not_test_best(built) -> None:
    groups = built[0]["summary"]["groups"]
    pretrained = _entry(groups, group="pretrained-dl", setting="frac=0.02")
    gbdt = _entry(groups, group="gbdt", setting="frac=0.02")
    # simsiam+full and gbdt-pseudo have the higher TEST means; validation picks the others.
    assert np.mean(column("simsiam+full", 0.02, 1)) > np.mean(column("simclr-rank+full", 0.02, 1))
    assert pretrained["member"] == "simclr-rank+full"
    assert gbdt["member"] == "gbdt"
    assert pretrained["test_mean"] == pytest.approx(np.mean(column("simclr-rank+full", 0.02, 1)))
    assert _entry(groups, group="pretrained-dl", setting="frac=0.5")["member"] == "simclr-rank+full"


def test_p_values_equal_scipy(built) -> None:
    report = built[0]
    groups, models = report["summary"]["groups"], report["summary"]["models"]

    def welch(a: list[float], b: list[float]) -> float:
        return scipy_stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue

    for fraction in FRACTIONS:
        setting = f"frac={fraction:g}"
        group = _entry(groups, group="pretrained-dl", setting=setting)
        ref = "gbdt"  # the validation-best GBDT at both fractions
        for i, key in ((1, "p_test"), (2, "p_outlier")):
            expected = welch(column("simclr-rank+full", fraction, i), column(ref, fraction, i))
            assert group[key] == pytest.approx(expected, rel=1e-12)
            simsiam = _entry(models, model="simsiam+full", setting=setting)
            expected = welch(column("simsiam+full", fraction, i), column(ref, fraction, i))
            assert simsiam[key] == pytest.approx(expected, rel=1e-12)
        assert np.isnan(_entry(models, model="gbdt", setting=setting)["p_test"])
        assert np.isnan(_entry(groups, group="gbdt", setting=setting)["p_test"])


def test_crossover_between_fractions(built) -> None:
    info = crossover(
        built[0]["summary"]["groups"], dataset="synthetic", series="% labeled", metric="test_mean"
    )
    assert info["status"] == "crossover"
    assert (info["last_win"], info["first_loss"]) == (2.0, 50.0)
    assert info["x_line"] == pytest.approx(10.0)


def test_files_written(built) -> None:
    report, folder, stdout = built
    results = (folder / "results.csv").read_text().splitlines()
    assert len(results) == 1 + sum(len(v) for v in VALUES.values())
    assert "test_outlier_ndcg@5" in results[0]
    assert any(",failed," in line and "LightGBM boom" in line for line in results)
    summary = (folder / "summary.csv").read_text()
    assert "pretrained-dl" in summary and "simclr-rank+full" in summary
    assert sorted(p.name for p in folder.glob("*.png")) == [
        "groups_synthetic_labeled.png",
        "models_synthetic_labeled.png",
    ]
    assert "pretrained-dl" in stdout and "gbdt" in stdout
    assert stdout.rstrip().splitlines()[-1] == f"dashboard: {folder / 'dashboard.html'}"


def test_dashboard_is_self_contained(built) -> None:
    from headless_chromium import external_urls
    from plotly.offline import get_plotlyjs

    _, folder, _ = built
    html = (folder / "dashboard.html").read_text()
    assert "src='data:image/png;base64," not in html  # the curves are plotly, not PNGs
    assert html.count(get_plotlyjs()) == 1  # plotly.js inline, once for every plot
    drawn = re.findall(r"Plotly\.newPlot\(\s*\"([\w-]+)\"", html)
    assert drawn == ["groups-0", "models-0"]  # the group and the model curves
    assert html.count("<table") >= 5
    assert "Failed cells" in html and "LightGBM boom" in html
    assert "<b>0.4733 ± 0.0153</b>" in html  # pretrained DL at 2%, best in its column
    assert external_urls(html) == []
    assert "<script src" not in html  # the script is inline: nothing loads at view time
    # The verdicts, at the top: both fractions are clear (paired p 0.009 and < 0.001, n=3).
    verdicts = html.split("<div id='verdicts'>")[1].split("</div>")[0]
    assert html.index("<div id='verdicts'>") < html.index("<h2>")
    assert "synthetic, 2% labeled: pretrained DL wins" in verdicts and "p=0.009, n=3" in verdicts
    assert "synthetic, 50% labeled: GBDT wins" in verdicts


def test_unknown_sweep_lists_the_sweeps(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_sweep(root, "alpha")
    make_sweep(root, "beta")
    with pytest.raises(UserError, match=r"no sweep 'gamma'.*alpha, beta"):
        main(ReportConfig(sweep="gamma", runs_root=str(root)))


def test_binary_tau_settings_lie_on_a_tau_curve(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_sweep(root, "implicit", taus={0.02: 5.1, 0.5: 4.25})
    report = main(ReportConfig(sweep="implicit", runs_root=str(root)))
    (section,) = report["sections"]
    assert section["series"] == "tau" and section["settings"] == ["tau=4.25", "tau=5.1"]
    assert section["crossovers"] == {}  # a crossover is a thing of label fractions
    assert (root / "sweeps" / "implicit" / "report" / "groups_synthetic_tau.png").is_file()
    member = _entry(report["summary"]["groups"], group="pretrained-dl", setting="tau=5.1")
    assert member["member"] == "simclr-rank+full"


def test_cli_positional_sweep_and_scan(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    make_sweep(root, "demo")
    run(["report", "demo", f"runs_root={root}", "k=3"])
    assert (root / "sweeps" / "demo" / "report" / "dashboard.html").is_file()
    assert "NDCG@3" in capsys.readouterr().out
    # No sweep: every report.json under runs/ (the failed cell has none), identity from them.
    report = run(["report", f"runs_root={root}"])
    assert (root / "report" / "dashboard.html").is_file()
    assert sum(r["n_seeds"] for r in report["summary"]["models"]) == 23


def test_tsne_of_a_pretrained_encoder(tmp_path: Path, capsys) -> None:
    from scarce_ltr.core.config import load_config, to_yaml
    from scarce_ltr.data.stage_config import CommonConfig
    from scarce_ltr.pretrain.checkpoint import save_encoder
    from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

    root = tmp_path / "runs"
    make_sweep(root)
    tiny = ["data.synthetic.n_test_groups=20", "data.synthetic.n_features=8"]
    _, resolved = load_config(CommonConfig, tiny)
    run_dir = root / "sweeps" / "demo" / "synthetic" / "pretrain" / "simclr-rank" / "seed=0"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(to_yaml(resolved))
    encoder_cfg = EncoderConfig(width=16, hidden=16, n_blocks=1)
    encoder = build_encoder(encoder_cfg, n_features=8)
    data = {"name": "synthetic", "transform": "log1p-standardize"}
    save_encoder(run_dir, encoder, method="simclr-rank", n_features=8,
                 encoder_config=encoder_cfg, data=data, epochs=0)  # fmt: skip
    relative = "synthetic/pretrain/simclr-rank/seed=0"
    run(["report", "demo", f"runs_root={root}", f"tsne=[{relative}]", "tsne_items=120"])
    folder = root / "sweeps" / "demo" / "report"
    assert (folder / "tsne.png").stat().st_size > 1000
    assert (folder / "dashboard.html").read_text().count("src='data:image/png;base64,") == 1
    with pytest.raises(UserError, match="tsne: 'nowhere'"):
        run(["report", "demo", f"runs_root={root}", "tsne=[nowhere]"])


def test_dashboard_renders_in_headless_chromium(built, tmp_path: Path) -> None:
    from headless_chromium import ensure_chromium, render

    chromium, reason = ensure_chromium()
    if chromium is None:
        pytest.skip(reason)
    page = built[1] / "dashboard.html"
    png, dom, console = render(chromium, page, tmp_path)
    assert console == []  # no error, nothing logged
    # plotly.js drew both figures: each div got its SVG layers and the curves' legend.
    for div, end in (("groups-0", 'id="models-0"'), ("models-0", "Which member stood")):
        tag, drawn = re.search(rf'(<div[^>]*id="{div}"[^>]*>)(.*?){end}', dom, re.S).groups()
        assert "js-plotly-plot" in tag and 'class="main-svg"' in drawn, div
    assert 'class="legendtext"' in dom and ">Pretrained DL<" in dom
    assert dom.count("<table") >= 5 and "Failed cells" in dom
    from matplotlib.image import imread

    pixels = imread(png)[..., :3]
    assert pixels.shape[:2] == (2000, 1280)
    # The plots' curves (GBDT in tab:green) appear only if plotly.js drew them.
    green = np.abs(pixels - np.array([44, 160, 44]) / 255).max(axis=-1) < 0.08
    assert green.sum() > 200


def test_mrr_map_err_beside_ndcg(built) -> None:
    report, folder, _ = built
    header = (folder / "results.csv").read_text().splitlines()[0].split(",")
    assert {"test_mrr", "test_map", "test_err@5", "test_err@10"} <= set(header)
    for (model, fraction), _ in VALUES.items():
        entry = _entry(report["summary"]["models"], model=model, setting=f"frac={fraction:g}")
        test = column(model, fraction, 1)
        assert entry["mrr_mean"] == pytest.approx(np.mean(test) + 0.1)
        assert entry["map_mean"] == pytest.approx(np.mean(test) + 0.05)
        assert entry["err_mean"] == pytest.approx(np.mean(test) - 0.2)  # ERR@k of the table's k
        assert entry["err_std"] == pytest.approx(np.std(test, ddof=1))
        outlier = column(model, fraction, 2)
        assert entry["outlier_mrr_mean"] == pytest.approx(np.mean(outlier) + 0.1)
        assert entry["outlier_map_mean"] == pytest.approx(np.mean(outlier) + 0.05)
        assert entry["outlier_err_mean"] == pytest.approx(np.mean(outlier) - 0.2)
        assert entry["outlier_err_std"] == pytest.approx(np.std(outlier, ddof=1))
    outlier_columns = {"test_outlier_mrr", "test_outlier_map", "test_outlier_err@5"}
    assert outlier_columns <= set(header)
    summary_header = (folder / "summary.csv").read_text().splitlines()[0].split(",")
    assert {"mrr_mean", "outlier_mrr_mean", "outlier_map_std", "outlier_err_mean"} <= set(
        summary_header
    )
    html = (folder / "dashboard.html").read_text()
    for caption in ("test MRR", "test MAP", "test ERR@5"):
        assert f"<caption>{caption}</caption>" in html


def test_the_tuned_table_is_on_the_dashboard_as_in_summary_csv(tmp_path) -> None:
    """Variants of SimCLR-Rank: the validation-best one (``@a``, though ``@b`` is test-best)
    stands for ``simclr-rank+full`` in a table of the page with summary.csv's numbers; a sweep
    without variants has no such table."""
    import csv
    import html

    values = {
        ("gbdt", 0.02): VALUES[("gbdt", 0.02)],
        ("simclr-rank@a+full", 0.02): [(0.62, 0.45, 0.31), (0.61, 0.46, 0.33), (0.63, 0.44, 0.30)],
        ("simclr-rank@b+full", 0.02): [(0.55, 0.52, 0.41), (0.56, 0.53, 0.40), (0.57, 0.51, 0.42)],
    }
    root = tmp_path / "runs"
    folder = make_sweep(root, "tuned", values=values)
    main(ReportConfig(sweep="tuned", runs_root=str(root)))
    with (folder / "report" / "summary.csv").open() as handle:
        (row,) = [r for r in csv.DictReader(handle) if r["kind"] == "tuned"]
    assert (row["name"], row["member"]) == ("simclr-rank+full", "simclr-rank@a+full")
    page = (folder / "report" / "dashboard.html").read_text()
    table = re.search(r"<table id='tuned-table'>(.*?)</table>", page).group(1)
    (body,) = re.findall(r"<tr><td.*?</tr>", table)
    cells = [html.unescape(re.sub(r"<[^>]+>", " ", c)).split() for c in body.split("</td>")]
    assert cells[:4] == [["synthetic"], ["frac=0.02"], ["simclr-rank+full"], ["simclr-rank@a+full"]]
    assert cells[4] == [f"{float(row['vali_mean']):.4f}"]
    for cell, key in zip(cells[5:10], ("test", "outlier", "mrr", "map", "err"), strict=True):
        mean, std = float(row[f"{key}_mean"]), float(row[f"{key}_std"])
        assert cell[:3] == [f"{mean:.4f}", "±", f"{std:.4f}"], key
    assert cells[10][0] == "–"  # P@5: these made-up reports predate it
    assert cells[11] == ["simclr-rank@a+full,", "simclr-rank@b+full"]
    plain = make_sweep(root, "plain")
    main(ReportConfig(sweep="plain", runs_root=str(root)))
    assert "tuned-table" not in (plain / "report" / "dashboard.html").read_text()
