"""``./run.sh data-info [key=value ...]``: what a data set and a label setting look like.

Per split: QGs, items, features, label histogram, share of QGs without a relevant item; the
outlier QGs found (with the chosen G); the labeled QGs, items and positives per QG of the scarcity
setting (like the paper's Tables 9-11).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scarce_ltr.data.pipeline import PreparedData, prepare_data
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.stage_config import CommonConfig

# Said wherever a detector flags no outlier QG (data-info, the report), so Outlier-NDCG's absence
# is explained instead of shown as an empty chart.
NO_OUTLIERS_HINT = (
    "no test QG was flagged, so there is no Outlier-NDCG; choose another detector with "
    "data.outliers.method=knn (distance to vali QGs), =qids with data.outliers.qids=[...], or "
    "tune the histogram's data.outliers.gap / target_share"
)


def split_stats(split: RankingSplit) -> dict:
    values, counts = np.unique(np.asarray(split.labels), return_counts=True)
    sizes = split.group_sizes
    return {
        "groups": split.n_groups,
        "items": split.n_items,
        "features": split.n_features,
        "group_size_min_median_max": [int(sizes.min()), float(np.median(sizes)), int(sizes.max())]
        if len(sizes)
        else [0, 0, 0],
        "label_histogram": {f"{v:g}": int(c) for v, c in zip(values, counts, strict=True)},
        "share_groups_without_relevant": float(1 - split.groups_with_relevant().mean())
        if split.n_groups
        else 0.0,
    }


def describe(prepared: PreparedData) -> dict:
    return {
        "splits": {
            "train (as labeled)": split_stats(prepared.train),
            "vali (as labeled)": split_stats(prepared.vali),
            "test": split_stats(prepared.test),
        },
        "outliers": prepared.outlier_info,
        "scarcity": prepared.labels.summary(),
    }


def format_report(info: dict, dataset: str) -> str:
    lines = [f"data set: {dataset}"]
    if "transform" in info:
        t = info["transform"]
        clip = f", then clipped to [-{t['clip']:g}, {t['clip']:g}]" if t.get("clip") else ""
        lines.append(
            f"features: transform {t['name']} (fit on train{clip}; data.transform= to change)"
        )
    if "vali_from_train" in info:
        c = info["vali_from_train"]
        lines.append(
            f"vali: carved from train (data.vali_from_train: fraction {c['fraction']:g}, seed "
            f"{c['seed']}): {c['vali_groups']} of the train file's "
            f"{c['vali_groups'] + c['train_groups']} QGs, disjoint from the {c['train_groups']} "
            "train keeps"
        )
    header = f"{'split':<20}{'QGs':>8}{'items':>10}{'feat':>6}{'no-rel':>8}  labels"
    lines.append(header)
    for name, s in info["splits"].items():
        hist = " ".join(f"{k}:{v}" for k, v in s["label_histogram"].items())
        lines.append(
            f"{name:<20}{s['groups']:>8}{s['items']:>10}{s['features']:>6}"
            f"{s['share_groups_without_relevant']:>8.1%}  {hist}"
        )
    o = info["outliers"]
    gap = f", G={o['gap']}" if o.get("gap") is not None else ""
    lines.append(
        f"outlier test QGs ({o['method']}{gap}): {o['count']} ({o['share']:.2%} of test QGs)"
    )
    if not o["count"]:
        lines.append(f"  {NO_OUTLIERS_HINT}")
    s = info["scarcity"]
    lines.append(
        f"label setting {s['setting']}: {s['train_labeled_groups']}/{s['train_groups']} train QGs "
        f"labeled ({s['train_labeled_items']} items, "
        f"{s['train_labeled_groups_with_relevant']} with a relevant item, "
        f"{s['mean_positives_per_labeled_group']:.2f} positives per labeled QG); "
        f"vali {s['vali_labeled_groups']}/{s['vali_groups']} QGs labeled"
    )
    return "\n".join(lines)


def main(cfg: CommonConfig, out_dir: Path | None = None) -> dict:
    prepared = prepare_data(cfg, missing="keep")
    info = describe(prepared)
    info["transform"] = {"name": cfg.data.transform, "clip": cfg.data.clip}
    carve = cfg.data.vali_from_train
    if carve.fraction is not None:
        info["vali_from_train"] = {
            "fraction": carve.fraction,
            "seed": carve.seed,
            "train_groups": prepared.train.n_groups,
            "vali_groups": prepared.vali.n_groups,
        }
    print(format_report(info, cfg.data.run_name))
    return info
