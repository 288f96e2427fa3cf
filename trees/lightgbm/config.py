"""Options of the GBDT baselines: the ``gbdt:`` section of a baseline config.

``./run.sh baseline gbdt|gbdt-pseudo|gbdt-pca|gbdt-pca-pseudo gbdt.<key>=<value>``. Every key has
the paper's value (appendix A.2.3) or LightGBM's default; the hyperparameter grid, the number of
boosting rounds and the PCA size are all chosen on the labeled validation QGs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from scarce_ltr.core.config_fields import (
    MAX_EPOCHS,
    MAX_TRIALS,
    POSITIVE,
    Allowed,
    allowed,
    check_allowed,
    read_with,
)
from scarce_ltr.search.strategies import SEARCHES, check_search
from scarce_ltr.search.studies import check_storage
from scarce_ltr.search.trial_batches import check_n_jobs, thread_share
from scarce_ltr.trees.lightgbm.aliases import main_names

GRIDS = ("paper", "full")
OBJECTIVES = ("lambdarank", "rank_xendcg")
# LightGBM parameters the project sets itself, and the key a user sets them with instead.
RESERVED_PARAMS = {
    "objective": "gbdt.objective (gbdt.objectives for search=optuna)",
    "metric": "nothing: selection is the project's vali NDCG@5",
    "eval_at": "nothing: selection is the project's vali NDCG@5",
    "num_iterations": "gbdt.max_rounds",
    "early_stopping_round": "gbdt.early_stopping_rounds",
    "learning_rate": "gbdt.learning_rate",
    "num_threads": "gbdt.num_threads",
    "seed": "seed",
}
GRID_PARAMS = ("num_leaves", "min_data_in_leaf", "feature_fraction")  # lists of the paper grid
PSEUDO_BINNINGS = ("width", "quantile")
# ./run.sh baseline <name> of the LightGBM family (its command-line and config file names).
LIGHTGBM_METHODS = ("gbdt", "gbdt-optuna", "gbdt-pseudo", "gbdt-pca", "gbdt-pca-pseudo")
PCA_METHODS = ("gbdt-pca", "gbdt-pca-pseudo")  # PCA components appended to the features
PSEUDO_METHODS = ("gbdt-pseudo", "gbdt-pca-pseudo")  # a second grid on pseudo-labeled QGs
# The methods whose booster reads the features as given (no PCA or embedding columns): NaN and
# pandas categories reach LightGBM's trees.
RAW_METHODS = tuple(method for method in LIGHTGBM_METHODS if method not in PCA_METHODS)
# The searches that walk the paper grid, and those that draw their trials: the keys each reads
# (`read_with`); a key the chosen search does not read, set away from its default, is refused.
GRID_SEARCHES = tuple(name for name, strategy in SEARCHES.items() if strategy.grid)
DRAWN_SEARCHES = tuple(name for name, strategy in SEARCHES.items() if not strategy.grid)
MAX_LIGHTGBM_LABEL = 30  # LightGBM's default label_gain table holds 2^i - 1 for i = 0..30


@dataclass(frozen=True)
class GBDTOptions:
    """LightGBM LambdaMART and its semi-supervised variants.

    ``grid=paper`` varies one hyperparameter at a time around LightGBM's defaults
    (num_leaves 31, min_data_in_leaf 20, feature_fraction 1.0); ``grid=full`` takes every
    combination of the three lists.
    """

    # Its methods whose trees split on NaN (a missing value takes a branch of its own): the
    # command line keeps NaN for them and refuses it for the others (`baselines.config`); the
    # PCA variants pass the features through a PCA, where a NaN spoils every column.
    missing_as_nan: ClassVar[tuple[str, ...]] = RAW_METHODS
    # The baselines whose runs read this section: the LightGBM family's (`family.FAMILY`) and
    # gbdt-ssl, LightGBM on an encoder's embeddings. Another method refuses a key of it set
    # away from its default (`baselines.config`).
    read_by: ClassVar[tuple[str, ...]] = (*LIGHTGBM_METHODS, "gbdt-ssl")
    section: ClassVar[str] = "gbdt"  # its field of the config (`trees.tree_run.section_of`)
    library: ClassVar[str] = "LightGBM"  # for messages
    integer_labels: ClassVar[bool] = True  # lambdarank's gain table: grades 0..30 (`check_labels`)

    # paper-grid: the paper's grid | optuna: seeded TPE | random: seeded random (search/strategies)
    search: str = "paper-grid"
    # paper | full (search=paper-grid)
    grid: str = field(default="paper", metadata=read_with("search", *GRID_SEARCHES))
    # search=paper-grid: lambdarank | rank_xendcg
    objective: str = field(default="lambdarank", metadata=read_with("search", *GRID_SEARCHES))
    # the objectives a search that draws its trials (not paper-grid) chooses among
    objectives: list[str] = field(
        default_factory=lambda: list(OBJECTIVES), metadata=read_with("search", *DRAWN_SEARCHES)
    )
    # search=optuna|random: the trials drawn
    n_trials: int = field(default=40, metadata=read_with("search", *DRAWN_SEARCHES))
    # search=optuna|random: an Optuna RDB URL (sqlite:///studies.db) the study is recorded
    # in, for optuna.load_study and optuna-dashboard, and continued by a search of the same
    # name (search.studies); null: in memory only
    storage: str | None = None
    # the study's name in storage; null: the run folder below the runs root (search.studies)
    study_name: str | None = field(default=None, metadata=read_with("search", *DRAWN_SEARCHES))
    # Any LightGBM parameter, the same in every fit (gbdt.params.lambda_l2=1); the search
    # leaves the ones given here out.
    params: dict[str, Any] = field(default_factory=dict)
    # the paper grid's lists (a search that draws its trials has its own ranges)
    num_leaves: list[int] = field(
        default_factory=lambda: [31, 96, 200], metadata=read_with("search", *GRID_SEARCHES)
    )
    min_data_in_leaf: list[int] = field(
        default_factory=lambda: [20, 60, 200], metadata=read_with("search", *GRID_SEARCHES)
    )
    feature_fraction: list[float] = field(
        default_factory=lambda: [0.5, 0.9, 1.0], metadata=read_with("search", *GRID_SEARCHES)
    )
    learning_rate: float = 0.05
    # boosting rounds at most; `epochs` caps it further when set
    max_rounds: int = field(default=500, metadata=allowed(Allowed(1, MAX_EPOCHS)))
    early_stopping_rounds: int = 50  # on vali NDCG@5
    num_threads: int = 2  # with n_jobs, shared by the trials trained at once
    # trials (or paper-grid points) trained at once, in threads with num_threads // n_jobs
    # each: asked and told in trial order, reproducible for a given n_jobs
    # (search.trial_batches); 1: one by one
    n_jobs: int = 1
    # gbdt-pca*: the numbers of PCA components tried (chosen on vali)
    pca_components: list[int] = field(
        default_factory=lambda: [5, 10, 15], metadata=read_with("method", *PCA_METHODS)
    )
    # gbdt-*pseudo: relevance levels 0 .. pseudo_levels - 1
    pseudo_levels: int = field(default=31, metadata=read_with("method", *PSEUDO_METHODS))
    # width: equal-width bins of the score range | quantile
    pseudo_binning: str = field(default="width", metadata=read_with("method", *PSEUDO_METHODS))
    # gbdt-*pseudo: a finished run (same data, labels, seed) whose train scores pseudo-label the
    # unlabeled QGs instead of a GBDT of the labeled QGs (data.teachers); none: that GBDT
    teacher: str | None = None

    def __post_init__(self) -> None:
        check_search("gbdt.search", self.search)
        check_storage("gbdt.storage", self.storage)
        check_n_jobs("gbdt.n_jobs", self.n_jobs)
        for objective in [self.objective, *self.objectives]:
            if objective not in OBJECTIVES:
                raise ValueError(
                    f"gbdt.objective(s): {objective!r} is not one of {', '.join(OBJECTIVES)}"
                )
        if not self.objectives:
            raise ValueError("gbdt.objectives must name at least one objective")
        if not 1 <= self.n_trials <= MAX_TRIALS:
            raise ValueError(f"gbdt.n_trials must be >= 1 and <= {MAX_TRIALS}, got {self.n_trials}")
        main_params = lightgbm_param_names(self.params)
        if SEARCHES[self.search].grid:
            for key in set(main_params.values()) & set(GRID_PARAMS):
                raise ValueError(
                    f"gbdt.params.{key}: the paper grid varies it; set the list gbdt.{key}"
                )
        if self.storage and SEARCHES[self.search].grid:
            raise ValueError(
                f"gbdt.storage: the {self.search} search has no Optuna study; give "
                "gbdt.search=optuna or random with it"
            )
        if self.grid not in GRIDS:
            raise ValueError(f"gbdt.grid must be one of {', '.join(GRIDS)}, got {self.grid!r}")
        _check_list("gbdt.num_leaves", self.num_leaves, low=2)
        _check_list("gbdt.min_data_in_leaf", self.min_data_in_leaf, low=1)
        if not self.feature_fraction or not all(0 < f <= 1 for f in self.feature_fraction):
            raise ValueError("gbdt.feature_fraction must be a non-empty list of values in (0, 1]")
        POSITIVE.check("gbdt.learning_rate", self.learning_rate)
        for key in ("max_rounds", "early_stopping_rounds", "num_threads"):
            if getattr(self, key) < 1:
                raise ValueError(f"gbdt.{key} must be >= 1")
        check_allowed(self, "gbdt.")  # max_rounds
        _check_list("gbdt.pca_components", self.pca_components, low=1)
        if not 2 <= self.pseudo_levels <= MAX_LIGHTGBM_LABEL + 1:
            raise ValueError(
                f"gbdt.pseudo_levels must be in [2, {MAX_LIGHTGBM_LABEL + 1}] "
                "(LightGBM's lambdarank takes labels 0..30)"
            )
        if self.pseudo_binning not in PSEUDO_BINNINGS:
            raise ValueError(f"gbdt.pseudo_binning must be one of {', '.join(PSEUDO_BINNINGS)}")

    def trial_threads(self) -> int:
        """One fit's threads: its share of ``num_threads`` among the ``n_jobs`` at once."""
        return thread_share(self.num_threads, self.n_jobs)

    def rounds(self, epochs: int | None) -> int:
        """Boosting rounds at most: ``max_rounds``, capped by the common ``epochs`` key."""
        return self.max_rounds if epochs is None else min(self.max_rounds, epochs)


def lightgbm_param_names(params: dict[str, Any]) -> dict[str, str]:
    """Each key of ``params`` -> LightGBM's main name of it; `ValueError` naming the backend and
    the key for one LightGBM does not know or the project sets itself."""
    if not params:
        return {}
    main_of = main_names()
    out = {}
    for key in params:
        if key not in main_of:
            raise ValueError(f"gbdt.params.{key}: LightGBM has no parameter {key!r}")
        main = main_of[key]
        if main in RESERVED_PARAMS:
            raise ValueError(f"gbdt.params.{key}: set by the project; use {RESERVED_PARAMS[main]}")
        out[key] = main
    return out


def _check_list(key: str, values: list[int], *, low: int) -> None:
    if not values or min(values) < low:
        raise ValueError(f"{key} must be a non-empty list of integers >= {low}")
