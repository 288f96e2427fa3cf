"""What a seeded Optuna search on vali may vary of the training recipe: ``search.*`` of
finetuning, ``deep.search.*`` of the deep baselines (`SearchConfig`; `finetune.search` runs it).

``strategy=portfolio`` trains the recipes of a portfolio file instead of sampling (`Portfolio`,
`read_portfolio`): YAML whose ``recipes:`` lists 1 to `MAX_RECIPES` mappings over the searched
keys (`RECIPE_KEYS`), each value inside what its key allows (`SEARCH_BOUNDS`; ``weight_decay``
and ``l2sp`` may be 0, off). A recipe may also name a fresh encoder's options (``encoder: {kind:
tabm, k: 8, num_embeddings: piecewise}``, over the run's ``encoder.*``), so that one portfolio
holds recipes of several encoders and vali picks among them; each option is checked for its name
and type here, the encoder it makes when the run applies it (`finetune.train.with_params`). The
file's other top-level keys (``mined_from``, ``rule``, ...: what ``./run.sh portfolio`` writes)
record where it came from and are not read. The file is read when the config is checked, so a
bad one stops the run before its folder is made.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from scarce_ltr.core.config import CONFIG_ROOT, available
from scarce_ltr.core.config_fields import MAX_EPOCHS, MAX_TRIALS, Allowed
from scarce_ltr.core.config_files import read_yaml
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.ray_cluster import endpoint
from scarce_ltr.losses import LOSSES
from scarce_ltr.pretrain.encoders import EncoderConfig
from scarce_ltr.search.studies import check_storage
from scarce_ltr.search.trial_batches import check_n_jobs

PHASE_EPOCHS = Allowed(0, MAX_EPOCHS)  # head_epochs, full_epochs: 0 leaves a phase out

# What the search's ranges allow (the keys' own checks, applied to each end of a range).
SEARCH_BOUNDS = {
    "lr": Allowed(0, 10.0, low_open=True, why="log scale"),
    "weight_decay": Allowed(0, 10.0, low_open=True, why="log scale: use a small low, not 0"),
    "dropout": Allowed(0, 1, high_open=True),
    "head_epochs": PHASE_EPOCHS,
    "full_epochs": PHASE_EPOCHS,
    "noise_std": Allowed(0, 100.0),
    "head_hidden": Allowed(1, 65536),
    "l2sp": Allowed(0, 1e6, low_open=True, why="log scale: use a small low, not 0"),
}
TRIAL_EXECUTORS = ("local", "ray")  # search.trial_executor (`finetune.trial_pool`)
PRUNERS = ("none", "median", "halving", "hyperband")  # search.pruner (`finetune.search`)
LOG_SCALE = ("lr", "weight_decay", "head_hidden", "l2sp")  # drawn on a log scale
INTEGER_KEYS = ("head_epochs", "full_epochs", "head_hidden")
# Keys drawn as "0 or log-uniform" (rtdl's ``?loguniform``): a categorical ``<key>_on`` first,
# then the log-scale value when on. 0 (the recipe's weight decay) is then a point of the space,
# so the recipe's trials train exactly the fixed recipe; a portfolio's recipe may hold 0 too.
OPTIONAL_KEYS = ("weight_decay", "l2sp")
# A portfolio recipe's encoder options, applied over a fresh encoder's (a pretrained one keeps its
# own, and the key is dropped as any key a model does not search). Never drawn by Optuna: a search
# tunes the training of the run's encoder; a portfolio may mix encoders (TabM beside the ResNet).
ENCODER_KEY = "encoder"
RECIPE_KEYS = (*SEARCH_BOUNDS, "loss", ENCODER_KEY)  # what a portfolio's recipe may set
STRATEGIES = ("optuna", "portfolio")  # search.strategy
PORTFOLIOS = "portfolio"  # configs/portfolio/<name>.yaml: the shipped portfolios
DEFAULT_PORTFOLIO = "deep"
# A portfolio's recipes at most: a handful of tuned defaults replaces a search (TabRepo;
# Holzmüller et al. 2024: four), and each recipe is one full training.
MAX_RECIPES = 8


@dataclass(frozen=True)
class SearchConfig:
    """A seeded Optuna search on vali over the training recipe (`finetune.search`).

    ``n_trials`` 0 (the default) is off: the fixed recipe (and ``lrs`` grid) as it always was.
    Each range is ``[low, high]``; an empty list leaves that key at the config's own value in
    every trial. ``lr``, ``weight_decay`` and ``head_hidden`` are drawn on a log scale; ``loss``
    lists the losses to choose from (`losses.LOSSES`). The keys a model does not have
    (``head_hidden`` of a linear head, ``full_epochs`` of a frozen encoder) are not searched.
    """

    n_trials: int = 0  # 0: off; the trees' budget is 30 (configs/sweep/hybrid.yaml)
    lr: list[float] = field(default_factory=lambda: [1e-5, 1e-2])  # [low, high], log scale
    # 0, or [low, high] on a log scale (a categorical weight_decay_on first)
    weight_decay: list[float] = field(default_factory=lambda: [1e-7, 1e-2])
    dropout: list[float] = field(default_factory=lambda: [0.0, 0.5])  # the head's (the model's)
    head_epochs: list[int] = field(default_factory=lambda: [10, 100])  # [low, high]
    # [low, high]; a deep baseline's one phase
    full_epochs: list[int] = field(default_factory=lambda: [10, 100])
    # the losses to choose from (losses.LOSSES)
    loss: list[str] = field(default_factory=lambda: ["lambdarank", "softmax", "approx-ndcg"])
    noise_std: list[float] = field(default_factory=lambda: [0.0, 0.5])  # Gaussian input noise
    # [low, high], log scale: the MLP head's width (a deep baseline's hidden)
    head_hidden: list[int] = field(default_factory=lambda: [32, 512])
    # full on a pretrained encoder: L2-SP's alpha, 0 or [low, high] on a log scale (as
    # weight_decay); [] (the default): not searched, l2sp stays at the config's value
    l2sp: list[float] = field(default_factory=list)
    # optuna (the default): n_trials seeded TPE trials | portfolio: the K recipes of the file
    # ``portfolio`` names, in file order, no sampling; n_trials stays 0 (docs/finetune.md)
    strategy: str = "optuna"
    # strategy=portfolio: a YAML file of recipes, or the name of a shipped one
    # (configs/portfolio/<name>.yaml; deep: eight recipes mined on the Yandex and OHSUMED searches)
    portfolio: str = DEFAULT_PORTFOLIO
    # A searched run's folder: train the recipe its search chose, as one trial, instead of
    # searching (a seed ensemble's other members take the recipe of the member of the cell's
    # seed, as DASALC-ens repeats one tuned model); "" (the default): search
    recipe_from: str = ""
    # Optuna's pruner on each trial's per-epoch vali NDCG@5 (the best so far, reported each
    # epoch): none (the default: every trial trains its epochs, the search as it always was) |
    # median | halving (successive halving) | hyperband. Trial 0 (the fixed recipe) is never
    # pruned; a pruned trial is kept in the report (``pruned``) and trials.npz (a row of NaN).
    pruner: str = "none"
    # epochs every trial trains before it may be pruned (median: the warm-up; halving and
    # hyperband: the first rung's resource)
    prune_warmup: int = 20
    # median: the trials that finish unpruned before the median may stop any (Optuna's
    # n_startup_trials): the fewer, the sooner TPE sees mostly stopped trials
    prune_startup: int = 5
    # an Optuna RDB URL (sqlite:///studies.db) the study is recorded in, for
    # optuna.load_study and optuna-dashboard, and continued by a search of the same name
    # (search.studies); null: in memory only
    storage: str | None = None
    # the study's name in storage; null: the run folder below the runs root (search.studies)
    study_name: str | None = None
    # trials trained at once, each in a child process with its share of torch's threads:
    # asked and told in trial order, reproducible for a given n_jobs (search.trial_batches;
    # finetune.trial_pool); 1 (the default): one after another, the search as it always was
    n_jobs: int = 1
    # where the n_jobs trials of a batch train: local (the default: child processes) | ray
    # (each a Ray task running the same job: the same trials, scores and model; the run folder
    # must be one path every node sees; finetune.trial_pool)
    trial_executor: str = "local"
    # with trial_executor=ray, as a sweep's ray.address: "" (a Ray started for the search) |
    # auto | ray://host:10001 | host:port
    ray_address: str = ""

    def check(self, prefix: str) -> None:
        """`ValueError` naming the key (``prefix``: where the section sits, ``search.`` or
        ``deep.search.``); the config holding the section calls it."""
        if not 0 <= self.n_trials <= MAX_TRIALS:
            raise ValueError(
                f"{prefix}n_trials must be >= 0 and <= {MAX_TRIALS} (0: off), got {self.n_trials}"
            )
        for key, bounds in SEARCH_BOUNDS.items():
            span = getattr(self, key)
            if not span:
                continue
            if len(span) != 2 or span[0] > span[1]:
                raise ValueError(
                    f"{prefix}{key} must be [low, high] with low <= high (or [] to leave it "
                    f"out), got {list(span)}"
                )
            for value in span:
                bounds.check(f"{prefix}{key}", value)
        unknown = [name for name in self.loss if name not in LOSSES]
        if unknown:
            raise ValueError(
                f"{prefix}loss: {unknown[0]!r} is not a loss; choose from {', '.join(LOSSES)}"
            )
        if len(set(self.loss)) != len(self.loss):
            raise ValueError(f"{prefix}loss must list distinct losses")
        if self.pruner not in PRUNERS:
            raise ValueError(
                f"{prefix}pruner must be one of {', '.join(PRUNERS)}, got {self.pruner!r}"
            )
        if not 1 <= self.prune_warmup <= MAX_EPOCHS:
            raise ValueError(
                f"{prefix}prune_warmup must be >= 1 and <= {MAX_EPOCHS} (epochs before a trial "
                f"may be pruned), got {self.prune_warmup}"
            )
        if not 1 <= self.prune_startup <= MAX_TRIALS:
            raise ValueError(
                f"{prefix}prune_startup must be >= 1 and <= {MAX_TRIALS} (trials finished "
                f"before the median pruner stops any), got {self.prune_startup}"
            )
        check_storage(f"{prefix}storage", self.storage)
        check_n_jobs(f"{prefix}n_jobs", self.n_jobs)
        if self.n_jobs > 1 and self.pruner in ("halving", "hyperband"):
            raise ValueError(
                f"{prefix}n_jobs={self.n_jobs} with {prefix}pruner={self.pruner}: successive "
                "halving and Hyperband compare a trial with the rungs of the trials still "
                f"training beside it, which depend on timing; use {prefix}pruner=median or none "
                "with n_jobs > 1"
            )
        self._check_executor(prefix)
        self._check_strategy(prefix)
        if self.recipe_from and not self.on:
            raise ValueError(
                f"{prefix}recipe_from trains a searched run's chosen recipe in place of this "
                f"run's search: give {prefix}n_trials > 0 with it, as the searched run had (or "
                f"{prefix}strategy=portfolio)"
            )

    def _check_strategy(self, prefix: str) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"{prefix}strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}"
            )
        if self.strategy == "optuna":
            if self.portfolio != DEFAULT_PORTFOLIO:
                raise ValueError(
                    f"{prefix}portfolio is read with {prefix}strategy=portfolio only; give that "
                    f"too, or leave {prefix}portfolio out"
                )
            return
        # The file says how many trials: a second count could only disagree with it.
        if self.n_trials:
            raise ValueError(
                f"{prefix}n_trials={self.n_trials} with {prefix}strategy=portfolio: the "
                f"portfolio's recipes are the trials; leave {prefix}n_trials at 0"
            )
        if self.pruner != "none":
            raise ValueError(
                f"{prefix}pruner={self.pruner} with {prefix}strategy=portfolio: each recipe "
                f"trains to its end; leave {prefix}pruner at none"
            )
        if self.storage is not None:
            raise ValueError(
                f"{prefix}storage with {prefix}strategy=portfolio: a portfolio samples nothing, "
                f"so there is no Optuna study to store; leave {prefix}storage at null"
            )
        try:
            self.read_portfolio()
        except UserError as exc:
            raise ValueError(f"{prefix}portfolio: {exc}") from None

    def _check_executor(self, prefix: str) -> None:
        if self.trial_executor not in TRIAL_EXECUTORS:
            raise ValueError(
                f"{prefix}trial_executor must be one of {', '.join(TRIAL_EXECUTORS)} (where a "
                f"batch of {prefix}n_jobs trials trains), got {self.trial_executor!r}"
            )
        if self.trial_executor == "local" and self.ray_address:
            raise ValueError(
                f"{prefix}ray_address: {prefix}trial_executor=local does not read it; give "
                f"{prefix}trial_executor=ray to train the trials on Ray"
            )
        if self.trial_executor == "ray" and self.n_jobs == 1:
            raise ValueError(
                f"{prefix}trial_executor=ray trains the trials of a batch at once as Ray tasks: "
                f"give {prefix}n_jobs > 1 with it (1 trains each trial here, one after another)"
            )
        if self.ray_address and self.ray_address != "auto":
            endpoint(self.ray_address, key=f"{prefix}ray_address", local="the search")

    @property
    def on(self) -> bool:
        return self.n_trials > 0 or self.strategy == "portfolio"

    def trial_count(self) -> int:
        """How many trials the run trains (the portfolio's recipes, or ``n_trials``)."""
        return len(self.read_portfolio().recipes) if self.strategy == "portfolio" else self.n_trials

    def read_portfolio(self) -> Portfolio:
        """The recipes of ``portfolio`` (`UserError` naming the file and the recipe's key)."""
        return read_portfolio(self.portfolio)


@dataclass(frozen=True)
class Portfolio:
    """A portfolio file's recipes, each over `RECIPE_KEYS` (in that order), as read."""

    path: Path
    recipes: list[dict]

    @property
    def digest(self) -> str:
        """A hash of the recipes (not of the file's comments or records): two runs that name
        the same digest trained the same recipes."""
        text = json.dumps(self.recipes, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def portfolio_path(value: str) -> Path:
    """``value`` as a file when it names one or looks like a path (``.yaml``, a folder part);
    else the shipped ``configs/portfolio/<value>.yaml``."""
    path = Path(value).expanduser()
    if path.is_file() or path.suffix in (".yaml", ".yml") or len(path.parts) != 1:
        return path
    shipped = CONFIG_ROOT / PORTFOLIOS / f"{value}.yaml"
    if not shipped.is_file():
        raise UserError(
            f"{value!r} is no file and no shipped portfolio (shipped: "
            f"{', '.join(available(PORTFOLIOS))}); give a path to a .yaml file"
        )
    return shipped


def read_portfolio(value: str) -> Portfolio:
    """The portfolio file ``value`` names (`portfolio_path`), each recipe checked."""
    path = portfolio_path(value)
    content = read_yaml(path)
    content = OmegaConf.to_container(content) if OmegaConf.is_config(content) else content
    recipes = content.get("recipes") if isinstance(content, dict) else None
    if not isinstance(recipes, list) or not recipes:
        raise UserError(
            f"{path}: a portfolio file holds 'recipes:', a list of 1 to {MAX_RECIPES} mappings "
            f"of {', '.join(RECIPE_KEYS)}"
        )
    if len(recipes) > MAX_RECIPES:
        raise UserError(
            f"{path}: {len(recipes)} recipes; a portfolio holds at most {MAX_RECIPES} (each is "
            "one full training)"
        )
    checked = [_recipe(f"{path}: recipes[{i}]", recipe) for i, recipe in enumerate(recipes)]
    for i, recipe in enumerate(checked):
        if recipe in checked[:i]:
            first = checked.index(recipe)
            raise UserError(f"{path}: recipes[{i}] repeats recipes[{first}]; list each once")
    return Portfolio(path, checked)


def _recipe(where: str, recipe: object) -> dict:
    """One recipe, its keys in `RECIPE_KEYS` order, integers as int and the rest as float."""
    if not isinstance(recipe, dict):
        raise UserError(f"{where}: a mapping of {', '.join(RECIPE_KEYS)}, got {recipe!r}")
    unknown = [key for key in recipe if key not in RECIPE_KEYS]
    if unknown:
        raise UserError(
            f"{where}: {unknown[0]!r} is no searched key; a recipe sets {', '.join(RECIPE_KEYS)}"
        )
    return {key: _value(where, key, recipe[key]) for key in RECIPE_KEYS if key in recipe}


def _value(where: str, key: str, value: object) -> object:
    if key == ENCODER_KEY:
        return _encoder_options(where, value)
    if key == "loss":
        if value not in LOSSES:
            choices = ", ".join(LOSSES)
            raise UserError(f"{where}: loss {value!r} is not a loss; choose from {choices}")
        return value
    integer = key in INTEGER_KEYS
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UserError(f"{where}: {key} must be a finite number, got {value!r}")
    if integer and value != int(value):
        raise UserError(f"{where}: {key} must be a whole number, got {value!r}")
    value = int(value) if integer else float(value)
    if key in OPTIONAL_KEYS and value == 0:
        return value  # off, as the search's <key>_on draws it
    try:
        SEARCH_BOUNDS[key].check(key, value)
    except ValueError as exc:
        raise UserError(f"{where}: {exc}") from None
    return value


def _encoder_options(where: str, value: object) -> dict:
    """A recipe's ``encoder``: a non-empty mapping of `EncoderConfig` options, each of its
    option's type, in the config's order. Whether they make a valid encoder over the run's own
    options is the run's check, when it applies them."""
    options = EncoderConfig.__dataclass_fields__
    if not isinstance(value, dict) or not value:
        raise UserError(
            f"{where}: encoder must be a mapping of encoder options ({', '.join(options)}), "
            f"got {value!r}"
        )
    unknown = [key for key in value if key not in options]
    if unknown:
        raise UserError(
            f"{where}: encoder.{unknown[0]} is no encoder option; choose from {', '.join(options)}"
        )
    checked = {}
    for key in options:
        if key not in value:
            continue
        default, given = options[key].default, value[key]
        if isinstance(default, str):
            fits, kind = isinstance(given, str), "a string"
        elif isinstance(default, int):
            fits, kind = isinstance(given, int) and not isinstance(given, bool), "a whole number"
        else:
            fits, kind = isinstance(given, int | float) and not isinstance(given, bool), "a number"
            given = float(given) if fits else given
        if not fits:
            raise UserError(f"{where}: encoder.{key} must be {kind}, got {given!r}")
        checked[key] = given
    return checked
