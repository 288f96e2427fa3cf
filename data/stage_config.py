"""The keys every stage shares: data set, label setting, metrics, seed, run folder, epochs, logger.

Each stage's config (pretraining, finetuning, baselines, ensembles) extends `CommonConfig`;
`scarce_ltr.core.config.load_config` merges YAML and ``key=value`` overrides into it. Every seed
is numpy's, 0 .. 2**32 - 1; ``epochs`` is at most `MAX_EPOCHS`.

The keys that only some stages share are declared once here too, each with its help line, and
taken on by inheritance: `DeviceKeys` (where a training stage runs: pretraining, finetuning, the
deep baselines) and `TrainingKeys` (how a deep ranker trains: finetuning and the ``deep:`` section
of the baselines). A family whose default differs redeclares that field alone (the deep
baselines' ``patience``), which keeps its place and its help line. A dataclass's fields follow
its bases, so these keys stand in ``--help`` and ``--print-config`` before the config's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scarce_ltr.core.config_fields import (
    LOGGERS,
    MAX_EPOCHS,
    NON_NEGATIVE,
    SEEDS,
    Allowed,
    MetricsConfig,
    allowed,
    check_allowed,
)
from scarce_ltr.core.run_inputs import Inputs
from scarce_ltr.data.datasets import DataConfig
from scarce_ltr.data.inputs import data_inputs
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
    # keep checkpoint.pt (a resume's state) once the run finished; it is removed by default
    keep_checkpoints: bool = False

    def __post_init__(self) -> None:
        if self.logger not in LOGGERS:
            raise ValueError(f"logger must be one of {', '.join(LOGGERS)}")
        # epochs=0 would finish (DONE) a run that learned nothing: refused, not obeyed; a seed
        # outside numpy's range would stop the stage in its run folder.
        check_allowed(self)
        SEEDS.check("scarcity.seed", self.scarcity.seed)
        SEEDS.check("data.synthetic.seed", self.data.synthetic.seed)
        CLIP.check("data.clip", self.data.clip)

    def inputs(self) -> Inputs | None:
        """The data files a run of this config reads, fingerprinted (None: not found now); what
        `scarce_ltr.core.runs.Run.execute` records and compares (`core.run_inputs`)."""
        return data_inputs(self.data)


@dataclass(frozen=True)
class DeviceKeys:
    """Where a training stage runs (`scarce_ltr.core.device.setup_runtime` reads them); a run may
    change them on resume (`scarce_ltr.core.run_config.FREE_KEYS`)."""

    amp: bool = True  # bf16 autocast of training steps on CUDA (scoring stays fp32)
    # bf16 autocast of training steps on a CPU with native bf16 (AVX512-BF16, AMX): about 2x
    # faster matmuls; evaluation (vali/test scoring, SSL Val, the monitors) stays fp32
    cpu_amp: bool = False
    device: str = "auto"  # auto | cpu | cuda

    def check_device_keys(self, prefix: str = "") -> None:
        """`ValueError` naming the key (``prefix``: where the keys sit, ``deep.`` for the
        baselines); the config calls it where its checks have always run it."""
        from scarce_ltr.core.device import check_device_choice  # torch: training stages only

        check_device_choice(f"{prefix}device", self.device)

    def runtime(self):
        """The `scarce_ltr.core.device.Runtime` these keys ask for (``auto``: CUDA when there
        is one, DDP under torchrun); the caller closes it."""
        from scarce_ltr.core.device import setup_runtime  # torch: training stages only

        device = None if self.device == "auto" else self.device
        return setup_runtime(amp=self.amp, device=device, cpu_amp=self.cpu_amp)


@dataclass(frozen=True)
class TrainingKeys(DeviceKeys):
    """How a deep ranker trains, the same in finetuning and the deep baselines (the keys
    `scarce_ltr.finetune.config.TrainOptions` hands the loop). Pretraining takes `DeviceKeys`
    alone: its ``item_budget`` and ``max_list_len`` have another default and other bounds
    (`scarce_ltr.pretrain.config.PretrainConfig`)."""

    item_budget: int = 1000  # real items per training batch (paper: about 1000)
    eval_item_budget: int = 20000  # items per batch when scoring vali and test
    max_list_len: int | None = None  # truncate longer QGs in training (a random subset)
    # Epochs without a better vali NDCG@5 that end a phase; null (the paper, A.2.3): every
    # phase runs its epochs and the vali-best checkpoint is kept.
    patience: int | None = None
    # Score vali after every n-th epoch of a phase (and its last) instead of every epoch, as
    # Keras' validation_freq and Lightning's check_val_every_n_epoch do: the checkpoint kept is
    # the vali-best of the scored epochs. With few labeled QGs scoring the whole vali split is
    # most of an epoch's time (TabM at 1 % labels: 92 %); 1: every epoch.
    vali_every: int = 1
    # Gaussian noise on the inputs in training, DASALC's augmentation (qin2021 eq 7): N(0,
    # noise_std^2) on every feature of every training batch, fresh and seeded; never at
    # evaluation; 0: off
    noise_std: float = 0.0

    def check_training_keys(self, prefix: str = "") -> None:
        """`ValueError` naming the key (``prefix`` as in `check_device_keys`), these keys' and
        the device keys' checks in the order they have always run."""
        if min(self.item_budget, self.eval_item_budget) < 1:
            raise ValueError(f"{prefix}item_budget and {prefix}eval_item_budget must be >= 1")
        if self.max_list_len is not None and self.max_list_len < 2:
            raise ValueError(f"{prefix}max_list_len must be >= 2 (or null)")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"{prefix}patience must be >= 1 (or null for none)")
        if self.vali_every < 1:
            raise ValueError(f"{prefix}vali_every must be >= 1 (1: score vali every epoch)")
        NON_NEGATIVE.check(f"{prefix}noise_std", self.noise_std)
        self.check_device_keys(prefix)
