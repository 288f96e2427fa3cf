"""``./run.sh pretrain <method>``: self-supervised pretraining of an item encoder.

``main(cfg, run)`` trains the objective of ``cfg.method`` on the train QGs (+ vali features
with ``include_vali``), measures its loss on the vali QGs (SSL Val, pretrain/ssl_val.py) after
every epoch and leaves in the run's folder: ``encoder.pt`` (the SSL-Val-best epoch's encoder,
what finetuning loads, pretrain/checkpoint.py),
``report.json`` (loss curve, timings, monitors per epoch, pretrain/report.py), ``checkpoint.pt``
(the training state after the last finished epoch, pretrain/training_state.py) and ``DONE``.
The command line skips a finished run (`core.runs.Run.execute`); an unfinished one resumes from
``checkpoint.pt`` and ends with the same weights as an uninterrupted run, because every random
draw depends on ``(seed, epoch, step, rank)`` only. Runs under ``torchrun`` as DDP.
The epochs run in the loop finetuning shares (`core.training.train_phases`, one phase, saved
after every epoch); `_Pretraining` is what its steps do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from scarce_ltr.core.device import Runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.optim import set_learning_rate
from scarce_ltr.core.progress import eta
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.core.seeding import derive_seed, generator
from scarce_ltr.core.tracking import ProgressBar, Tracker
from scarce_ltr.core.training import Cadence, Position, train_phases
from scarce_ltr.data.batching import DeviceSplit
from scarce_ltr.data.pipeline import PreparedData, prepare_data, prepare_splits
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.pretrain.checkpoint import Encoder
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.monitor import Monitor
from scarce_ltr.pretrain.objectives import OBJECTIVES
from scarce_ltr.pretrain.objectives.base import Objective
from scarce_ltr.pretrain.parts import build as _build
from scarce_ltr.pretrain.parts import chosen_encoder, save_chosen
from scarce_ltr.pretrain.parts import device_split as _device_split
from scarce_ltr.pretrain.parts import ssl_val as _ssl_val
from scarce_ltr.pretrain.pretraining_set import (
    check_pretraining_set,
    fake_group_split,
    make_batcher,
    pretraining_split,
)
from scarce_ltr.pretrain.report import log_epoch, pretrain_report
from scarce_ltr.pretrain.ssl_val import SslVal
from scarce_ltr.pretrain.training_state import (
    Progress,
    resume_training_state,
    save_training_state,
)

CHECKPOINT = "checkpoint.pt"
CRASH_ENV = "LTR_CRASH_AFTER_STEPS"  # tests: raise SimulatedCrash after this many steps


class SimulatedCrash(RuntimeError):
    """Raised mid-epoch when ``LTR_CRASH_AFTER_STEPS`` is set (resume tests)."""


@dataclass
class PretrainResult:
    objective: Objective
    outcome: Outcome
    encoder: Encoder | None = None  # the chosen encoder (None on DDP ranks but the first)


def main(cfg: PretrainConfig, run: Run) -> Outcome:
    """Pretrain (or resume) in the run the command line started; the run's outcome."""
    return pretrain(cfg, run).outcome


def pretrain(cfg: PretrainConfig, run: Run) -> PretrainResult:
    """The command's pretraining: the data set ``cfg.data`` names, read and prepared
    (`data.pipeline.prepare_data`), trained in ``run`` (resumed from its checkpoint), and
    ``encoder.pt`` written; the objective too (tests look at its weights)."""
    runtime = cfg.runtime()
    try:
        torch.manual_seed(cfg.seed)
        trained = _train(cfg, prepare_data(cfg), runtime, run)
        split, objective, progress = trained.split, trained.objective, trained.progress
        report = pretrain_report(cfg, split, objective, runtime, progress, done=True)
        outcome, encoder = Outcome(report), None
        if runtime.is_main:  # rank 0 writes the encoder; the command line then finishes the run
            encoder = chosen_encoder(cfg, objective, progress, n_features=split.n_features)
            outcome = save_chosen(run, encoder, progress, report)
        runtime.barrier()
        return PretrainResult(objective, outcome, encoder)
    finally:
        runtime.close()


def fit(
    cfg: PretrainConfig,
    data: Mapping[str, RankingSplit],
    *,
    labeled: np.ndarray | None = None,
    run: Run | None = None,
) -> Encoder:
    """Pretrain on in-memory splits: ``data`` holds raw ``train`` and ``vali`` `RankingSplit`s
    (``test`` optional), transformed as ``cfg.data.transform`` says (fit on train);
    ``labeled``: the labeled train QGs (``[n_groups]`` bool; None: ``cfg.scarcity``'s draw; only
    the monitor's probes read labels). No file is written unless ``run`` is given (a started
    `core.runs.Run`: checkpoints there, resumed from, and ``encoder.pt``; its finish is the
    caller's). The same config, splits and labels give the command's encoder, bit for bit."""
    runtime = cfg.runtime()
    try:
        torch.manual_seed(cfg.seed)
        trained = _train(cfg, prepare_splits(cfg, data, labeled=labeled), runtime, run)
        progress = trained.progress
        n_features = trained.split.n_features
        encoder = chosen_encoder(cfg, trained.objective, progress, n_features=n_features)
        if run is not None and runtime.is_main:
            encoder.save(run.folder)
        runtime.barrier()
        return encoder
    finally:
        runtime.close()


@dataclass(frozen=True)
class _Trained:
    split: RankingSplit  # the pretraining set
    objective: Objective
    progress: Progress


def _train(
    cfg: PretrainConfig, prepared: PreparedData, runtime: Runtime, the_run: Run | None
) -> _Trained:
    """The objective trained on ``prepared``'s pretraining set for ``cfg.n_epochs``; in
    ``the_run``'s folder (checkpoint, report so far, tracker), or in memory alone (None)."""
    split = pretraining_split(
        prepared, include_vali=cfg.include_vali, pool_fraction=cfg.pool_fraction, seed=cfg.seed
    )
    ssl_val = _ssl_val(cfg, prepared)
    objective, optimizer = _build(cfg, split, runtime)
    if objective.needs_training_items:  # SCARF's marginals: the whole pretraining set
        items = np.ascontiguousarray(split.features, dtype=np.float32)
        objective.set_training_items(torch.from_numpy(items).to(runtime.device))
    progress = Progress()
    if the_run is not None:
        progress = resume_training_state(
            the_run.folder / CHECKPOINT, objective, optimizer, cfg, split.n_features
        )
    check_pretraining_set(
        split,
        _batcher(split, cfg, runtime, epoch=progress.epoch),
        method=cfg.method,
        needs_groups=objective.qg_negatives,
        world_size=runtime.world_size,
    )
    model = objective
    if runtime.distributed:
        ids = [runtime.local_rank] if runtime.device.type == "cuda" else None
        model = DistributedDataParallel(objective, device_ids=ids)
    monitor = None
    if runtime.is_main and cfg.monitor.enabled:
        monitor = Monitor(prepared, split, cfg.monitor, seed=cfg.seed)
    tracker = Tracker()  # in memory: nothing logged
    if the_run is not None:
        tracker = the_run.open_tracker(
            asdict(cfg), run_id=progress.wandb_id, enabled=runtime.is_main
        )
    progress.wandb_id = tracker.run_id
    if progress.epoch == 0 and monitor is not None:
        progress.initial = _measure(monitor, objective, cfg, runtime)
        progress.raw_probe = monitor.raw_probe(cfg.metrics.policy)
        tracker.log({"monitor": progress.initial}, step=0)
    task = _Pretraining(
        cfg,
        the_run,
        runtime,
        split,
        objective,
        model,
        optimizer,
        progress,
        ssl_val,
        monitor,
        tracker,
        _device_split(split, cfg, runtime),
    )
    # one phase, no early stopping (the SSL-Val choice keeps its best epoch); saved every epoch
    train_phases(task, progress, [cfg.n_epochs], patience=None, cadence=Cadence(0, phase_end=False))
    return _Trained(split, objective, progress)


def _measure(monitor: Monitor, objective: Objective, cfg: PretrainConfig, runtime) -> dict:
    return monitor.measure(objective, device=runtime.device, policy=cfg.metrics.policy)


def _batcher(
    split: RankingSplit,
    cfg: PretrainConfig,
    runtime: Runtime,
    *,
    epoch: int,
    on_device: DeviceSplit | None = None,
):
    if OBJECTIVES[cfg.method].fake_groups:
        split = fake_group_split(split, seed=cfg.seed, epoch=epoch)
    batcher = make_batcher(
        split,
        item_budget=cfg.item_budget,
        max_list_len=cfg.max_list_len,
        seed=cfg.seed,
        rank=runtime.rank,
        world_size=runtime.world_size,
        length_buckets=cfg.length_buckets,
        on_device=on_device,
    )
    batcher.set_epoch(epoch)
    return batcher


class _CrashAfter:
    def __init__(self) -> None:
        value = os.environ.get(CRASH_ENV, "")
        self.left = int(value) if value.strip() else None

    def step(self) -> None:
        if self.left is not None:
            self.left -= 1
            if self.left <= 0:
                raise SimulatedCrash(f"{CRASH_ENV} reached")


@dataclass(eq=False)
class _Pretraining:
    """Pretraining's steps of `core.training.train_phases`: one phase of ``cfg.n_epochs``,
    each epoch trained, monitored and scored on SSL Val, then its line printed and, on the main
    process, the checkpoint, the report so far and the tracker's row written."""

    cfg: PretrainConfig
    the_run: Run | None  # None: in memory, nothing saved
    runtime: Runtime
    split: RankingSplit
    objective: Objective
    model: torch.nn.Module  # the objective, or its DDP wrapper
    optimizer: torch.optim.Optimizer
    progress: Progress
    ssl_val: SslVal | None
    monitor: Monitor | None  # the main process's, when cfg.monitor.enabled
    tracker: Any
    on_device: DeviceSplit | None  # `_device_split`
    crash: _CrashAfter = field(default_factory=_CrashAfter)
    # the ETA: this process's pace since its first epoch
    first_epoch: int = field(init=False)
    loop_start: float = field(init=False, default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.first_epoch = self.progress.epoch

    def begin_phase(self, position: Position) -> None:
        """The one optimizer, built (or resumed) with the objective, trains every epoch."""

    def run_epoch(self, position: Position) -> dict:
        cfg, runtime, epoch, objective = self.cfg, self.runtime, position.epoch, self.objective
        batcher = _batcher(self.split, cfg, runtime, epoch=epoch, on_device=self.on_device)
        stats = _train_epoch(self.model, self.optimizer, batcher, cfg, runtime, epoch, self.crash)
        if self.monitor is not None and _monitor_due(cfg, epoch):
            stats["monitor"] = _measure(self.monitor, objective, cfg, runtime)
        if self.ssl_val is not None:
            loss = self.ssl_val.loss(objective, device=runtime.device)
            stats["ssl_val_loss"] = loss
            self.progress.choice.offer(epoch + 1, loss, objective.encoder)
        return stats

    def end_epoch(self, position: Position, stats: dict) -> bool:
        progress, cfg = self.progress, self.cfg
        progress.seconds += stats["seconds"]
        progress.history.append(stats)
        if self.runtime.is_main:
            elapsed = time.perf_counter() - self.loop_start
            left = eta(elapsed, position.epoch - self.first_epoch, cfg.n_epochs - self.first_epoch)
            log_epoch(cfg, stats, progress, self.objective.width, left)
        return False  # nothing is chosen on vali here: `Choice` keeps the SSL-Val-best encoder

    def end_phase(self, position: Position) -> None:
        """The last epoch's weights stay; `parts.chosen_encoder` loads the SSL-Val-chosen one."""

    def save(self, position: Position, *, in_phase: bool) -> None:
        if self.the_run is None:  # in memory: no checkpoint, no report, nothing logged
            return
        if self.runtime.is_main:
            cfg, split, progress, objective = self.cfg, self.split, self.progress, self.objective
            folder = self.the_run.folder
            save_training_state(
                folder / CHECKPOINT, objective, self.optimizer, cfg, split, progress
            )
            self.the_run.write_report(
                pretrain_report(cfg, split, objective, self.runtime, progress, done=False)
            )
            self.tracker.log(progress.history[-1], step=position.epoch)
        self.runtime.barrier()


def _train_epoch(
    model, optimizer, batcher, cfg: PretrainConfig, runtime: Runtime, epoch: int, crash
) -> dict:
    # Dropout draws from the global generator: reseed it per (seed, epoch, rank).
    torch.manual_seed(derive_seed(cfg.seed, epoch, runtime.rank))
    model.train()
    loss_sum, items, steps, skipped = 0.0, 0, 0, 0
    start = time.perf_counter()
    bar = ProgressBar(
        batcher, total=len(batcher), desc=f"epoch {epoch + 1}", enabled=runtime.is_main
    )
    n_steps = max(len(batcher), 1)
    for step, batch in enumerate(bar):
        set_learning_rate(
            optimizer,
            cfg.optimizer.lr,
            schedule=cfg.optimizer.schedule,
            warmup=cfg.optimizer.warmup,
            progress=(epoch + step / n_steps) / max(cfg.n_epochs, 1),
        )
        features = batch.features.to(runtime.device, non_blocking=True)
        mask = batch.mask.to(runtime.device, non_blocking=True)
        n_items = int(batch.mask.sum())
        # A batch of one item gives BatchNorm no statistics; every rank skips it together.
        if runtime.any(n_items < 2):
            skipped += 1
            continue
        with runtime.train_autocast():
            loss = model(
                features,
                mask,
                generator=generator(runtime.device, cfg.seed, epoch, step, runtime.rank),
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        value = float(loss.detach())
        if value != value:  # NaN
            raise UserError(
                f"pretrain {cfg.method}: the loss is NaN at epoch {epoch + 1}, step {step + 1}; "
                "lower optimizer.lr or check the features (data.transform, data.clip)"
            )
        loss_sum, items, steps = loss_sum + value * n_items, items + n_items, steps + 1
        bar.set_postfix(loss=f"{value:.4f}", items_s=f"{items / (time.perf_counter() - start):.0f}")
        crash.step()
    bar.close()
    seconds = time.perf_counter() - start
    loss_sum, total = runtime.all_reduce_sum([loss_sum, float(items)])
    return {
        "epoch": epoch + 1,
        "loss": loss_sum / max(total, 1.0),
        "seconds": seconds,
        "items": int(total),
        "items_per_s": total / max(seconds, 1e-9),
        "steps": steps,
        "skipped_batches": skipped,
    }


def _monitor_due(cfg: PretrainConfig, epoch: int) -> bool:
    return (epoch + 1) % cfg.monitor.every == 0 or epoch + 1 == cfg.n_epochs
