"""The report's figures that read run folders and data sets, not just the results rows: Figure 5
(the histogram rule's outlier cut on one feature, from each data set's vali and test) and the
opt-in t-SNE panels of chosen runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import read_config
from scarce_ltr.core.runs import read_report
from scarce_ltr.reports import plots


def outlier_figures(done: list[dict], *, feature: int | None) -> list[dict]:
    """Figure 5 per data set: the histogram rule's cut on one feature, from the first finished
    run of the data set that used the rule (its data settings and its gap G). ``feature``: the
    LETOR feature number drawn (1-based; None: the feature flagging the most test QGs)."""
    figures = []
    for dataset in sorted({r["dataset"] for r in done}):
        for row in (r for r in done if r["dataset"] == dataset):
            outliers = ((read_report(row["run_dir"]) or {}).get("metrics") or {}).get("outliers")
            if outliers and outliers.get("method") == "histogram" and outliers.get("gap"):
                figures.append(_outlier_figure(dataset, Path(row["run_dir"]), outliers, feature))
                break
    return figures


def _outlier_figure(dataset: str, run_dir: Path, outliers: dict, feature: int | None) -> dict:
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.outliers.histogram import feature_histogram, flagged_by_feature
    from scarce_ltr.data.stage_config import CommonConfig

    gap = int(outliers["gap"])
    entry = {"dataset": dataset, "gap": gap, "feature": None, "png": None, "note": None}
    try:
        data = read_config(run_dir, CommonConfig).data
        raw = load_dataset(data)
    except UserError as exc:  # the data is not on this machine: the page says so
        return entry | {"note": f"Figure 5 of {dataset} not drawn: {exc}"}
    vali, test = raw["vali"], raw["test"]
    spec = data.outliers
    options = dict(gap=gap, n_bins=spec.n_bins, max_tail_share=spec.max_tail_share)
    flagged = flagged_by_feature(vali.features, test, **options)
    if feature is None:
        column = int(flagged.argmax())
    elif feature <= vali.n_features:
        column = feature - 1
    else:
        raise UserError(
            f"outlier_feature={feature}: data set {dataset} has "
            f"{vali.n_features} features (numbered 1..{vali.n_features})"
        )
    hist = feature_histogram(vali.features, feature=column, **options)
    values = np.asarray(test.features[:, column], dtype=np.float64)
    title = (
        f"{dataset} · feature {column + 1}: vali histogram and the cut of G = {gap}\n"
        f"{int(flagged[column])} test QGs flagged by this feature"
    )
    png = plots.outlier_histogram(hist, values, title=title)
    return entry | {"feature": column + 1, "png": png, "flagged": int(flagged[column])}


def tsne_figure(
    folders: list[Path], *, max_items: int, perplexity: float, seed: int
) -> tuple[bytes | None, list[str]]:
    """A t-SNE panel of each run's test-item embeddings (`reports.embeddings.tsne_of_run`), and
    a line for each run skipped."""
    from scarce_ltr.reports.embeddings import tsne_of_run

    panels, errors = [], []
    for folder in folders:
        print(f"t-SNE of {folder} ...", file=sys.stderr)
        try:
            panels.append(
                tsne_of_run(folder, max_items=max_items, perplexity=perplexity, seed=seed)
            )
        except UserError as exc:
            errors.append(f"t-SNE skipped: {exc}")
            print(f"warning: t-SNE skipped: {exc}", file=sys.stderr)
    if not panels:
        return None, errors
    title = "t-SNE of test-item embeddings, colour and size = relevance label"
    return plots.tsne_panels(panels, title=title), errors
