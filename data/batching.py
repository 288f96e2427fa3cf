"""Batches of whole query groups, padded, sized by an item budget.

A batch holds ``B`` QGs padded to the longest one, ``L`` items:
features ``[B, L, d]`` float32, labels ``[B, L]`` float32, mask ``[B, L]`` bool (True for real
items) and the QGs' indices ``[B]`` in the split. QGs are packed in order (shuffled per epoch from
the seed when asked) until the next one would push the batch past ``item_budget`` real items; a QG
longer than the budget gets a batch of its own. Long lists may be truncated to ``max_list_len``
items (a seeded random subset when shuffling, the first items otherwise). Rows are gathered
straight from the (memory-mapped) split, so data larger than memory streams from disk.

``length_buckets``: padding to the longest QG costs memory, copying and transfer in proportion to
``B * L``, not to the real items; with QG sizes as skewed as MSLR's, a 200,000-item batch is 10x
padding. With buckets, the (shuffled) QG order is cut into chunks of ``_BUCKET_BATCHES`` batches'
worth of items, each chunk sorted by QG size, packed, and the batches shuffled again: batches of
similar-size QGs, about 1.2x padding, still a different mix every epoch.

``on_device``: a split held on a GPU (`DeviceSplit`, copied there once) is gathered there, batch
by batch: only each batch's row indices cross from the host, not its padded features. At a GPU's
200,000-item batches, host-side collation and copies otherwise take most of an epoch
(benchmarks/LOG.md, "The CUDA path"). The batches are the same, value for value.

Under DDP each rank takes every ``world_size``-th batch, and all ranks stop at the same count.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from scarce_ltr.data.ranking_split import RankingSplit

_BUCKET_BATCHES = 64  # length_buckets: QGs are sorted by size within chunks of this many batches


@dataclass(frozen=True)
class Batch:
    features: torch.Tensor  # [B, L, d] float32
    labels: torch.Tensor  # [B, L] float32 (0 at padding)
    mask: torch.Tensor  # [B, L] bool
    groups: torch.Tensor  # [B] int64, QG indices in the split

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device, non_blocking=True) for t in self.tensors()))

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.features, self.labels, self.mask, self.groups


@dataclass(frozen=True)
class DeviceSplit:
    """A split's features and labels held on a device, for `QueryGroupBatcher` to gather from."""

    features: torch.Tensor  # [n_items, d] float32
    labels: torch.Tensor  # [n_items] float32

    @classmethod
    def of(cls, split: RankingSplit, device: torch.device) -> DeviceSplit:
        return cls(
            torch.from_numpy(np.ascontiguousarray(split.features, dtype=np.float32)).to(device),
            torch.from_numpy(np.ascontiguousarray(split.labels, dtype=np.float32)).to(device),
        )

    @staticmethod
    def nbytes(split: RankingSplit) -> int:
        return split.n_items * (split.n_features + 1) * 4


class QueryGroupBatcher:
    """Iterates over padded batches of whole QGs of `split`.

    Args:
        split: the data.
        item_budget: most real items per batch (a longer QG alone still forms a batch).
        groups: indices of the QGs to use (default: all non-empty ones).
        shuffle: shuffle QG order every epoch (seeded by ``seed`` and the epoch).
        max_list_len: truncate longer QGs to this many items.
        rank, world_size: this process's share under DDP.
        length_buckets: batch QGs of similar size together (see the module docstring).
        on_device: ``split`` held on a device: batches are gathered there (same values).
    """

    def __init__(
        self,
        split: RankingSplit,
        *,
        item_budget: int,
        groups: np.ndarray | None = None,
        shuffle: bool = False,
        seed: int = 0,
        max_list_len: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        length_buckets: bool = False,
        on_device: DeviceSplit | None = None,
    ) -> None:
        if item_budget < 1:
            raise ValueError(f"item_budget must be >= 1, got {item_budget}")
        if max_list_len is not None and max_list_len < 1:
            raise ValueError(f"max_list_len must be >= 1, got {max_list_len}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.split = split
        self.item_budget = item_budget
        all_groups = np.arange(split.n_groups) if groups is None else np.asarray(groups)
        self.groups = all_groups[split.group_sizes[all_groups] > 0].astype(np.int64)
        self.shuffle = shuffle
        self.seed = seed
        self.max_list_len = max_list_len
        self.rank = rank
        self.world_size = world_size
        self.length_buckets = length_buckets
        self.on_device = on_device
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def plan(self) -> list[np.ndarray]:
        """The QG indices of every batch of this epoch, before sharding."""
        return self._plan()

    def _plan(self) -> list[np.ndarray]:
        """The QG indices of every batch of this epoch, before sharding."""
        order = self.groups
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.shuffle:
            order = order[rng.permutation(len(order))]
        sizes = self.split.group_sizes[order]
        if self.max_list_len is not None:
            sizes = np.minimum(sizes, self.max_list_len)
        if self.length_buckets:
            chunk = (np.cumsum(sizes) - sizes) // (self.item_budget * _BUCKET_BATCHES)
            by_size = np.lexsort((sizes, chunk))  # chunk by chunk, by size within (stable)
            order, sizes = order[by_size], sizes[by_size]
        batches = self._pack(order, sizes)
        if self.length_buckets and self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def _pack(self, order: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
        """Consecutive QGs of ``order`` into batches of at most ``item_budget`` items."""
        batches, start, filled = [], 0, 0
        for i, size in enumerate(sizes.tolist()):
            if filled and filled + size > self.item_budget:
                batches.append(order[start:i])
                start, filled = i, 0
            filled += size
        if start < len(order):
            batches.append(order[start:])
        return batches

    def __len__(self) -> int:
        return len(self._plan()) // self.world_size if self.world_size > 1 else len(self._plan())

    def __iter__(self) -> Iterator[Batch]:
        plan = self._plan()
        if self.world_size > 1:
            per_rank = len(plan) // self.world_size
            plan = plan[self.rank : per_rank * self.world_size : self.world_size]
        truncation_rng = np.random.default_rng([self.seed, self.epoch, 1])
        for batch_groups in plan:
            yield self._collate(batch_groups, truncation_rng)

    def _collate(self, batch_groups: np.ndarray, rng: np.random.Generator) -> Batch:
        starts = self.split.offsets[batch_groups]
        sizes = self.split.offsets[batch_groups + 1] - starts
        kept = sizes if self.max_list_len is None else np.minimum(sizes, self.max_list_len)
        b, width = len(batch_groups), int(kept.max())
        slot = np.repeat(np.arange(b), kept)
        position = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
        if self.max_list_len is not None and np.any(kept < sizes):
            rows = np.concatenate(
                [
                    start + _pick(int(size), int(keep), rng if self.shuffle else None)
                    for start, size, keep in zip(starts, sizes, kept, strict=True)
                ]
            )
        else:
            rows = np.repeat(starts, kept) + position
        groups = torch.from_numpy(batch_groups.copy())
        if self.on_device is not None:
            return _gather(self.on_device, (b, width), slot, position, rows, groups)
        features = np.zeros((b, width, self.split.n_features), dtype=np.float32)
        labels = np.zeros((b, width), dtype=np.float32)
        mask = np.zeros((b, width), dtype=bool)
        features[slot, position] = self.split.features[rows]
        labels[slot, position] = self.split.labels[rows]
        mask[slot, position] = True
        return Batch(
            torch.from_numpy(features), torch.from_numpy(labels), torch.from_numpy(mask), groups
        )


def _gather(held: DeviceSplit, shape, slot, position, rows, groups: torch.Tensor) -> Batch:
    """`QueryGroupBatcher._collate`'s batch, padded on the device from the items ``held`` there."""
    device = held.features.device
    slot, position, rows = (torch.from_numpy(a).to(device) for a in (slot, position, rows))
    features = held.features.new_zeros((*shape, held.features.shape[1]))
    labels = held.labels.new_zeros(shape)
    mask = torch.zeros(shape, dtype=torch.bool, device=device)
    features[slot, position] = held.features[rows]
    labels[slot, position] = held.labels[rows]
    mask[slot, position] = True
    return Batch(features, labels, mask, groups.to(device))


def _pick(size: int, keep: int, rng: np.random.Generator | None) -> np.ndarray:
    """Offsets of the items kept from a QG of `size` items: a sorted random subset, or the first."""
    if keep >= size:
        return np.arange(size)
    if rng is None:
        return np.arange(keep)
    return np.sort(rng.choice(size, size=keep, replace=False))
