"""Joint semi-supervised finetuning (``joint.*``): the unlabeled pool during finetuning.

With ``joint.weight`` > 0 one optimisation trains the ranking loss of the labeled train QGs (as
without it) plus ``weight`` times a self-supervised loss on every train QG of the batch, labeled
and unlabeled: the unlabeled QGs join the training batches (as a teacher's do,
`finetune.teacher`) but give the ranking loss nothing; with a teacher too, the teacher's term
stays what it is. The self-supervised loss is pretraining's, reused: two views of each real
item, each entry replaced with probability ``replace_p`` by the same feature of a donor item
(`pretrain.augmentations.view_augmentation`, within-QG donors), the encoder, a `Projector` and
eq. 2 (``simclr``, `simclr_loss`) or eq. 3 (``simclr-rank``, `simclr_rank_loss_items`).

It applies in the phases that train the encoder (``full``'s second): while the encoder is
frozen the loss could only move its projector, so the head-only epochs are exactly those of a
run without it (same batches, same draws). The projector exists during training only: it is
saved in the checkpoint (a resumed run ends as an uninterrupted one), never in ``model.pt``.

Donors (``joint.donors``): ``qg``, any real item of the same QG (the item itself included, as
``augment.replace_source=qg``); ``grade``, an item of the same QG and the same grade: labeled
QGs by their labels, unlabeled ones by pseudo-grades (`data.teachers.pseudo_labels`, global
bins into as many levels as the labeled grades, or ``teaching.levels``) of a teacher run's
scores, or without one (``teacher=self`` too) of the network's own scores, refreshed at the
start of every epoch in eval mode (self-training). An item alone in its grade keeps its values.

The views of step ``s`` of epoch ``e`` draw from a generator seeded by ``(seed, e, s)``; the
projector's initial weights from one seeded by the run's seed, outside torch's global stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.config_fields import NON_NEGATIVE, POSITIVE, changed_keys
from scarce_ltr.core.device import Runtime
from scarce_ltr.core.training import Position
from scarce_ltr.data.batching import Batch, QueryGroupBatcher
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit, rows_of_groups
from scarce_ltr.data.teachers import (
    no_teacher,
    pseudo_labels,
    self_taught,
    teacher_train_scores,
    with_pseudo_labels,
)
from scarce_ltr.finetune.joint_loss import OBJECTIVES, joint_loss
from scarce_ltr.finetune.scoring import predict
from scarce_ltr.finetune.teacher import Teaching, grade_levels
from scarce_ltr.pretrain.heads import Projector
from scarce_ltr.pretrain.objectives.base import check_probability

DONORS = ("qg", "grade")
SCHEDULES = ("constant", "decay")
_PROJECTOR_STREAM = 60  # the projector's initial weights: (seed, this)
_SUBSET_STREAM = 61  # an epoch's unlabeled QGs: (seed, this, epoch)


@dataclass(frozen=True)
class JointConfig:
    """The ``joint:`` section of a finetuning config (docs/finetune.md, "Joint training")."""

    # of the self-supervised loss against the ranking loss; 0: off, finetuning as without it
    weight: float = 0.0
    # simclr (paper eq 2: negatives from the whole batch) | simclr-rank (eq 3: from the QG)
    objective: str = "simclr"
    # each entry of a view replaced with this probability by a donor's (the released recipe's)
    replace_p: float = 0.8
    temperature: float = 0.07  # of the contrastive logits
    projector_dim: int = 16  # the projector's width (training only, not in model.pt)
    # constant | decay (the weight linearly to 0 over the whole-network epochs)
    schedule: str = "constant"
    # qg: donors from the item's QG | grade: from its QG and grade (labels, else pseudo-grades)
    donors: str = "qg"
    # unlabeled QGs in each whole-network epoch, drawn anew each epoch with (seed, epoch); 0:
    # every one. An epoch costs about (labeled + this) QGs instead of the whole train split.
    unlabeled_per_epoch: int = 0

    def __post_init__(self) -> None:
        NON_NEGATIVE.check("joint.weight", self.weight)
        POSITIVE.check("joint.temperature", self.temperature)
        check_probability("joint.replace_p", self.replace_p, closed=True)
        if self.projector_dim < 1:
            raise ValueError(f"joint.projector_dim={self.projector_dim}: must be >= 1")
        NON_NEGATIVE.check("joint.unlabeled_per_epoch", self.unlabeled_per_epoch)
        for key, value, names in (
            ("objective", self.objective, tuple(OBJECTIVES)),
            ("schedule", self.schedule, SCHEDULES),
            ("donors", self.donors, DONORS),
        ):
            if value not in names:
                raise ValueError(f"joint.{key} must be one of {', '.join(names)}, got {value!r}")

    @property
    def on(self) -> bool:
        return self.weight > 0

    def check_read(self) -> None:
        """Stop when a key is set away from its default while ``weight`` is 0 (nothing reads
        it then: a silent no-op otherwise)."""
        changed = [k for k in changed_keys("joint", self, JointConfig()) if ".weight=" not in k]
        if changed and not self.on:
            raise ValueError(
                f"{', '.join(changed)}: joint.* is read only with joint.weight > 0; give a "
                "weight or leave joint.* out"
            )

    def weight_at(self, phase_epoch: int, phase_epochs: int) -> float:
        """The weight of epoch ``phase_epoch`` (0-based) of a phase of ``phase_epochs``:
        ``weight``, or under ``decay`` ``weight * (1 - phase_epoch / phase_epochs)``."""
        if self.schedule == "constant":
            return self.weight
        return self.weight * (1.0 - phase_epoch / max(phase_epochs, 1))


@dataclass(frozen=True)
class Joint:
    """What `finetune.loop.fit` trains on with ``joint.weight`` > 0 (`joint_for`)."""

    config: JointConfig
    split: RankingSplit  # the batches' split: no label of an unlabeled QG (or the teacher's)
    # [n] train QGs in the batches: the unlabeled ones and the labeled ones with a relevant item
    # (the others give no ranking gradient and stay out, as without joint training)
    groups: np.ndarray
    labeled: np.ndarray  # [n_train_groups] bool: the QGs whose ranking loss counts
    unlabeled: np.ndarray  # [k] the non-empty unlabeled train QGs
    grades: np.ndarray | None  # [n_train_items] donors=grade: labels, teacher levels or 0
    own_grades: bool  # the unlabeled items' grades are the model's own scores, each epoch
    levels: int  # of the pseudo-grades
    summary: dict  # the report's ``joint`` entry

    def labeled_rows(self, groups: torch.Tensor) -> torch.Tensor:
        """``[B]`` bool: the batch rows whose ranking loss counts."""
        return torch.from_numpy(self.labeled[groups.cpu().numpy()]).to(groups.device)


def joint_for(cfg, prepared: PreparedData, teaching: Teaching | None) -> Joint | None:
    """``cfg.joint`` on ``prepared``'s train QGs (with ``teaching``'s batches where a teacher
    teaches); None when off or for a config without the section (the deep baselines)."""
    config: JointConfig | None = getattr(cfg, "joint", None)
    if config is None or not config.on:
        return None
    labels, train = prepared.labels, prepared.train
    unlabeled = np.flatnonzero(~labels.train_labeled & (train.group_sizes > 0))
    rows = rows_of_groups(train.offsets, np.flatnonzero(~labels.train_labeled))
    if teaching is not None:
        split, groups = teaching.split, teaching.groups
    else:  # the unlabeled QGs' labels are never read: zeros stand in
        split = with_pseudo_labels(train, labels.train_labeled, np.zeros(len(rows), np.float32))
        groups = np.union1d(labels.trained_groups(), unlabeled)
    teacher = getattr(cfg, "teacher", None)
    by_run = not no_teacher(teacher) and not self_taught(teacher)
    levels = (cfg.teaching.levels if by_run else 0) or grade_levels(prepared)
    grades, source = None, None
    if config.donors == "grade":
        scores = teacher_train_scores(teacher, cfg, prepared) if by_run else None
        grades = _donor_grades(prepared, rows, scores, levels)
        source = "own scores" if scores is None else "teacher"
    summary = {
        "weight": config.weight,
        "objective": config.objective,
        "replace_p": config.replace_p,
        "temperature": config.temperature,
        "projector_dim": config.projector_dim,
        "schedule": config.schedule,
        "donors": config.donors,
        "unlabeled_per_epoch": config.unlabeled_per_epoch,
        "n_groups": len(groups),
        "n_unlabeled_groups": len(unlabeled),
    }
    if source is not None:
        summary |= {"pseudo_grades": source, "levels": levels}
    return Joint(
        config=config,
        split=split,
        groups=groups,
        labeled=labels.train_labeled.copy(),
        unlabeled=unlabeled,
        grades=grades,
        own_grades=source == "own scores",
        levels=levels,
        summary=summary,
    )


def _donor_grades(
    prepared: PreparedData, rows: np.ndarray, scores: np.ndarray | None, levels: int
) -> np.ndarray:
    """``[n_train_items]`` float32 grades: the labeled QGs' labels; on the unlabeled ``rows``
    the teacher's ``scores`` binned into ``levels``, or 0 until the model's own stand in."""
    train = prepared.train
    labeled = np.repeat(prepared.labels.train_labeled, train.group_sizes)
    grades = np.where(labeled, train.labels, 0.0).astype(np.float32)
    if scores is not None:
        grades[rows] = pseudo_labels(scores[rows], levels=levels)
    return grades


@dataclass(eq=False)
class JointRun:
    """One `fit`'s joint training: the projector (trained with the encoder, checkpointed) and
    the epochs' batches and grades."""

    joint: Joint
    prepared: PreparedData
    runtime: Runtime
    seed: int
    item_budget: int  # of the own-score passes (the scoring batch size)
    projector: nn.Module = field(init=False)

    @classmethod
    def start(cls, joint: Joint, model: nn.Module, **kwargs) -> JointRun:
        """A fresh projector for ``model``'s encoder, its weights from the run's seed."""
        run = cls(joint, **kwargs)
        state = np.random.SeedSequence([run.seed, _PROJECTOR_STREAM]).generate_state(1)[0]
        with torch.random.fork_rng(devices=[]):  # torch's global stream stays as it was
            torch.manual_seed(int(state))
            width = int(model.encoder.out_dim)
            run.projector = Projector(in_dim=width, dim=joint.config.projector_dim)
        run.projector.to(run.runtime.device)
        return run

    def parameters(self) -> list[nn.Parameter]:
        return list(self.projector.parameters())

    def state_dict(self) -> dict:
        return {"projector": self.projector.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.projector.load_state_dict(state["projector"])

    def batches(
        self, item_budget: int, max_list_len: int | None, groups: np.ndarray | None = None
    ) -> QueryGroupBatcher:
        """The shuffled batches of the whole-network epochs: ``groups``, by default every QG of
        `Joint.groups`."""
        return QueryGroupBatcher(
            self.joint.split,
            item_budget=item_budget,
            groups=self.joint.groups if groups is None else groups,
            shuffle=True,
            seed=self.seed,
            max_list_len=max_list_len,
        )

    def epoch_batches(self, batches: QueryGroupBatcher, epoch: int) -> QueryGroupBatcher:
        """``batches`` (`batches`'), or with ``joint.unlabeled_per_epoch`` = n the same batching
        of the labeled QGs and n unlabeled ones drawn for ``epoch`` with ``(seed, epoch)``."""
        n, unlabeled = self.joint.config.unlabeled_per_epoch, self.joint.unlabeled
        if not n or n >= len(unlabeled):
            return batches
        state = np.random.SeedSequence([self.seed, _SUBSET_STREAM, epoch])
        drawn = np.random.default_rng(state).choice(unlabeled, size=n, replace=False)
        groups = np.union1d(np.setdiff1d(self.joint.groups, unlabeled), drawn)
        return self.batches(batches.item_budget, batches.max_list_len, groups)

    def epoch(
        self, model: nn.Module, batches: QueryGroupBatcher, position: Position, phase_epochs: int
    ) -> JointEpoch:
        """The joint term of the epoch after ``position`` (``batches`` set to it), in a phase
        of ``phase_epochs`` epochs."""
        weight = self.joint.config.weight_at(position.phase_epoch, phase_epochs)
        grades = self.joint.grades
        if grades is not None and self.joint.own_grades and len(self.joint.unlabeled):
            grades = grades.copy()
            rows = rows_of_groups(self.prepared.train.offsets, self.joint.unlabeled)
            scores = predict(
                model,
                self.prepared.train,
                runtime=self.runtime,
                item_budget=self.item_budget,
                groups=self.joint.unlabeled,
            )
            grades[rows] = pseudo_labels(scores[rows], levels=self.joint.levels)
        graded = None if grades is None else _lockstep(batches, grades)
        return JointEpoch(self, weight=weight, epoch=position.epoch, graded=graded)


def _lockstep(batches: QueryGroupBatcher, grades: np.ndarray) -> Iterator[Batch]:
    """Batches of ``grades`` as labels (no features) in the order and shape of ``batches``'s:
    the same QGs, the same truncation draws."""
    split = batches.split
    graded = RankingSplit(
        np.zeros((split.n_items, 0), np.float32), grades, split.offsets, split.qids, "grades"
    )
    twin = QueryGroupBatcher(
        graded,
        item_budget=batches.item_budget,
        groups=batches.groups,
        shuffle=batches.shuffle,
        seed=batches.seed,
        max_list_len=batches.max_list_len,
    )
    twin.set_epoch(batches.epoch)
    return iter(twin)


@dataclass(eq=False)
class JointEpoch:
    """The joint term of one epoch's steps (`finetune.steps.train_epoch`)."""

    run: JointRun
    weight: float
    epoch: int
    graded: Iterator[Batch] | None
    total: float = 0.0
    steps: int = 0

    def labeled_rows(self, groups: torch.Tensor) -> torch.Tensor:
        return self.run.joint.labeled_rows(groups)

    def loss(self, model: nn.Module, batch: Batch, step: int) -> torch.Tensor:
        """``weight`` x the self-supervised loss of step ``step``'s batch (on the device)."""
        runtime, config = self.run.runtime, self.run.joint.config
        grades = None
        if self.graded is not None:
            twin = next(self.graded)
            if not torch.equal(twin.groups, batch.groups.cpu()):
                raise RuntimeError("joint: the grade batches left the training batches' order")
            grades = twin.labels.to(runtime.device)
        state = np.random.SeedSequence([self.run.seed, self.epoch, step]).generate_state(1)[0]
        generator = torch.Generator(device=runtime.device).manual_seed(int(state))
        with runtime.train_autocast():
            value = joint_loss(
                model.encoder,
                self.run.projector,
                batch.features,
                batch.mask,
                objective=config.objective,
                temperature=config.temperature,
                replace_p=config.replace_p,
                generator=generator,
                grades=grades,
            )
        self.total, self.steps = self.total + float(value.detach()), self.steps + 1
        return self.weight * value

    def mean(self) -> float:
        """The epoch's mean self-supervised loss (unweighted)."""
        return self.total / max(self.steps, 1)
