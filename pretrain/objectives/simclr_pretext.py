"""SimCLR (eq. 2) and the rank-pretext tasks on one encoder: between-QG contrast plus in-QG orders.

Not a method of the paper (issue 60). Why the pair: on the Yandex folds the released recipe
(`simclr@released`: same-QG swap views, batch-wide negatives) pays because its encoder tells QGs
apart (87-90 % of its embeddings' variance lies between QGs) *and* sits closer to a label-trained
oracle within QGs than a random encoder; rank-pretext moves the encoder towards the oracle within
QGs (linear CKA +0.057) but separates no QGs, and pays nothing alone (docs/results.md, the
diagnostics table). The sum asks the encoder for both:

    loss = simclr(view_0, view_1) + objective.rank_weight * rank_pretext(h(x))

SimCLR's term is `simclr.SimCLR`'s on its two views (any of its view settings); the rank term is
rank-pretext's LambdaRank on the tasks of `rank_pretext.RankTasks` (``pretext.n_tasks`` sparse
monotone combinations of the standardized features and, with ``pretext.single_features``, each
feature's own order), scored by a linear head from the encoder's embedding of the *clean* items,
a third pass beside the two views: the orders finetuning will rank by are the clean items'. At
``rank_weight`` 0 the rank term is not computed and the loss is SimCLR's, draw for draw.

With ``objective.rank_dims`` r > 0 the two terms read separate parts of the embedding: the rank
head its last r entries, SimCLR's projector the others (the encoder below them is shared). Why:
on one embedding any rank term takes away the released encoder's between-QG separation (90 % of
the variance between QGs -> 39 % at weight 20) and with it the 1 % gain; a part of its own may
leave SimCLR's part as the released recipe makes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from scarce_ltr.core.config_fields import NON_NEGATIVE
from scarce_ltr.pretrain.heads import Columns, Projector
from scarce_ltr.pretrain.objectives.base import head_width, own_option
from scarce_ltr.pretrain.objectives.rank_pretext import RankTaskOptions, RankTasks
from scarce_ltr.pretrain.objectives.simclr import SimCLR, SimCLROptions


@dataclass(frozen=True)
class SimCLRPretextOptions(SimCLROptions, RankTaskOptions):
    """SimCLR's keys, the rank-pretext tasks' and the rank term's weight."""

    rank_weight: float = own_option(1.0)  # the rank-pretext loss's weight beside SimCLR's
    # the embedding's last rank_dims entries are the rank head's, the rest SimCLR's projector's;
    # 0: both read the whole embedding
    rank_dims: int = own_option(0)

    def check(self) -> None:
        super().check()
        NON_NEGATIVE.check("objective.rank_weight", self.rank_weight)
        if self.rank_dims < 0:
            raise ValueError(f"objective.rank_dims must be >= 0, got {self.rank_dims}")


class SimCLRPretext(RankTasks, SimCLR):
    options = SimCLRPretextOptions

    def __init__(
        self,
        *,
        encoder: nn.Module,
        n_features: int,
        n_tasks: int = 32,
        n_active: int = 3,
        single_features: bool = True,
        rank_weight: float = 1.0,
        rank_dims: int = 0,
        seed: int = 0,
        **simclr,
    ) -> None:
        super().__init__(encoder=encoder, **simclr)
        # the options' checks, for a direct call too (init_tasks checks the tasks')
        NON_NEGATIVE.check("objective.rank_weight", rank_weight)
        if not 0 <= rank_dims < self.width:
            raise ValueError(
                f"objective.rank_dims must be >= 0 and below the encoder's width "
                f"({self.width}), got {rank_dims}"
            )
        self.init_tasks(
            n_features,
            n_tasks=n_tasks,
            n_active=n_active,
            single_features=single_features,
            seed=seed,
        )
        if rank_dims:  # each head on its own part of the embedding
            split = self.width - rank_dims
            width = head_width(simclr.get("projector_dim"), self.width)
            self.projector = nn.Sequential(Columns(0, split), Projector(in_dim=split, dim=width))
            self.head = nn.Sequential(
                Columns(split, self.width), nn.Linear(rank_dims, self.n_tasks)
            )
        self.rank_weight = rank_weight

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        z0, z1 = self.project_two_views(features, mask, generator=generator)
        loss = self.contrast(z0, z1, mask)
        if self.rank_weight > 0:
            x, view_mask = self.inputs(features, mask)
            clean = x if view_mask is None else features[mask]  # the real items
            ranked = self.rank_loss(self.encode(x, mask), clean, mask)
            loss = loss + self.rank_weight * ranked
        return loss
