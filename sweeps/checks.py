"""What a sweep's config must hold before its cells are planned.

Each check stops with one message naming the key or the model: an ensemble mixes other models of
the sweep (`check_ensembles`); a combination's members and a taught model's teacher are models of
the sweep (`check_combines`, `check_teachers`); no override sets a key the sweep sets on every
job itself (`check_overrides`, `SWEEP_KEYS`); and every variant and ``per_method`` list loads as
``./run.sh pretrain`` would load it, a fresh encoder's variant (``scratch@<variant>+<strategy>``)
as ``./run.sh finetune <strategy> pretrained=none`` would (`check_variants`).
"""

from __future__ import annotations

from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_identity import STAGES
from scarce_ltr.finetune.config import SCRATCH, VARIANT_NAME, FinetuneConfig
from scarce_ltr.models.names import SEED_ENSEMBLE, ModelName, split_variant
from scarce_ltr.pretrain.presets import available_presets
from scarce_ltr.sweeps.model_jobs import (
    combine_members,
    fresh_variant_overrides,
    fresh_variants,
    is_declared,
    pretraining_methods,
    variant_overrides,
)


def check_ensembles(models: list[str]) -> None:
    """Stop unless every sweep ensemble mixes two or more other (non-ensemble) sweep models."""
    for model in models:
        name = ModelName.parse(model)
        if not name.mixes:
            continue
        members = [str(m) for m in name.members]
        if len(set(members)) != len(members):
            raise UserError(f"sweep model '{model}': a member appears twice")
        for member, parsed in zip(members, name.members, strict=True):
            if parsed.ensembles or member not in models:
                raise UserError(
                    f"sweep model '{model}': member '{member}' is not a (non-ensemble) model "
                    f"of this sweep; add it to models: {', '.join(models)}"
                )


# Keys a sweep sets on every job itself, and the sweep key that says them instead. One given in
# overrides too would be beaten (or would beat the sweep) without a word, so it is refused.
SWEEP_KEYS = {
    "data": "datasets",
    "seed": "seeds",
    "scarcity.fraction": "fractions",
    "scarcity.binary_tau": "binary_taus",
    "scarcity.val": "val",
    "logger": "logger",
    "keep_checkpoints": "keep_checkpoints",
    "run_dir": "run_dir",
    "pretrained": "models (a sweep plans the encoders)",
    # a run named otherwise than its cell's model: <method>@<variant>, scratch@<variant>
    "variant": "models (<method>@<variant>+<strategy>, scratch@<variant>+<strategy>) and variants",
    "runs": "models (ensemble:<model>,<model>)",
    "teacher": "models (<student>~<teacher>)",
    "gbdt.teacher": "models (<student>~<teacher>)",
}


def check_teachers(models: list[str]) -> None:
    """Stop unless every taught model's teacher is an untaught model of the sweep (its run is
    the cell of the same data set, fold, label setting and seed) or the student itself
    (``<student>~self``)."""
    for model in models:
        name = ModelName.parse(model)
        if name.ensembles:
            if name.kind == SEED_ENSEMBLE and name.members[0].teacher is not None:
                raise UserError(
                    f"sweep model '{model}': a seed ensemble's members train with other seeds, "
                    "which have no teacher run; ensemble taught models with ensemble:<model>,..."
                )
            continue
        teacher = name.teacher
        if teacher is not None and teacher.kind == SEED_ENSEMBLE:
            raise UserError(
                f"sweep model '{model}': a seed ensemble fixes its labels with scarcity.seed, "
                "so its runs see other label settings than the student; teach with a model or "
                "an ensemble:<model>,... of the sweep"
            )
        if teacher is not None and str(teacher) not in models:
            raise UserError(
                f"sweep model '{model}': its teacher '{teacher}' is not a model of this sweep; "
                f"add it to models: {', '.join(models)}"
            )


def check_overrides(overrides) -> None:
    """Stop when an override sets a key the sweep sets itself, naming the sweep key to use."""
    lists = {name: getattr(overrides, name) for name in ("common", *STAGE_LISTS)}
    lists.update({f"per_model.{m}": items for m, items in overrides.per_model.items()})
    lists.update({f"per_method.{m}": items for m, items in overrides.per_method.items()})
    for where, items in lists.items():
        for item in items:
            key = item.split("=", 1)[0].strip()
            if key in SWEEP_KEYS:
                raise UserError(
                    f"overrides.{where}: '{item}' sets '{key}', which the sweep sets on every "
                    f"job itself; use the sweep key {SWEEP_KEYS[key]} instead"
                )


STAGE_LISTS = STAGES  # a sweep has an overrides list per stage: overrides.<stage>
# Keys a variant may not set: they name the run, not a setting of the method (or of a fresh
# encoder: the strategy is the model name's).
VARIANT_FIXED = ("method", "variant", "strategy")


def check_combines(models: list[str]) -> None:
    """Stop unless every combination's members are models of the sweep."""
    for model in models:
        for member in combine_members(model) or []:
            if member not in models:
                raise UserError(
                    f"sweep model '{model}': member '{member}' is not a model of this sweep; "
                    f"add it to models: {', '.join(models)}"
                )


def check_variants(cfg) -> None:
    """Stop when a model names an undeclared variant, or a variant or ``per_method`` list sets
    a key the method's pretraining config does not have (checked as ``./run.sh pretrain``
    would load it), or a fresh encoder's variant a key finetuning does not have. One variant
    may serve ``simclr@x+full`` and ``scratch@x+full``: each use is checked by its own stage."""
    for name, items in cfg.variants.items():
        if not VARIANT_NAME.fullmatch(name):
            raise UserError(
                f"variants.{name}: a variant's name may hold letters, digits, '.', '_' and '-' "
                "only (it goes into model and folder names)"
            )
        for item in items:
            key = item.split("=", 1)[0].strip()
            if key in SWEEP_KEYS or key in VARIANT_FIXED:
                raise UserError(
                    f"variants.{name}: '{item}' sets '{key}', which names the run; a variant "
                    "sets pretraining settings (augment.*, item_budget, encoder.*, epochs, ...) "
                    f"or, for {SCRATCH}@{name}+<strategy>, a fresh encoder's (encoder.*)"
                )
    pretraining = available_methods()
    for method in cfg.overrides.per_method:
        if method not in pretraining:
            raise UserError(
                f"overrides.per_method.{method}: unknown pretraining method; valid: "
                f"{', '.join(pretraining)}"
            )
    for method in pretraining_methods(list(cfg.models)):
        base, variant = split_variant(method)
        if not is_declared(cfg, method):
            declared = ", ".join(cfg.variants) or "none"
            raise UserError(
                f"sweep model naming '{method}': no variant '{variant}' under variants: "
                f"(declared: {declared}) and no shipped preset of that name (shipped: "
                f"{', '.join(available_presets()) or 'none'})"
            )
        overrides = [*cfg.overrides.pretrain, *cfg.overrides.per_method.get(base, [])]
        where = f"overrides.pretrain / overrides.per_method.{base}"
        if variant is not None:
            overrides += variant_overrides(cfg, method)
            source = "variants" if variant in cfg.variants else "the shipped preset"
            where += f" / {source} {variant}"
        _check_pretrain_overrides(base, overrides, where)
    for model in fresh_variants(list(cfg.models)):
        _check_fresh_variant(cfg, model)


def _check_fresh_variant(cfg, model: ModelName) -> None:
    """``scratch@<variant>+<strategy>``: a variant the sweep declares (no preset ships for a
    fresh encoder) whose keys finetuning takes with ``pretrained=none``."""
    variant_keys = fresh_variant_overrides(cfg, str(model))  # UserError when undeclared
    overrides = ["pretrained=none", *cfg.overrides.finetune, *variant_keys]
    where = f"overrides.finetune / variants {split_variant(model.encoder)[1]}"
    _check_stage_overrides("finetune", model.name, overrides, f"{where} (finetuning {model})")


def available_methods() -> list[str]:
    from scarce_ltr.core.config import available

    return available("pretrain")


def _check_pretrain_overrides(method: str, overrides: list[str], where: str) -> None:
    _check_stage_overrides("pretrain", method, overrides, f"{where} (pretraining {method})")


def _check_stage_overrides(stage: str, name: str, overrides: list[str], where: str) -> None:
    """``overrides`` load as ``./run.sh <stage> <name>`` would load them, else one message
    starting with ``where``."""
    from scarce_ltr.pretrain.config import PretrainConfig

    schema = {"pretrain": PretrainConfig, "finetune": FinetuneConfig}[stage]
    try:
        load_config(schema, overrides, stage_file=CONFIG_ROOT / stage / f"{name}.yaml")
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
