"""The keys every stage shares: data set, label setting, metrics, seed, run folder, epochs, logger.

Each stage's config (pretraining, finetuning, baselines, ensembles) extends `CommonConfig`;
`scarce_ltr.core.config.load_config` merges YAML and ``key=value`` overrides into it. Every seed
is numpy's, 0 .. 2**32 - 1; ``epochs`` is at most `MAX_EPOCHS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scarce_ltr.core.config import (
    LOGGERS,
    MAX_EPOCHS,
    SEEDS,
    Allowed,
    MetricsConfig,
    allowed,
    check_allowed,
)
from scarce_ltr.data.datasets import DataConfig
from scarce_ltr.data.scarcity import ScarcityConfig

EPOCHS = Allowed(1, MAX_EPOCHS, why="leave it out for the stage's default")
# data.clip lives in `DataConfig`; every stage's config checks it here, before a run starts.
CLIP = Allowed(0, low_open=True, why="features are clipped to [-clip, clip]; leave it out for none")


@dataclass(frozen=True)
class CommonConfig:
    """Keys every stage shares."""

    data: DataConfig = field(default_factory=DataConfig)
    scarcity: ScarcityConfig = field(default_factory=ScarcityConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # seeds the labeled QGs, the model and the batches
    seed: int = field(default=0, metadata=allowed(SEEDS))
    run_dir: str | None = None  # default: runs/<data>/<stage>/<method>/<label setting>/seed=<s>
    # caps a training stage's epochs
    epochs: int | None = field(default=None, metadata=allowed(EPOCHS))
    logger: str = "wandb"  # wandb (offline unless logged in) | none

    def __post_init__(self) -> None:
        if self.logger not in LOGGERS:
            raise ValueError(f"logger must be one of {', '.join(LOGGERS)}")
        # epochs=0 would finish (DONE) a run that learned nothing: refused, not obeyed; a seed
        # outside numpy's range would stop the stage in its run folder.
        check_allowed(self)
        SEEDS.check("scarcity.seed", self.scarcity.seed)
        SEEDS.check("data.synthetic.seed", self.data.synthetic.seed)
        CLIP.check("data.clip", self.data.clip)
