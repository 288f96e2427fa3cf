"""One epoch's training steps of a deep ranker (`finetune.loop`'s batch and step functions).

`train_epoch` is one pass over shuffled QG batches: each step's ranking loss (`_ranking_loss`:
the teacher's term, DASALC's input noise, TabM's members as rows by `member_rows`), the weights'
penalty and the joint self-supervised term, then one optimizer step. `lr_schedule` sets the
learning rate of a phase's step from the share of the phase done; `noise_generator` seeds an
epoch's input noise so a resumed run draws what an uninterrupted one would have drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.device import Runtime
from scarce_ltr.core.optim import set_learning_rate
from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.finetune.config import Phase
from scarce_ltr.finetune.joint import JointEpoch
from scarce_ltr.pretrain.augmentations import gaussian_noise

if TYPE_CHECKING:
    from scarce_ltr.finetune.teacher import Teaching

LossFn = Callable[..., torch.Tensor]


def train_epoch(
    model: nn.Module,
    batches: QueryGroupBatcher,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    *,
    runtime: Runtime,
    noise_std: float = 0.0,
    generator: torch.Generator | None = None,
    schedule: Callable[[float], None] | None = None,
    teaching: Teaching | None = None,
    penalty: Callable[[], torch.Tensor] | None = None,
    encoded: Callable[[torch.Tensor], torch.Tensor] | None = None,
    joint: JointEpoch | None = None,
) -> float:
    """One pass over the batches; the mean batch loss. ``schedule`` (when given) is called
    before each step with the share of the epoch done, to set the learning rate. ``teaching``:
    the batches hold taught QGs too, whose loss `Teaching.loss` adds, on the view and targets
    `Teaching.student_view` gives them. ``penalty``: a term of the weights alone
    (`finetune.l2sp.L2SP`) added to each step's loss; the mean returned is the ranking loss's,
    without it.

    ``encoded``: the frozen encoder's kept outputs of a batch's QGs (`FrozenTrainItems.lookup`;
    only without noise or teaching): the head runs on them, as `Ranker.forward` would.

    ``noise_std > 0``: DASALC's augmentation, ``N(0, noise_std^2)`` drawn from ``generator``
    and added to every feature of every real item of each training batch.

    ``joint``: `finetune.joint`'s term, ``weight`` x a self-supervised loss of every QG of the
    batch, added to each step's loss; without a teacher the ranking loss then sees the labeled
    QGs' rows alone, and the mean returned is over the batches that hold one.
    """
    if (noise_std > 0 or (teaching is not None and teaching.noise > 0)) and generator is None:
        raise ValueError("noise_std > 0 or teaching noise needs a generator (the noise is seeded)")
    if encoded is not None and (noise_std > 0 or teaching is not None or joint is not None):
        raise ValueError(
            "kept encoder outputs stand in for clean inputs only (no noise, no teaching)"
        )
    model.train()
    total, count = 0.0, 0
    n_steps = max(len(batches), 1)
    for step, batch in enumerate(batches):
        if schedule is not None:
            schedule(step / n_steps)
        b = batch.to(runtime.device)
        features, labels, mask = b.features, b.labels, b.mask
        if joint is not None and teaching is None:  # the unlabeled QGs' rows: joint term only
            ranked = joint.labeled_rows(b.groups)
            features, labels, mask = features[ranked], labels[ranked], mask[ranked]
        loss = None
        if len(mask):
            loss = _ranking_loss(
                model,
                (features, labels, mask, b.groups),
                loss_fn,
                runtime=runtime,
                noise_std=noise_std,
                generator=generator,
                teaching=teaching,
                encoded=encoded,
            )
        terms = [t for t in (loss, penalty() if penalty is not None else None) if t is not None]
        if joint is not None:
            terms.append(joint.loss(model, b, step))
        optimizer.zero_grad(set_to_none=True)
        sum(terms[1:], terms[0]).backward()
        optimizer.step()
        if loss is not None:
            total, count = total + float(loss.detach()), count + 1
    return total / max(count, 1)


def _ranking_loss(
    model: nn.Module,
    batch: tuple[torch.Tensor, ...],
    loss_fn: LossFn,
    *,
    runtime: Runtime,
    noise_std: float,
    generator: torch.Generator | None,
    teaching: Teaching | None,
    encoded: Callable[[torch.Tensor], torch.Tensor] | None,
) -> torch.Tensor:
    """One step's ranking loss of `train_epoch` (the teacher's term included) on ``batch``,
    ``(features [B, L, d], labels [B, L], mask [B, L], groups [B])``."""
    features, labels, mask, groups = batch
    if teaching is not None:  # the taught rows' view and, for teacher=self, their targets
        with runtime.train_autocast():
            features, labels = teaching.student_view(
                model, features, labels, mask=mask, groups=groups, generator=generator
            )
    if noise_std > 0:
        features = gaussian_noise(features, mask, scale=noise_std, generator=generator)
    # An ensemble (TabM's k members) trains each member on the loss: its scores [B, L, k].
    members = {"members": True} if getattr(model, "n_members", 1) > 1 else {}
    with runtime.train_autocast():
        if encoded is not None:
            scores = model.score_encoded(encoded(groups), mask, **members)
        else:
            scores = model(features, mask, **members)
    if members:
        scores, labels, mask, groups = member_rows(scores, labels, mask, groups)
    if teaching is None:
        return loss_fn(scores.float(), labels, mask=mask)
    return teaching.loss(loss_fn, scores.float(), labels, mask=mask, groups=groups)


def member_rows(scores, labels, mask, groups):
    """Member scores ``[B, L, k]`` as ``k * B`` rows, member after member, with the labels,
    mask and QG ids of each: a loss that averages over QGs then gives the mean of the k
    members' losses, TabM's training objective (each member learns as if alone)."""
    k = scores.shape[-1]
    rows = scores.permute(2, 0, 1).reshape(k * scores.shape[0], scores.shape[1])
    return rows, labels.repeat(k, 1), mask.repeat(k, 1), groups.repeat(k)


def lr_schedule(optimizer, options, phase_epoch: int, phase: Phase) -> Callable[[float], None]:
    """Sets the learning rate of a phase's step from the share of the phase done."""

    def at(epoch_share: float) -> None:
        progress = (phase_epoch + epoch_share) / max(phase.epochs, 1)
        set_learning_rate(
            optimizer,
            options.rate(phase),
            schedule=options.schedule,
            warmup=options.warmup,
            progress=progress,
        )

    return at


def noise_generator(seed: int, epoch: int, runtime: Runtime) -> torch.Generator:
    """The input noise of one epoch, seeded by (seed, epoch): a resumed run draws what an
    uninterrupted one would have drawn."""
    generator = torch.Generator(device=runtime.device)
    return generator.manual_seed(int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))
