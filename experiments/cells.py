"""The cells of a sweep and the jobs that produce them.

A cell is one (data set, model, label setting, seed). A job is one ``./run.sh`` command; a
pretrained model's cell needs two jobs, pretraining (shared by every label setting of that data
set, method and seed) and finetuning (``simclr-rank+full``) or a hybrid baseline on the
pretrained encoder (``gbdt-ssl+simclr-rank``).

An ensemble (``./run.sh ensemble``) is the model ``ensemble:<model>,<model>,...``: its job mixes
the saved scores of its members' cells of the same data set, label setting and seed, so it runs
after them, and every member must be a model of the sweep itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from core.config import CommonConfig, available
from core.errors import UserError
from data.scarcity import ScarcityConfig

GROUPS = ("gbdt", "no-pretrain-dl", "pretrained-dl", "hybrid")
NO_PRETRAIN_DL = ("resnet", "deepfm", "dcnv2")
HYBRID_BASELINES = ("gbdt-ssl",)  # run on a pretraining run: <baseline>+<pretraining method>
ENSEMBLE_PREFIX = "ensemble:"
# An ensemble trains nothing: of the sweep's common overrides it takes the keys every stage has
# (data, label setting, seed, metrics), not a trainer's (gbdt.*, encoder.*, ...).
COMMON_KEYS = frozenset(f.name for f in fields(CommonConfig))


@dataclass(frozen=True)
class Job:
    key: str
    stage: str  # pretrain | finetune | baseline
    name: str  # method, strategy or baseline
    overrides: list[str]
    run_dir: Path
    depends_on: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SweepCell:
    id: str
    dataset: str
    model: str
    group: str
    stage: str
    setting: str
    fraction: float
    binary_tau: float | None
    seed: int
    run_dir: str
    job_key: str
    status: str = "pending"
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def model_group(model: str) -> str:
    """The report group of a model name; raises `UserError` for an unknown one."""
    if model.startswith(ENSEMBLE_PREFIX):
        members = model[len(ENSEMBLE_PREFIX) :].split(",")
        if len(members) < 2 or "" in members:
            raise UserError(f"model '{model}': an ensemble is ensemble:<model>,<model>[,...]")
        return ensemble_group([model_group(m) for m in members])
    if "+" in model and model.split("+", 1)[0] in HYBRID_BASELINES:
        baseline, method = model.split("+", 1)
        if method.split("+", 1)[0] not in available("pretrain"):
            raise UserError(
                f"sweep model '{model}': unknown pretraining method '{method}'; valid: "
                f"{baseline}+<{'|'.join(available('pretrain'))}>"
            )
        return "hybrid"
    if "+" in model:
        method, strategy = model.split("+", 1)
        if method not in available("pretrain"):
            raise UserError(
                f"sweep model '{model}': unknown pretraining method '{method}'; "
                f"valid: {', '.join(available('pretrain'))}"
            )
        strategies = [s for s in available("finetune") if s != "combine"]
        if strategy not in strategies:
            raise UserError(
                f"sweep model '{model}': unknown finetuning strategy '{strategy}'; "
                f"valid: {', '.join(strategies)}"
            )
        return "pretrained-dl"
    baselines = available("baseline")
    if model not in baselines:
        raise UserError(
            f"unknown sweep model '{model}'; valid: {', '.join(baselines)}, "
            "<pretraining method>+<finetuning strategy> such as simclr-rank+full, or "
            f"<{'|'.join(HYBRID_BASELINES)}>+<pretraining method> such as gbdt-ssl+simclr-rank"
        )
    if model in HYBRID_BASELINES:
        return "hybrid"
    return "no-pretrain-dl" if model in NO_PRETRAIN_DL else "gbdt"


def ensemble_group(groups: list[str]) -> str:
    """An ensemble's group: its members' when they share one (a seed ensemble), else hybrid."""
    return groups[0] if len(set(groups)) == 1 else "hybrid"


def ensemble_members(model: str) -> list[str]:
    """The member models of ``ensemble:<model>,<model>,...``."""
    return model[len(ENSEMBLE_PREFIX) :].split(",")


def check_ensembles(models: list[str]) -> None:
    """Stop unless every sweep ensemble mixes two or more other (non-ensemble) sweep models."""
    for model in models:
        if not model.startswith(ENSEMBLE_PREFIX):
            continue
        members = ensemble_members(model)
        if len(set(members)) != len(members):
            raise UserError(f"sweep model '{model}': a member appears twice")
        for member in members:
            if member.startswith(ENSEMBLE_PREFIX) or member not in models:
                raise UserError(
                    f"sweep model '{model}': member '{member}' is not a (non-ensemble) model "
                    f"of this sweep; add it to models: {', '.join(models)}"
                )


def _sweep_job(model: str) -> tuple[str | None, str, str]:
    """``(pretraining method or None, stage, name)`` of a sweep model's own job."""
    if model.startswith(ENSEMBLE_PREFIX):
        return None, "ensemble", ""
    if model in HYBRID_BASELINES:
        raise UserError(
            f"sweep model '{model}' needs a pretrained encoder: {model}+<pretraining method>, "
            f"such as {model}+simclr-rank"
        )
    if "+" not in model:
        return None, "baseline", model
    first, second = model.split("+", 1)
    if first in HYBRID_BASELINES:
        if "+" in second:
            raise UserError(
                f"sweep model '{model}': a sweep runs {first} on pretraining runs only "
                f"({first}+<pretraining method>)"
            )
        return second, "baseline", first
    return first, "finetune", second


def label_settings(cfg) -> list[tuple[ScarcityConfig, list[str]]]:
    """Each label setting of the sweep with the overrides that select it."""
    settings = []
    for fraction in cfg.fractions if not cfg.binary_taus else [1.0]:
        overrides = [f"scarcity.fraction={fraction}", f"scarcity.val={cfg.val}"]
        taus = cfg.binary_taus or [None]
        for tau in taus:
            extra = [] if tau is None else [f"scarcity.binary_tau={tau}"]
            scarcity = ScarcityConfig(fraction=fraction, val=cfg.val, binary_tau=tau)
            settings.append((scarcity, overrides + extra))
    return settings


def plan_cells(cfg, folder: Path) -> tuple[list[Job], list[SweepCell]]:
    """Every job (pretraining first, each once; ensembles last) and every cell of the sweep."""
    jobs: dict[str, Job] = {}
    cells: list[SweepCell] = []
    settings = label_settings(cfg)
    common = [*cfg.overrides.common, f"logger={cfg.logger}"]
    for dataset in cfg.datasets:
        base = folder / dataset
        for seed in cfg.seeds:
            for scarcity, setting_overrides in settings:
                for model in cfg.models:
                    group = model_group(model)
                    shared = [f"data={dataset}", *common, f"seed={seed}", *setting_overrides]
                    tags = [model, scarcity.tag, f"seed={seed}", dataset]
                    depends: list[str] = []
                    method, stage, name = _sweep_job(model)
                    extra = list(getattr(cfg.overrides, stage))
                    if method is not None:
                        pretrain = _pretrain_job(cfg, base, dataset, method, seed, common)
                        jobs.setdefault(pretrain.key, pretrain)
                        depends = [pretrain.key]
                        extra = [f"pretrained={pretrain.run_dir}", *extra]
                    if stage == "ensemble":
                        shared = [o for o in shared if _key_of(o) in COMMON_KEYS]
                        members = ensemble_members(model)
                        depends = [_cell_key(dataset, m, scarcity.tag, seed) for m in members]
                        runs = [_cell_dir(base, m, scarcity.tag, seed) for m in members]
                        extra = [f"runs=[{','.join(map(str, runs))}]", *extra]
                    extra += cfg.overrides.per_model.get(model, [])
                    run_dir = _cell_dir(base, model, scarcity.tag, seed)
                    key = _cell_key(dataset, model, scarcity.tag, seed)
                    jobs[key] = Job(
                        key,
                        stage,
                        name,
                        [*shared, *extra, f"run_dir={run_dir}"],
                        run_dir,
                        depends,
                        tags,
                    )
                    cells.append(
                        SweepCell(
                            id=key,
                            dataset=dataset,
                            model=model,
                            group=group,
                            stage=stage,
                            setting=scarcity.tag,
                            fraction=scarcity.fraction,
                            binary_tau=scarcity.binary_tau,
                            seed=seed,
                            run_dir=str(run_dir),
                            job_key=key,
                        )
                    )
    stage_order = {"pretrain": 0, "ensemble": 2}  # finetune and baseline jobs: 1
    ordered = sorted(jobs.values(), key=lambda j: stage_order.get(j.stage, 1))
    return ordered, cells


def _key_of(override: str) -> str:
    """The top-level key of ``key.sub=value``."""
    return override.split("=", 1)[0].split(".", 1)[0]


def _cell_key(dataset: str, model: str, tag: str, seed: int) -> str:
    return f"{dataset}/{model}/{tag}/seed={seed}"


def _cell_dir(base: Path, model: str, tag: str, seed: int) -> Path:
    return base / _sweep_job(model)[1] / model / tag / f"seed={seed}"


def _pretrain_job(cfg, base: Path, dataset: str, method: str, seed: int, common: list[str]) -> Job:
    """Pretraining sees no label; its knn probe uses the sweep's scarcest label setting."""
    scarcest = min(cfg.fractions) if cfg.fractions and not cfg.binary_taus else 1.0
    probe = [f"scarcity.fraction={scarcest}", f"scarcity.val={cfg.val}"]
    if cfg.binary_taus:
        probe.append(f"scarcity.binary_tau={max(cfg.binary_taus)}")
    run_dir = base / "pretrain" / method / f"seed={seed}"
    overrides = [
        f"data={dataset}",
        *common,
        f"seed={seed}",
        *probe,
        *cfg.overrides.pretrain,
        f"run_dir={run_dir}",
    ]
    return Job(
        f"{dataset}/pretrain/{method}/seed={seed}",
        "pretrain",
        method,
        overrides,
        run_dir,
        tags=[method, "pretrain", f"seed={seed}", dataset],
    )
