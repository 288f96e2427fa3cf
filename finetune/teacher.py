"""A deep ranker taught by a finished run on the unlabeled train QGs (``teacher=<run dir>``).

The unlabeled train QGs join training beside the labeled ones, with targets from the teacher's
saved scores on them (`data.teachers`): ``teaching.targets=soft`` keeps the scores, z-scored
within each QG (so a tree's raw scores, a network's and an ensemble's rank-normalised ones teach
alike), and learns them with `distillation_loss` at ``teaching.temperature``;
``teaching.targets=buckets`` bins them into relevance levels (`data.teachers.pseudo_labels`,
global bins as gbdt-pseudo does; as many levels as the labeled QGs' grades unless
``teaching.levels``) and learns them with the run's own loss. Each batch's loss is the labeled
QGs' loss plus ``teaching.weight`` times the taught QGs' loss. The labeled QGs never see the
teacher, and epochs and checkpoints are still chosen on the labeled vali QGs.

``teaching.noise > 0`` adds Gaussian noise to the taught QGs' features where the student scores
them (the targets stay the clean items'). ``teacher=self`` is consistency regularisation: no run
teaches, and the targets of each batch's taught QGs are the student's own scores on their clean
features, computed without gradient just before the step (the Pi-model, listwise), learned by
the noised view with `distillation_loss`; the default noise is ``data.teachers.SELF_NOISE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from scarce_ltr.core.runs import run_model
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit, rows_of_groups
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.data.teachers import (
    SELF_TEACHER,
    TeachingConfig,
    no_teacher,
    pseudo_labels,
    self_taught,
    teacher_train_scores,
    with_pseudo_labels,
)
from scarce_ltr.losses.distillation import distillation_loss
from scarce_ltr.pretrain.augmentations import gaussian_noise


@dataclass(frozen=True)
class Teaching:
    """What `finetune.loop.fit` trains on with a teacher."""

    split: RankingSplit  # prepared.train: true labels on labeled QGs, targets on the others
    groups: np.ndarray  # [n] train QGs trained on: the labeled ones with a relevant item, taught
    taught: np.ndarray  # [n_train_groups] bool: the unlabeled QGs, with teacher targets
    config: TeachingConfig
    summary: dict  # the report's ``teacher`` entry
    by_itself: bool = False  # teacher=self: the targets are the student's clean-view scores

    @property
    def noise(self) -> float:
        """The std of the noise on the taught QGs' features the student scores."""
        return self.config.student_noise(self_taught=self.by_itself)

    def student_view(
        self,
        model: torch.nn.Module,
        features: torch.Tensor,
        labels: torch.Tensor,
        *,
        mask: torch.Tensor,
        groups: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(features, labels)`` of a batch ``[B, L, F]`` as the student trains on them: the
        taught rows' features noised (with ``noise > 0``) and, with ``teacher=self``, their
        targets the model's scores on the clean features, without gradient."""
        taught = self.taught_rows(groups, features.device)
        if not taught.any():
            return features, labels
        if self.by_itself:
            # in the mode the step trains in, as the Pi-model: dropout on, and BatchNorm (while
            # the encoder trains) on this sub-batch's statistics, its running means updated once
            # more per step
            with torch.no_grad():
                own = model(features[taught], mask[taught]).float()
            labels = labels.clone()
            labels[taught] = own.to(labels.dtype)
        if self.noise > 0:
            noised = gaussian_noise(features, mask, scale=self.noise, generator=generator)
            features = torch.where(taught[:, None, None], noised, features)
        return features, labels

    def taught_rows(self, groups: torch.Tensor, device: torch.device) -> torch.Tensor:
        """``[B]`` bool: the batch rows that are taught QGs."""
        return torch.from_numpy(self.taught[groups.cpu().numpy()]).to(device)

    def loss(self, loss_fn, scores, labels, *, mask, groups: torch.Tensor) -> torch.Tensor:
        """The labeled QGs' ``loss_fn`` plus ``weight`` x the taught QGs' loss, of one batch
        ``[B, L]`` whose rows are the train QGs ``groups`` ``[B]``."""
        taught = self.taught_rows(groups, scores.device)
        total = scores.new_zeros(())
        if (~taught).any():
            total = total + loss_fn(scores[~taught], labels[~taught], mask=mask[~taught])
        if taught.any():
            s, t, m = scores[taught], labels[taught], mask[taught]
            if self.config.targets == "soft":
                part = distillation_loss(s, t, mask=m, temperature=self.config.temperature)
            else:
                part = loss_fn(s, t, mask=m)
            total = total + self.config.weight * part
        return total


def teaching_for(cfg: CommonConfig, prepared: PreparedData) -> Teaching | None:
    """``cfg.teacher``'s targets on ``prepared``'s unlabeled train QGs; None without a teacher
    or without an unlabeled train QG (then the run is the same as without a teacher)."""
    teacher = getattr(cfg, "teacher", None)
    if no_teacher(teacher):
        return None
    assert teacher is not None
    config: TeachingConfig = cfg.teaching  # type: ignore[attr-defined]
    by_itself = self_taught(teacher)  # its keys were checked with the run's config
    # a run teacher is checked even where nothing is left to teach
    scores = None if by_itself else teacher_train_scores(teacher, cfg, prepared)
    labels, train = prepared.labels, prepared.train
    unlabeled = np.flatnonzero(~labels.train_labeled & (train.group_sizes > 0))
    if not len(unlabeled):
        return None
    rows = rows_of_groups(train.offsets, np.flatnonzero(~labels.train_labeled))
    summary = {
        "run": SELF_TEACHER if by_itself else str(Path(teacher).resolve()),
        "model": SELF_TEACHER if by_itself else run_model(teacher) or Path(teacher).name,
        "targets": config.targets,
        "weight": config.weight,
        "n_groups": len(unlabeled),
        "noise": config.student_noise(self_taught=by_itself),
    }
    if by_itself:  # targets come from the model in each batch; these zeros are never read
        targets = np.zeros(len(rows), dtype=np.float32)
        summary["temperature"] = config.temperature
    elif config.targets == "soft":
        targets = _zscore_within_groups(scores, train.offsets)[rows].astype(np.float32)
        summary["temperature"] = config.temperature
    else:
        levels = config.levels or grade_levels(prepared)
        targets = pseudo_labels(scores[rows], levels=levels)
        summary["levels"] = levels
    taught = ~labels.train_labeled
    groups = np.union1d(labels.trained_groups(), unlabeled)
    split = with_pseudo_labels(train, labels.train_labeled, targets)
    return Teaching(
        split=split,
        groups=groups,
        taught=taught,
        config=config,
        summary=summary,
        by_itself=by_itself,
    )


def grade_levels(prepared: PreparedData) -> int:
    """Relevance levels the labeled train QGs use (highest grade + 1, at least 2)."""
    labeled = prepared.labels.labeled_train()
    top = float(np.max(labeled.labels)) if labeled.n_items else 1.0
    return max(int(np.ceil(top)) + 1, 2)


def _zscore_within_groups(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``[n_items]`` scores minus their QG's mean over their QG's std (0 where it is 0)."""
    sizes = np.diff(offsets)
    group = np.repeat(np.arange(len(sizes)), sizes)
    count = np.maximum(sizes, 1)
    mean = np.bincount(group, weights=scores, minlength=len(sizes)) / count
    centred = scores - mean[group]
    std = np.sqrt(np.bincount(group, weights=centred**2, minlength=len(sizes)) / count)
    safe = np.where(std > 0, std, 1.0)
    return np.where(std[group] > 0, centred / safe[group], 0.0)
