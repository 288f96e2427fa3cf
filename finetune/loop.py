"""The supervised training loop of every deep ranker: finetuning, combining, deep baselines.

``fit`` trains a model on the labeled train QGs phase by phase (`finetune.config.Phase`), in
the epoch loop pretraining shares (`core.training.train_phases`; `_Fit` is what its steps do): a
new Adam optimizer over the parameters the phase trains, one epoch of shuffled QG batches, then
NDCG@5 on the labeled vali QGs (`data.evaluation.vali_metrics`). The initial model counts as
epoch 0. A phase ends after its epochs or after ``patience`` epochs without a better vali NDCG@5;
the best model so far is then restored, so the next phase starts from it and the model ``fit``
returns is the validation-best one. A checkpoint written at the end of every phase and
every `CHECKPOINT_SECONDS` of training lets an interrupted run resume where it last saved, and
the resumed run ends exactly as an uninterrupted one.

Scores come from the model in eval mode, one batch of whole QGs at a time (`predict`, in
`finetune.scoring` with the vali NDCG@5 and the frozen encoder's cache), so a QG's scores never
depend on which other QGs share its batch. An epoch's steps are `finetune.steps`; what a fit
keeps in its checkpoint and returns, `finetune.fit_state`.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.checkpointing import load_checkpoint, require_keys
from scarce_ltr.core.device import Runtime
from scarce_ltr.core.optim import make_optimizer
from scarce_ltr.core.progress import progress_bar
from scarce_ltr.core.seeding import restore_rng_state
from scarce_ltr.core.training import Cadence, Position, train_phases
from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.finetune.config import Phase, TrainOptions
from scarce_ltr.finetune.fit_state import (
    STATE_KEYS,
    FitResult,
    Progress,
    Prune,
    TrialPruned,
    save_state,
)
from scarce_ltr.finetune.joint import Joint, JointEpoch, JointRun
from scarce_ltr.finetune.l2sp import L2SP
from scarce_ltr.finetune.scoring import (
    FrozenEncoderCache,
    FrozenTrainItems,
    KeptBatches,
    selection_score,
)
from scarce_ltr.finetune.scoring import predict as predict  # where its callers import it from
from scarce_ltr.finetune.steps import LossFn, lr_schedule, noise_generator, train_epoch
from scarce_ltr.search.selection import nan_low

if TYPE_CHECKING:
    from scarce_ltr.finetune.teacher import Teaching

# Seconds of training between two checkpoints inside a phase (every phase's end is saved too):
# epochs of small data sets take milliseconds, and saving each one took 15 % of a run.
CHECKPOINT_SECONDS = 10.0


def training_groups(prepared: PreparedData) -> np.ndarray:
    """Labeled train QGs with a relevant item (the others give no gradient to any loss)."""
    return prepared.labels.trained_groups()


def fit(
    model: nn.Module,
    prepared: PreparedData,
    *,
    phases: list[Phase],
    loss_fn: LossFn,
    options: TrainOptions,
    metrics_cfg,
    runtime: Runtime,
    seed: int,
    checkpoint: Path | None = None,
    log: Callable[[dict], None] | None = None,
    meta: dict | None = None,
    desc: str = "finetune",
    teaching: Teaching | None = None,
    prune: Prune | None = None,
    joint: Joint | None = None,
) -> FitResult:
    """Train ``model`` in place; on return it holds the validation-best weights.

    ``prune``: asked after every epoch (and once on resume) with the history so far; True
    raises `TrialPruned` (a search's pruner, `finetune.search`).

    ``teaching``: the unlabeled train QGs join the labeled ones with a teacher's targets
    (`finetune.teacher`); vali stays the labeled vali QGs.

    ``joint``: in the phases that train the encoder, every train QG joins the batches and a
    self-supervised loss of them is added (`finetune.joint`); its projector is checkpointed.

    ``checkpoint``: where to save (and resume from) the training state at the end of every
    phase and, inside a phase, after the first epoch that ends `CHECKPOINT_SECONDS` after the
    last save (a crash loses at most that much training), with
    ``meta`` (plain values the caller wants back on resume: the checkpoint's ``"meta"`` entry).

    ``options.l2sp > 0``: L2-SP against the encoder's weights as ``model`` holds them on entry,
    the pretrained ones (a caller passes a freshly built model, also on resume: the anchor is
    taken before the checkpoint is loaded), copied on the model's device.
    """
    model.to(runtime.device)
    l2sp = L2SP(model.encoder, alpha=options.l2sp) if options.l2sp > 0 else None
    task = _Fit(
        model,
        prepared,
        phases,
        loss_fn,
        options,
        metrics_cfg,
        runtime,
        seed,
        checkpoint=checkpoint,
        log=log,
        meta=meta,
        teaching=teaching,
        l2sp=l2sp,
        prune=prune,
    )
    if joint is not None:
        task.joint = JointRun.start(
            joint,
            model,
            prepared=prepared,
            runtime=runtime,
            seed=seed,
            item_budget=options.eval_item_budget,
        )
    if checkpoint is not None and checkpoint.is_file():
        task.resume(checkpoint, desc)
    task.batches = _training_batches(prepared, options, seed, teaching)
    if task.joint is not None:
        task.joint_batches = task.joint.batches(options.item_budget, options.max_list_len)
    if not task.progress.history:  # the initial model is a candidate too (epoch 0)
        task.score_initial()
    total = sum(p.epochs for p in phases)
    task.bar = progress_bar(total=total, initial=task.progress.epoch, desc=desc, unit="epoch")
    saving = checkpoint is not None
    try:
        task.check_prune()  # a resumed trial: its epochs so far are the pruner's again
        train_phases(
            task,
            task.progress,
            [p.epochs for p in phases],
            patience=options.patience,
            cadence=Cadence(CHECKPOINT_SECONDS if saving else None, phase_end=saving),
        )
    finally:
        task.bar.close()
    return task.result()


def _training_batches(
    prepared: PreparedData, options: TrainOptions, seed: int, teaching: Teaching | None
) -> QueryGroupBatcher:
    """The shuffled train QGs: the labeled ones with a relevant item, or the taught ones."""
    return QueryGroupBatcher(
        prepared.train if teaching is None else teaching.split,
        item_budget=options.item_budget,
        groups=training_groups(prepared) if teaching is None else teaching.groups,
        shuffle=True,
        seed=seed,
        max_list_len=options.max_list_len,
    )


@dataclass(eq=False)
class _Fit:
    """`fit`'s steps of `core.training.train_phases`: a new optimizer per phase over what it
    trains, an epoch of shuffled QG batches, vali NDCG@5, the vali-best weights kept and
    restored at each phase's end; the checkpoint holds weights, optimizer, best weights,
    `Progress` and the random states."""

    model: nn.Module
    prepared: PreparedData
    phases: list[Phase]
    loss_fn: LossFn
    options: TrainOptions
    metrics_cfg: Any
    runtime: Runtime
    seed: int
    checkpoint: Path | None
    log: Callable[[dict], None] | None
    meta: dict | None
    teaching: Teaching | None
    l2sp: L2SP | None = None  # the encoder's anchor (`finetune.l2sp`), in encoder phases
    prune: Prune | None = None  # a search's pruner, asked after each epoch
    progress: Progress = field(default_factory=Progress)
    best_state: dict | None = None
    opt_state: dict | None = None  # a resumed phase's optimizer, loaded when it begins
    optimizer: torch.optim.Optimizer | None = None
    frozen: FrozenEncoderCache = field(default_factory=FrozenEncoderCache)
    vali_batches: KeptBatches = field(default_factory=KeptBatches)  # collated once per fit
    train_items: FrozenTrainItems = field(default_factory=FrozenTrainItems)
    use_train_items: bool = False  # the phase trains the head on `train_items`
    batches: QueryGroupBatcher | None = None  # set once resumed (`_training_batches`)
    joint: JointRun | None = None  # `finetune.joint`'s projector, in encoder phases
    joint_batches: QueryGroupBatcher | None = None  # every train QG, in encoder phases
    joint_epoch: JointEpoch | None = None  # the last epoch's joint term
    bar: Any = None  # the epochs' progress bar, once the initial model is scored

    def resume(self, checkpoint: Path, desc: str) -> None:
        state = load_checkpoint(checkpoint, what="finetuning checkpoint")
        require_keys(state, STATE_KEYS, path=checkpoint, what="finetuning checkpoint")
        self.model.load_state_dict(state["model"])
        self.best_state, self.opt_state = state["best_model"], state["optimizer"]
        if self.joint is not None:
            require_keys(state, ("joint",), path=checkpoint, what="finetuning checkpoint")
            self.joint.load_state_dict(state["joint"])
        self.progress = Progress(**state["progress"])
        restore_rng_state(state["rng"])
        epoch = self.progress.epoch
        print(f"{desc}: resuming from {checkpoint} after epoch {epoch}", file=sys.stderr)

    def evaluate(self) -> float:
        start = time.perf_counter()
        score = selection_score(
            self.model,
            self.prepared,
            self.metrics_cfg,
            runtime=self.runtime,
            item_budget=self.options.eval_item_budget,
            frozen=self.frozen,
            kept=self.vali_batches,
        )
        self.progress.eval_seconds += time.perf_counter() - start
        return score

    def score_initial(self) -> None:
        _set_phase(self.model, self.phases[0] if self.phases else Phase("head", 0, False))
        score = self.evaluate()
        self.progress.best_score, self.best_state = nan_low(score), _copy_state(self.model)
        self.progress.history.append({"epoch": 0, "phase": "init", "vali_ndcg@5": score})

    def begin_phase(self, position: Position) -> None:
        phase = self.phases[position.phase]
        _set_phase(self.model, phase)
        if phase.train_encoder:
            self.frozen.clear()  # later frozen phases see the encoder this phase trains
        self.train_items.clear()
        self.use_train_items = (
            not phase.train_encoder
            and self.teaching is None
            and self.options.noise_std == 0
            and self.train_items.fill(
                self.model,
                self.prepared.train,
                training_groups(self.prepared),
                runtime=self.runtime,
                item_budget=self.options.item_budget,
                max_list_len=self.options.max_list_len,
            )
        )
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        if self.joint is not None and phase.train_encoder:
            trainable += self.joint.parameters()
        options, lr = self.options, self.options.rate(phase)
        self.optimizer = make_optimizer(
            trainable, name=options.optimizer, lr=lr, weight_decay=options.weight_decay
        )
        if self.opt_state is not None:
            self.optimizer.load_state_dict(self.opt_state)
            self.opt_state = None

    def run_epoch(self, position: Position) -> tuple[float, float]:
        """``(mean train loss, vali NDCG@5)`` of the epoch."""
        phase = self.phases[position.phase]
        with_joint = self.joint is not None and phase.train_encoder
        batches = self.batches
        if with_joint:
            batches = self.joint.epoch_batches(self.joint_batches, position.epoch)
        batches.set_epoch(position.epoch)
        start = time.perf_counter()
        self.joint_epoch = None
        if with_joint:  # its own-score grades are refreshed here, in training's time
            self.joint_epoch = self.joint.epoch(self.model, batches, position, phase.epochs)
        # the encoder sits at its anchor while frozen: no penalty, no gradient
        penalty = self.l2sp if phase.train_encoder else None
        loss = train_epoch(
            self.model,
            batches,
            self.optimizer,
            self.loss_fn,
            runtime=self.runtime,
            noise_std=self.options.noise_std,
            generator=noise_generator(self.seed, position.epoch, self.runtime),
            schedule=lr_schedule(self.optimizer, self.options, position.phase_epoch, phase),
            teaching=self.teaching,
            penalty=penalty,
            encoded=self.train_items.lookup if self.use_train_items else None,
            joint=self.joint_epoch,
        )
        self.progress.train_seconds += time.perf_counter() - start
        return loss, self.evaluate() if self.vali_due(position) else None

    def vali_due(self, position: Position) -> bool:
        """Whether vali is scored after the epoch ``position`` is about to count: every
        ``vali_every``-th epoch of the phase and its last (1: every epoch)."""
        done = position.phase_epoch + 1
        every = self.options.vali_every
        return every == 1 or done % every == 0 or done == self.phases[position.phase].epochs

    def end_epoch(self, position: Position, trained: tuple[float, float | None]) -> bool:
        loss, score = trained
        progress, phase = self.progress, self.phases[position.phase]
        row = {"epoch": position.epoch, "phase": phase.name, "train_loss": loss}
        if self.l2sp is not None:  # the epoch's mean penalty, beside the ranking loss
            row["l2sp_penalty"] = self.l2sp.epoch_mean()
        if self.joint_epoch is not None:  # the epoch's mean self-supervised loss and weight
            row["joint_loss"] = self.joint_epoch.mean()
            row["joint_weight"] = self.joint_epoch.weight
        if score is None:  # not scored after this epoch (vali_every): no candidate
            progress.history.append(row)
            if self.log is not None:
                self.log(row)
            self.bar.set_postfix(loss=f"{loss:.4f}")
            self.bar.update(1)
            self.check_prune()
            return False
        row["vali_ndcg@5"] = score
        progress.history.append(row)
        better = nan_low(score) > progress.best_score
        if better:
            progress.best_score, progress.best_epoch = score, position.epoch
            self.best_state = _copy_state(self.model)
        if self.log is not None:
            self.log({**row, "best_vali_ndcg@5": progress.best_score})
        self.bar.set_postfix(loss=f"{loss:.4f}", vali=f"{score:.4f}")  # before: lines show it
        self.bar.update(1)
        self.check_prune()
        return better

    def check_prune(self) -> None:
        """`TrialPruned` when the search's pruner stops the trial after its last epoch."""
        if self.prune is not None and self.prune(self.progress.history):
            raise TrialPruned(self.result())

    def end_phase(self, position: Position) -> None:
        # the epochs early stopping skipped
        self.bar.update(self.phases[position.phase].epochs - position.phase_epoch)
        self.model.load_state_dict(self.best_state)

    def save(self, position: Position, *, in_phase: bool) -> None:
        optimizer = self.optimizer if in_phase else None  # a new phase makes a new one
        joint = None if self.joint is None else self.joint.state_dict()
        save_state(
            self.checkpoint, self.model, optimizer, self.best_state, self.progress, self.meta, joint
        )

    def result(self) -> FitResult:
        """The vali-best weights back in the model, eval mode, and what training took."""
        self.model.load_state_dict(self.best_state)
        self.model.eval()
        progress = self.progress
        trained = max(progress.epoch, 1)
        return FitResult(
            best_epoch=progress.best_epoch,
            best_vali=progress.best_score,
            epochs=progress.epoch,
            seconds_per_epoch=(progress.train_seconds + progress.eval_seconds) / trained,
            train_seconds_per_epoch=progress.train_seconds / trained,
            history=progress.history,
        )


def _set_phase(model: nn.Module, phase: Phase) -> None:
    if hasattr(model, "set_phase"):
        model.set_phase(train_encoder=phase.train_encoder)


def _copy_state(model: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in copy.copy(model.state_dict()).items()}
