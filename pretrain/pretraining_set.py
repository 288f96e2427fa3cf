"""What pretraining reads: the train QGs (and the vali QGs' features), never a label or test.

The pretraining split is train (+ vali when ``include_vali``) with every label set to 0, so no
objective can see one. SimCLR-Sample's fake QGs keep the real QG sizes (the same size
distribution) and fill them with items permuted at random, afresh each epoch from
``(seed, epoch)``; the permutation is a view, nothing is copied.
"""

from __future__ import annotations

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.data.batching import DeviceSplit, QueryGroupBatcher
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit, concatenate
from scarce_ltr.data.scarcity import draw_groups

_FAKE_GROUP_STREAM = 7
_POOL_STREAM = 11


def pretraining_split(
    prepared: PreparedData, *, include_vali: bool, pool_fraction: float = 1.0, seed: int = 0
) -> RankingSplit:
    """Train (+ vali) features as one split, labels all 0; of the train QGs only a seeded share
    ``pool_fraction`` (drawn as labeled QGs are, `draw_groups`: at least one, nested across
    pool fractions; in their order)."""
    train = prepared.train
    if pool_fraction < 1:
        pool = draw_groups(train.n_groups, pool_fraction, seed=seed, stream=_POOL_STREAM)
        train = train.subset(np.flatnonzero(pool))
    parts = [train, prepared.vali] if include_vali else [train]
    split = concatenate(parts, "pretrain") if len(parts) > 1 else parts[0]
    return RankingSplit(
        split.features,
        np.zeros(split.n_items, dtype=np.float32),
        split.offsets,
        split.qids,
        "pretrain",
    )


class _PermutedRows:
    """Rows of ``base`` read through ``index``: ``view[rows] == base[index[rows]]``."""

    def __init__(self, base: np.ndarray, index: np.ndarray) -> None:
        self.base, self.index = base, index
        self.shape, self.ndim, self.dtype = base.shape, base.ndim, base.dtype

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return self.base[self.index[rows]]

    def __len__(self) -> int:
        return self.shape[0]


def fake_group_split(split: RankingSplit, *, seed: int, epoch: int) -> RankingSplit:
    """Fake QGs for SimCLR-Sample: the real QG sizes, filled with randomly permuted items."""
    order = np.random.default_rng([seed, epoch, _FAKE_GROUP_STREAM]).permutation(split.n_items)
    return RankingSplit(
        _PermutedRows(split.features, order),  # type: ignore[arg-type]
        split.labels,
        split.offsets,
        split.qids,
        "pretrain (fake QGs)",
    )


def make_batcher(
    split: RankingSplit,
    *,
    item_budget: int,
    max_list_len: int | None,
    seed: int,
    rank: int,
    world_size: int,
    length_buckets: bool = False,
    on_device: DeviceSplit | None = None,
) -> QueryGroupBatcher:
    """Shuffled batches of whole QGs of ``split``, this rank's share (gathered on the device
    that holds ``on_device``, a copy of ``split``, when given)."""
    return QueryGroupBatcher(
        split,
        item_budget=item_budget,
        shuffle=True,
        seed=seed,
        max_list_len=max_list_len,
        rank=rank,
        world_size=world_size,
        length_buckets=length_buckets,
        on_device=on_device,
    )


def check_pretraining_set(
    split: RankingSplit,
    batcher: QueryGroupBatcher,
    *,
    method: str,
    needs_groups: bool,
    world_size: int,
) -> None:
    """Stop with a message when the data cannot make a single useful batch per rank."""
    where = f"the pretraining set ({split.n_groups} QGs, {split.n_items} items)"
    if split.n_items < 2:
        raise UserError(f"{where} is too small: {method} needs at least 2 items")
    if len(batcher) == 0:
        raise UserError(
            f"{where} is too small for the batch: it makes fewer batches of "
            f"item_budget={batcher.item_budget} items than the {world_size} DDP ranks; "
            "lower item_budget or use fewer processes"
        )
    if needs_groups and not np.any(split.group_sizes >= 2):
        raise UserError(
            f"{where}: every QG holds a single item, so {method} has no negatives to contrast; "
            "use simclr-sample, simclr or simsiam"
        )
