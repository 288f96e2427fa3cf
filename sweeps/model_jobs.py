"""What a sweep model's name asks the planner (`scarce_ltr.sweeps.cells`) to run.

A model's own job: its pretraining method (None for a model that pretrains nothing), the stage its
family trains in and the name that stage takes (`sweep_job`); the ``<method>+full`` members a
combination finetunes first (`combine_members`); every method the sweep pretrains
(`pretraining_methods`); the fresh encoders' variants the sweep finetunes (`fresh_variants`,
`fresh_variant_overrides`); and the pretraining job that serves every label setting of a (data
set, fold, method, seed) (`pretrain_job`).
"""

from __future__ import annotations

from pathlib import Path

from scarce_ltr.baselines.config import HYBRID_BASELINES
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_identity import run_folder
from scarce_ltr.finetune.config import ENCODER_MARK, SCRATCH
from scarce_ltr.models.names import COMBINED, FINETUNED, HYBRID, ModelName, split_variant
from scarce_ltr.pretrain.presets import preset_file, preset_overrides
from scarce_ltr.sweeps.jobs import Job
from scarce_ltr.sweeps.settings import fold_place, fold_tags

COMBINE_MEMBER = "full"  # the finetuning strategy of a combination's members


def combine_members(model: str) -> list[str] | None:
    """The sweep models a combination combines (``<method>+full`` each); None for others."""
    name = ModelName.parse(model)
    if name.kind != COMBINED:
        return None
    return [str(ModelName.finetuned(m, COMBINE_MEMBER)) for m in name.methods]


def variant_overrides(cfg, method: str) -> list[str]:
    """The keys of ``<method>@<variant>`` and ``variant=<variant>``: the sweep's own
    ``variants.<variant>`` where it declares one, else the shipped preset's
    (``configs/pretrain/presets/<method>@<variant>.yaml``, `pretrain.presets`); [] for a plain
    method. A name that is neither is `checks.check_variants`' to refuse."""
    base, variant = split_variant(method)
    if variant is None:
        return []
    if variant in cfg.variants:
        return [*cfg.variants[variant], f"variant={variant}"]
    return preset_overrides(method)


def is_declared(cfg, method: str) -> bool:
    """Whether ``<method>[@<variant>]`` names no variant, a sweep's or a shipped preset."""
    variant = split_variant(method)[1]
    return variant is None or variant in cfg.variants or preset_file(method) is not None


def fresh_variants(models: list[str]) -> list[ModelName]:
    """Every ``scratch@<variant>+<strategy>`` the sweep finetunes (an ensemble's member, a
    taught model's student), in order of first mention."""
    found: list[ModelName] = []
    for model in models:
        name = ModelName.parse(model)
        for member in name.members or [name]:
            student = member.student
            if student.fresh_encoder and student.has_variant and student not in found:
                found.append(student)
    return found


def fresh_variant_overrides(cfg, model: str) -> list[str]:
    """The keys of a fresh encoder's variant, ``scratch@<variant>+<strategy>`` (a taught model's
    student's), then ``variant=<variant>``: the sweep's ``variants.<variant>``, finetuning keys
    (``encoder.*``, ...); [] for any other model. `UserError` naming the declared variants when
    the sweep does not declare it: no preset ships for a fresh encoder."""
    name = ModelName.parse(model).student
    variant = split_variant(name.encoder)[1] if name.fresh_encoder else None
    if variant is None:
        return []
    if variant not in cfg.variants:
        raise UserError(
            f"sweep model '{model}': no variant '{variant}' under variants: (declared: "
            f"{', '.join(cfg.variants) or 'none'}); a fresh encoder's variant is the sweep's "
            f"own (no preset ships for {SCRATCH})"
        )
    return [*cfg.variants[variant], f"variant={variant}"]


def pretraining_methods(models: list[str]) -> list[str]:
    """Every ``<method>[@<variant>]`` the sweep pretrains, in order of first mention."""
    found: list[str] = []
    for model in models:
        name = ModelName.parse(model)
        for member in name.members or [name]:
            if member.kind == COMBINED:
                methods = list(member.methods)
            else:
                method, stage, _ = sweep_job(str(member))
                methods = [method] if method is not None and stage != "ensemble" else []
            found += [m for m in methods if m not in found]
    return found


def sweep_job(model: str) -> tuple[str | None, str, str]:
    """``(pretraining method or None, stage, name)`` of a sweep model's own job (a taught
    model's: its student's). The stage is written here, not read from `scarce_ltr.families`:
    that table imports every backend (LightGBM, CatBoost, XGBoost) into the sweep's driver,
    which runs none of them. `tests/test_families.py` checks the stages are the families'."""
    name = ModelName.parse(model).student
    if name.ensembles:
        return None, "ensemble", ""
    if name.kind == FINETUNED:  # scratch[@<variant>]+<strategy>: nothing pretrained
        return (None if name.fresh_encoder else name.encoder), "finetune", name.name
    if name.kind == HYBRID:
        if ENCODER_MARK in name.encoder:
            raise UserError(
                f"sweep model '{name}': a sweep runs {name.name} on pretraining runs only "
                f"({name.name}+<pretraining method>)"
            )
        return name.encoder, "baseline", name.name
    if str(name) in HYBRID_BASELINES:
        raise UserError(
            f"sweep model '{name}' needs a pretrained encoder: {name}+<pretraining method>, "
            f"such as {name}+simclr-rank"
        )
    return None, "baseline", str(name)


def pretrain_job(
    cfg,
    root: Path,
    dataset: str,
    method: str,
    seed: int,
    common: list[str],
    *,
    fold: int | None = None,
    fold_splits: list[str] | tuple[str, ...] = (),
) -> Job:
    """Pretraining sees no label; its knn probe uses the sweep's scarcest label setting. A fold
    pretrains on its own train QGs (and picks its checkpoint on its own vali QGs)."""
    scarcest = min(cfg.fractions) if cfg.fractions and not cfg.binary_taus else 1.0
    probe = [f"scarcity.fraction={scarcest}", f"scarcity.val={cfg.val}"]
    if cfg.binary_taus:
        probe.append(f"scarcity.binary_tau={max(cfg.binary_taus)}")
    # One pretraining run serves every label setting of the sweep: no setting in its folder.
    place = fold_place(dataset, fold)
    run_dir = run_folder(
        root, dataset=place, stage="pretrain", name=method, setting=None, seed=seed
    )
    base, _ = split_variant(method)
    # The most specific list last, so that it wins: a variant over its method's over the stage's.
    specific = [*cfg.overrides.per_method.get(base, []), *variant_overrides(cfg, method)]
    overrides = [
        f"data={dataset}",
        *fold_splits,
        *common,
        f"seed={seed}",
        *probe,
        *cfg.overrides.pretrain,
        *specific,
        f"run_dir={run_dir}",
    ]
    return Job(
        f"{place}/pretrain/{method}/seed={seed}",
        "pretrain",
        base,
        overrides,
        run_dir,
        tags=[method, "pretrain", f"seed={seed}", dataset, *fold_tags(fold)],
    )
