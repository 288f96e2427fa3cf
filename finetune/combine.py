"""``./run.sh finetune combine runs=[<run>,<run>]``: paper A.3.7, "SimCLR-Rank + SimSiam".

The final embeddings (input of the head's last linear layer) of two or more finished finetuning
runs are concatenated, normalized with BatchNorm, passed through dropout (``combine_dropout``,
else the data preset's ``data.combine_dropout``: 0.7 in the paper, 0 on Yahoo) and mapped to a
score by one linear layer, the only layer trained.
Every run must come from this data set, transform and feature count, and from the same label
setting and seed: a run finetuned on other labeled QGs would bring their labels along.
"""

from __future__ import annotations

from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import read_report, report_model
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.model import CombinedRanker, Ranker, load_model


def build_combined(
    cfg: FinetuneConfig, prepared: PreparedData
) -> tuple[CombinedRanker, dict, dict]:
    """``(model, spec, source)`` for ``cfg.runs``."""
    members, specs, methods = [], [], []
    for run in cfg.runs:
        _check_stage(run)
        model, payload = load_model(run)
        _check_member(run, model, payload, cfg, prepared)
        members.append(model)
        specs.append(payload["spec"])
        methods.append(str(payload.get("source", {}).get("method") or "none"))
    dropout = cfg.combination_dropout
    combined = CombinedRanker(members=members, dropout=dropout)
    spec = {"kind": "combined", "members": specs, "dropout": dropout}
    source = {
        "runs": [str(Path(r).resolve()) for r in cfg.runs],
        "pretrained": None,
        "method": "+".join(methods),
    }
    return combined, spec, source


def _check_stage(run: str) -> None:
    """A finished run of another stage (a baseline, a pretraining, an ensemble) is named as
    such: it has no ``model.pt``, and "run its finetune command again" would lead nowhere."""
    report = read_report(run)
    stage = report.get("stage") if report else None
    if stage and stage != "finetune":
        raise UserError(
            f"{run}: a {stage} run ({report_model(report) or 'unknown model'}); combine takes "
            "finetuned runs, runs=[<run of ./run.sh finetune>,...] "
            "(runs/<data>/finetune/<model>/<setting>/seed=<s>); mix scores of any finished runs "
            "with ./run.sh ensemble runs=[...]"
        )


def _check_member(
    run: str, model, payload: dict, cfg: FinetuneConfig, prepared: PreparedData
) -> None:
    if not isinstance(model, Ranker):
        raise UserError(
            f"{run}: holds a {payload['spec'].get('kind')} model; combine takes finetuning runs "
            "(an encoder with a scoring head)"
        )
    data, source = payload.get("data", {}), payload.get("source", {})
    if data.get("n_features") != prepared.n_features:
        raise UserError(
            f"{run}: its model takes {data.get('n_features')} features; "
            f"data {cfg.data.name} has {prepared.n_features}"
        )
    if (data.get("name"), data.get("transform")) != (cfg.data.name, cfg.data.transform):
        raise UserError(
            f"{run}: finetuned on data {data.get('name')} with transform {data.get('transform')}; "
            f"this run uses {cfg.data.name} with {cfg.data.transform}"
        )
    label_seed = source.get("label_seed", source.get("seed"))
    setting = (source.get("label_setting"), label_seed)
    if setting != (cfg.scarcity.tag, cfg.scarcity.label_seed(cfg.seed)):
        raise UserError(
            f"{run}: finetuned with label setting {setting[0]} and label seed {setting[1]}; this "
            f"run has {cfg.scarcity.tag} and label seed {cfg.scarcity.label_seed(cfg.seed)} (its "
            "labeled QGs must be the same)"
        )
