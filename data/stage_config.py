"""The keys every stage shares: data set, label setting, metrics, seed, run folder, epochs, logger.

Each stage's config (pretraining, finetuning, baselines, ensembles) extends `CommonConfig`;
`scarce_ltr.core.config.load_config` merges YAML and ``key=value`` overrides into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scarce_ltr.core.config import LOGGERS, MetricsConfig
from scarce_ltr.data.datasets import DataConfig
from scarce_ltr.data.scarcity import ScarcityConfig


@dataclass(frozen=True)
class CommonConfig:
    """Keys every stage shares."""

    data: DataConfig = field(default_factory=DataConfig)
    scarcity: ScarcityConfig = field(default_factory=ScarcityConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    seed: int = 0  # seeds the labeled QGs, the model and the batches
    run_dir: str | None = None  # default: runs/<data>/<stage>/<method>/<label setting>/seed=<s>
    epochs: int | None = None  # caps a training stage's epochs
    logger: str = "wandb"  # wandb (offline unless logged in) | none

    def __post_init__(self) -> None:
        if self.logger not in LOGGERS:
            raise ValueError(f"logger must be one of {', '.join(LOGGERS)}")
        if self.epochs is not None and self.epochs < 1:
            # epochs=0 would finish (DONE) a run that learned nothing: refused, not obeyed.
            raise ValueError(
                f"epochs={self.epochs}: epochs must be >= 1 (leave it out for the stage's default)"
            )
