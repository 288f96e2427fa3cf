"""SSL Val (paper Table 5): the checkpoint of pretraining that finetuning loads, chosen without a
label.

The paper pretrains on the train QGs and keeps the validation QGs apart as "SSL Val". After every
epoch, `SslVal.loss` is the objective's own loss on the vali QGs' features (labels zeroed before
the objective sees them), in eval mode, with augmentations drawn from generators fixed per batch
(the same views every epoch, so the curve moves with the weights only). The epoch of the lowest
loss (the first on ties) is the one ``encoder.pt`` keeps (`Choice`); ``ssl_val=none`` keeps the
last epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.seeding import derive_seed, generator
from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.pretrain.objectives.base import Objective
from scarce_ltr.pretrain.pretraining_set import fake_group_split

# The generators of SSL Val's augmentations: a stream of their own, never training's.
_STREAM = 11
_FAKE_GROUPS_EPOCH = 2**31 - 1  # SimCLR-Sample's SSL-Val fake QGs: no training epoch's


def ssl_val_split(prepared: PreparedData, *, method: str) -> RankingSplit:
    """The vali QGs' features with every label 0; `UserError` when there is no vali QG."""
    vali = prepared.vali
    if vali.n_groups == 0 or vali.n_items == 0:
        raise UserError(
            f"pretrain {method}: ssl_val=loss chooses the checkpoint on the validation QGs (SSL "
            "Val, paper Table 5), but the vali split is empty; give vali QGs (data.splits.vali) "
            "or ssl_val=none to keep the last epoch"
        )
    zeros = np.zeros(vali.n_items, dtype=np.float32)
    return RankingSplit(vali.features, zeros, vali.offsets, vali.qids, "ssl-val")


class SslVal:
    """The objective's loss on SSL Val, the same batches and augmentations every epoch."""

    def __init__(
        self,
        split: RankingSplit,
        *,
        item_budget: int,
        max_list_len: int | None,
        seed: int,
        fake_groups: bool,
    ) -> None:
        if fake_groups:  # SimCLR-Sample: fake QGs, one fixed permutation
            split = fake_group_split(split, seed=seed, epoch=_FAKE_GROUPS_EPOCH)
        self.batcher = QueryGroupBatcher(
            split, item_budget=item_budget, shuffle=False, seed=seed, max_list_len=max_list_len
        )
        self.batcher.set_epoch(0)  # a truncated long QG keeps the same items every epoch
        self.seed = seed
        self.n_groups, self.n_items = split.n_groups, split.n_items

    @torch.no_grad()
    def loss(self, objective: Objective, *, device: torch.device) -> float:
        """The item-weighted mean loss over SSL Val's batches; the objective is left in eval
        mode (training puts it back in train mode each epoch)."""
        objective.eval()
        torch.manual_seed(derive_seed(self.seed, _STREAM))  # any draw outside the generator
        total, items = 0.0, 0
        for step, batch in enumerate(self.batcher):
            n_items = int(batch.mask.sum())
            if n_items < 2:  # the same rule as training: no statistics from one item
                continue
            features = batch.features.to(device, non_blocking=True)
            mask = batch.mask.to(device, non_blocking=True)
            # fp32 on every device, as all scoring (`Runtime.train_autocast`)
            value = objective(features, mask, generator=generator(device, self.seed, _STREAM, step))
            total, items = total + float(value) * n_items, items + n_items
        return total / items if items else math.nan


@dataclass
class Choice:
    """The SSL-Val-best epoch so far and its encoder weights (on the CPU)."""

    epoch: int | None = None
    loss: float = math.inf
    state: dict | None = None

    def offer(self, epoch: int, loss: float, encoder: torch.nn.Module) -> bool:
        """Keep ``encoder``'s weights when ``loss`` is lower than every earlier epoch's."""
        if not loss < self.loss:  # NaN never wins; ties keep the earlier epoch
            return False
        self.epoch, self.loss = epoch, loss
        self.state = {k: v.detach().cpu().clone() for k, v in encoder.state_dict().items()}
        return True

    def to_state(self) -> dict:
        return {"epoch": self.epoch, "loss": self.loss, "state": self.state}

    @classmethod
    def from_state(cls, state: dict | None) -> Choice:
        if not state:
            return cls()
        return cls(epoch=state.get("epoch"), loss=float(state["loss"]), state=state.get("state"))
