"""Rank-pretext: rank every QG by random monotone combinations of its own features.

With few labels, finetuning only has to pick the right combination of what the encoder already
ranks by. Once per run (seeded by the run's seed) `draw_tasks` draws ``pretext.n_tasks``
(default 32) sparse monotone combinations of the standardized features: each picks
``pretext.n_active`` (default 3) features uniformly, with Dirichlet(1) weights (positive,
summing to 1) and random signs. With ``pretext.single_features`` (default true) every feature
adds a task of its own: its order alone. A task's value of an item is ``z @ w_t``, ``z`` the item
standardized with the pretraining set's mean and standard deviation per feature
(`set_training_items`; an objective used on its own reads the raw features). The tasks and
the statistics are buffers, so a run resumed from ``checkpoint.pt`` ranks by the same ones.

A linear head gives one score per task from the item's embedding, trained with the project's
LambdaRank (`losses.lambdarank`, sigma 1, no cutoff) on every task and QG. LambdaRank
weighs pairs by the change of NDCG, which needs graded relevance: a task's values become the
grades 0..4 of their quantiles within the QG (`qg_bins.qg_quantile_bins` with 5 bins, the 0..4
scale of MSLR's and Yahoo's labels; equal values share a grade). LambdaRank rather than a
listwise loss on the raw values (ListNet) because its weights put the pretext's gradient where
finetuning's default loss, the same LambdaRank, puts it: on the order near the top; the price
is that the items of one grade are not ordered among themselves. The loss is LambdaRank's mean
over the (task, QG) pairs that hold two grades:

    loss = mean_{t, q: grades of t in q differ} lambdarank(head(h(x~_q))_t, grades_t(x_q))

The encoder's input may be corrupted: each entry replaced with probability ``augment.replace_p``
(default 0, off) by the same feature of a uniformly drawn item of its own QG
(`augmentations.qg_corruption`), so that no task is read off one clean feature; the targets
come from the clean items. The pairwise terms cost ``O(T L^2)`` per QG of ``L`` items for
``T`` tasks (``n_tasks`` + the feature count); QGs are grouped by length into buckets of
widths a power of 2 apart, each padded only to its own longest QG, and LambdaRank runs on
chunks of bounded size (`rank_pretext_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from scarce_ltr.core.seeding import derive_seed
from scarce_ltr.losses.lambdarank import lambdarank_loss
from scarce_ltr.pretrain.augmentations import group_index, qg_corrupt
from scarce_ltr.pretrain.objectives.base import (
    Objective,
    ObjectiveOptions,
    check_probability,
    option,
)
from scarce_ltr.pretrain.objectives.qg_bins import qg_quantile_bins

N_GRADES = 5  # a task's values graded 0..4 within each QG, as MSLR's and Yahoo's labels
_TASK_STREAM = 60  # derive_seed(seed, stream): the task draw, apart from training's draws
_PAIR_BUDGET = 2**22  # pair slots per LambdaRank call: a chunk's [rows, E, E] tensors


def draw_tasks(
    n_features: int,
    *,
    n_tasks: int,
    n_active: int,
    single_features: bool,
    generator: torch.Generator,
) -> torch.Tensor:
    """``[n_features, T]`` weights of the tasks: ``n_tasks`` columns with ``n_active`` nonzero
    entries each (Dirichlet(1) magnitudes, random signs), then, with ``single_features``, the
    identity (one task per feature, ``T = n_tasks + n_features``)."""
    if not 1 <= n_active <= n_features:
        raise ValueError(
            f"pretext.n_active must be in [1, {n_features}] (the feature count), got {n_active}"
        )
    weights = torch.zeros(n_features, n_tasks)
    if n_tasks:
        chosen = torch.rand(n_tasks, n_features, generator=generator).argsort(dim=1)[:, :n_active]
        # Dirichlet(1, ..., 1): normalised Exponential(1) draws; 1 - U in (0, 1] keeps log finite.
        spread = -torch.log1p(-torch.rand(n_tasks, n_active, generator=generator))
        sign = torch.where(torch.rand(n_tasks, n_active, generator=generator) < 0.5, -1.0, 1.0)
        magnitude = spread / spread.sum(dim=1, keepdim=True)
        weights.T.scatter_(1, chosen, sign * magnitude)
    if single_features:
        weights = torch.cat([weights, torch.eye(n_features)], dim=1)
    return weights


def rank_pretext_loss(
    scores: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    sigma: float = 1.0,
    pair_budget: int = _PAIR_BUDGET,
) -> torch.Tensor:
    """LambdaRank of ``scores`` against the in-QG grades of ``values`` (both ``[N, T]``, real
    items in the row-major order of ``mask [B, L]``), the mean over (task, QG) pairs holding two
    grades; 0 when there is none. Example: one QG of two items, one task, values ``[1, 0]``
    (grades ``[2, 0]``), equal scores: the pair's logistic loss ``log 2`` times its
    |delta NDCG| ``1 - 1 / log2(3)``, ``0.256``.

    The (task, QG) rows go through `lambdarank_loss` a chunk of at most ``pair_budget`` pair
    slots at a time, each chunk's value and gradient computed at once and its ``[rows, E, E]``
    tensors freed before the next (`_ChunkedLambdaRank`): memory stays a chunk's, not the
    ``T sum_q L_q^2`` pairs of the whole batch kept for backward (gigabytes at a GPU's budget
    of 200000 items, with QGs of a thousand items and over a hundred tasks)."""
    if scores.shape != values.shape or scores.ndim != 2 or scores.shape[0] != int(mask.sum()):
        raise ValueError("scores and values must be [N, T] with N the real items of mask")
    with_grad = torch.is_grad_enabled() and scores.requires_grad
    return _ChunkedLambdaRank.apply(scores, values, mask, sigma, pair_budget, with_grad)


class _ChunkedLambdaRank(torch.autograd.Function):
    """`rank_pretext_loss`: forward computes the value and, chunk by chunk, its gradient in
    ``scores`` (autograd through `lambdarank_loss` on a detached chunk); backward scales the
    gradient it kept (``[N, T]``)."""

    @staticmethod
    def forward(ctx, scores, values, mask, sigma, pair_budget, with_grad):
        grad = torch.zeros(scores.shape, dtype=torch.float32, device=scores.device)
        total, count = torch.zeros((), device=scores.device), 0
        for slots, task, grades, real in _task_rows(values, mask, pair_budget):
            chunk = scores[slots, task[:, None]].float().detach()  # [c, E]
            with torch.enable_grad():
                chunk.requires_grad_(with_grad)
                # every row holds a pair: LambdaRank's mean times the rows is their sum
                part = lambdarank_loss(chunk, grades, mask=real, sigma=sigma) * len(task)
            if with_grad:
                (g,) = torch.autograd.grad(part, chunk)
                where = (slots[real], task[:, None].expand_as(slots)[real])
                grad.index_put_(where, g[real], accumulate=True)
            total, count = total + part.detach(), count + len(task)
        ctx.save_for_backward(grad / max(count, 1))
        ctx.dtype = scores.dtype
        return total / max(count, 1)

    @staticmethod
    def backward(ctx, out):
        (grad,) = ctx.saved_tensors
        return (out * grad).to(ctx.dtype), None, None, None, None, None


@torch.no_grad()
def _task_rows(values: torch.Tensor, mask: torch.Tensor, pair_budget: int):
    """Chunks ``(slots [c, E], task [c], grades [c, E], real [c, E])`` of the (task, QG) rows
    whose grades differ (LambdaRank's QGs with a pair): ``slots`` the rows of ``values`` of the
    QG's items (0 at padding), per bucket of QGs of similar length (`_length_buckets`), at most
    ``pair_budget`` pair slots ``c E^2`` a chunk."""
    item = (torch.cumsum(mask.flatten(), 0) - 1).view(mask.shape)  # row of each slot
    for rows, width in _length_buckets(mask):
        slots, real = item[rows, :width].clamp(min=0), mask[rows, :width]  # [b, E]
        grades, _ = qg_quantile_bins(values[slots], real, n_bins=N_GRADES)  # [b, E, T]
        top = torch.where(real[..., None], grades, -1).amax(dim=1)  # [b, T]
        bottom = torch.where(real[..., None], grades, N_GRADES).amin(dim=1)
        qg, task = torch.nonzero(top > bottom, as_tuple=True)  # the rows with a pair
        grades = grades[qg, :, task].float()  # [r, E]
        step = max(1, pair_budget // (width * width))
        for lo in range(0, len(qg), step):
            part = slice(lo, lo + step)
            yield slots[qg[part]], task[part], grades[part], real[qg[part]]


def _length_buckets(mask: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
    """``(rows, width)`` per bucket of the QGs with two items or more: QGs whose last real slot
    ``e`` has the same ``ceil(log2 e)``, cut to the bucket's largest ``e``."""
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    extent = (mask * positions).amax(dim=1)
    ok = mask.sum(dim=1) >= 2
    bucket = torch.ceil(torch.log2(extent.clamp(min=1).float())).long()
    out = []
    for k in torch.unique(bucket[ok]).tolist():
        rows = torch.nonzero((bucket == k) & ok).squeeze(1)
        out.append((rows, int(extent[rows].max())))
    return out


@dataclass(frozen=True)
class RankTaskOptions(ObjectiveOptions):
    """The rank-pretext tasks' keys: how many combinations, of how many features, and whether
    each feature is a task of its own (rank-pretext's and simclr-pretext's)."""

    n_tasks: int = option("pretext.n_tasks")
    n_active: int = option("pretext.n_active")
    single_features: bool = option("pretext.single_features")

    def check(self) -> None:
        super().check()
        if self.n_tasks < 0:
            raise ValueError(f"pretext.n_tasks must be >= 0, got {self.n_tasks}")
        if self.n_tasks == 0 and not self.single_features:
            raise ValueError(
                "pretext.n_tasks must be >= 1 when pretext.single_features is false (no task)"
            )
        if self.n_active < 1:
            raise ValueError(f"pretext.n_active must be >= 1, got {self.n_active}")


@dataclass(frozen=True)
class RankPretextOptions(RankTaskOptions):
    """Rank-pretext's keys: its tasks', and the share of entries replaced by a same-QG
    donor's."""

    replace_p: float = option("augment.replace_p")

    def check(self) -> None:
        super().check()
        check_probability("augment.replace_p", self.replace_p, closed=True)


class RankTasks(Objective):
    """What an objective with the rank-pretext tasks holds: the tasks' weights and the
    standardization's statistics (buffers: a resumed run ranks by the same ones) and a linear
    head of one score per task (``head``); `rank_loss` is the tasks' LambdaRank. An objective
    calls `init_tasks` once its encoder is set."""

    needs_training_items = True  # the per-feature standardization of the task values
    seeded = True

    def init_tasks(
        self, n_features: int, *, n_tasks: int, n_active: int, single_features: bool, seed: int
    ) -> None:
        # the checks of the options `build` passes, for a direct call of the constructor too
        RankTaskOptions(n_tasks=n_tasks, n_active=n_active, single_features=single_features)
        gen = torch.Generator().manual_seed(derive_seed(seed, _TASK_STREAM))
        tasks = draw_tasks(
            n_features,
            n_tasks=n_tasks,
            n_active=n_active,
            single_features=single_features,
            generator=gen,
        )
        self.register_buffer("task_weights", tasks)  # [d, T]
        self.register_buffer("feature_mean", torch.zeros(n_features))
        self.register_buffer("feature_scale", torch.ones(n_features))
        self.head = nn.Linear(self.width, tasks.shape[1])

    @classmethod
    def build(
        cls, encoder: nn.Module, options: ObjectiveOptions, *, n_features: int, seed: int = 0
    ) -> RankTasks:
        """Its constructor with the options, the feature count and the run's seed (the
        tasks' draw)."""
        return cls(encoder=encoder, n_features=n_features, seed=seed, **options.arguments())

    @property
    def n_tasks(self) -> int:
        return int(self.task_weights.shape[1])

    def set_training_items(self, items: torch.Tensor) -> None:
        """The per-feature mean and standard deviation of ``items [M, d]`` (the pretraining
        set) that standardize the task values (a constant feature keeps scale 1)."""
        super().set_training_items(items)
        items = items.float()
        std = items.std(dim=0) if items.shape[0] > 1 else torch.zeros_like(items[0])
        self.feature_mean.copy_(items.mean(dim=0))
        self.feature_scale.copy_(torch.where(std > 0, std, 1.0))

    @torch.no_grad()
    def task_values(self, items: torch.Tensor) -> torch.Tensor:
        """``[N, T]`` value of each task for ``items [N, d]``, in float32."""
        with torch.autocast(device_type=items.device.type, enabled=False):
            standardized = (items.float() - self.feature_mean) / self.feature_scale
            return standardized @ self.task_weights

    def rank_loss(
        self, embeddings: torch.Tensor, items: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """The tasks' LambdaRank (`rank_pretext_loss`) of the head's scores of ``embeddings``
        ``[N, D]`` (the real items of ``mask``, from any input) against the values of the clean
        ``items [N, d]``."""
        return rank_pretext_loss(self.head(embeddings), self.task_values(items), mask)


class RankPretext(RankTasks):
    options = RankPretextOptions

    def __init__(
        self,
        *,
        encoder: nn.Module,
        n_features: int,
        n_tasks: int = 32,
        n_active: int = 3,
        single_features: bool = True,
        replace_p: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__(encoder=encoder)
        self.init_tasks(
            n_features,
            n_tasks=n_tasks,
            n_active=n_active,
            single_features=single_features,
            seed=seed,
        )
        check_probability("augment.replace_p", replace_p, closed=True)  # RankPretextOptions'
        self.replace_p = replace_p

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        x, view_mask = self.inputs(features, mask)
        clean = x if view_mask is None else features[mask]  # the real items, gathered once
        if self.replace_p > 0:
            x = qg_corrupt(
                x, view_mask, p=self.replace_p, generator=generator, groups=group_index(mask)
            )
        return self.rank_loss(self.encode(x, mask), clean, mask)
