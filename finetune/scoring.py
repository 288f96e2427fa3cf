"""Scoring a deep ranker in eval mode: `predict` and the vali NDCG@5 `finetune.loop.fit` chooses
on (`selection_score`).

Scores come from the model in eval mode, one batch of whole QGs at a time, so a QG's scores never
depend on which other QGs share its batch. While a ranker's encoder is frozen, its outputs on the
vali QGs are kept between epochs (`FrozenEncoderCache`) and only the head runs again. The vali
batches themselves are collated once per training and kept (`KeptBatches`): every epoch scores
the same QGs in the same batches.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.device import Runtime
from scarce_ltr.data.batching import Batch, QueryGroupBatcher
from scarce_ltr.data.evaluation import vali_selection
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit, rows_of_groups
from scarce_ltr.pretrain.encoders import ItemwiseEncoder


class KeptBatches:
    """The padded batches `predict` scores, collated and moved to the device once, kept.

    `fit` scores the labeled vali QGs after every epoch with the same batches (no shuffling):
    collating them again each time (padding, copying the features) cost 1.5-2 % of a search
    trial. The batches are the ones `QueryGroupBatcher` gives, value for value, so the scores
    are too. Beyond ``max_bytes`` of padded features nothing is kept and they are collated
    per call, as before. A caller keeps one per set of `predict` arguments (split, groups,
    item budget, device).
    """

    def __init__(self, max_bytes: int = 512 * 2**20) -> None:
        self.max_bytes = max_bytes
        self.batches: list[tuple[np.ndarray, Batch]] | None = None
        self.too_big = False

    def get(self, batches: QueryGroupBatcher, *, runtime: Runtime):
        """``[(rows, batch on the device)]`` of ``batches``, collated now on first use; None
        when they pass the cap."""
        if self.batches is None and not self.too_big:
            kept, size = [], 0
            for batch in batches:
                size += batch.features.element_size() * batch.features.numel()
                if size > self.max_bytes:
                    self.too_big = True
                    return None
                kept.append((_rows(batches, batch), batch.to(runtime.device)))
            self.batches = kept
        return self.batches


def device_batches(batches: QueryGroupBatcher, runtime: Runtime, kept: KeptBatches | None):
    """``(rows, batch on the device)`` of each batch: ``kept``'s where it keeps them."""
    held = kept.get(batches, runtime=runtime) if kept is not None else None
    if held is not None:
        yield from held
        return
    for batch in batches:
        yield _rows(batches, batch), batch.to(runtime.device)


def _rows(batches: QueryGroupBatcher, batch: Batch) -> np.ndarray:
    """The split's rows of a batch's QGs, in mask order."""
    return rows_of_groups(batches.split.offsets, batch.groups.numpy())


class FrozenEncoderCache:
    """A frozen encoder's outputs for the batches `predict` scores, kept between epochs.

    While a `Ranker`'s encoder is frozen (the head-only epochs of ``full``, all of ``lp``) its
    outputs on the vali QGs cannot change: `predict` computes them once and then runs the head
    alone, with the same batches and the same operations, so the scores are bit-identical. The
    cache holds up to ``max_bytes`` of outputs; beyond that `predict` recomputes them. ``clear``
    it whenever the encoder may have changed (a phase that trains it).
    """

    def __init__(self, max_bytes: int = 512 * 2**20) -> None:
        self.max_bytes = max_bytes
        self.batches: list[tuple[np.ndarray, torch.Tensor, torch.Tensor]] | None = None
        self.too_big = False

    def clear(self) -> None:
        self.batches = None

    def usable(self, model: nn.Module) -> bool:
        return getattr(model, "encoder_frozen", False) and not self.too_big

    def fill(
        self,
        model: nn.Module,
        batches: QueryGroupBatcher,
        *,
        runtime: Runtime,
        kept: KeptBatches | None = None,
    ) -> bool:
        """Encode every batch (eval mode, no grad); False when the outputs would pass the cap."""
        encoded, size = [], 0
        for rows, b in device_batches(batches, runtime, kept):
            items = model.encode(b.features, b.mask)
            size += items.element_size() * items.numel()
            if size > self.max_bytes:
                self.too_big = True
                return False
            encoded.append((rows, b.mask, items))
        self.batches = encoded
        return True

    def outputs(
        self,
        model: nn.Module,
        batches: QueryGroupBatcher,
        *,
        runtime: Runtime,
        kept: KeptBatches | None = None,
    ):
        """The kept ``(rows, mask, encoder outputs)`` of ``batches``, encoded now if need be;
        None when `model`'s encoder is not frozen or its outputs pass the cap."""
        if not self.usable(model):
            return None
        if self.batches is None and not self.fill(model, batches, runtime=runtime, kept=kept):
            return None
        return self.batches


class FrozenTrainItems:
    """A frozen itemwise encoder's outputs for every training item, kept between epochs.

    In a head-only phase without input noise or teaching (``full``'s first phase, ``lp``,
    ``mp``), the encoder is in eval mode and gets no gradient, so what it gives a training item
    cannot change from one epoch to the next; only how the shuffled QGs are batched does. For
    an itemwise encoder (`ItemwiseEncoder`: each item encoded alone) `lookup` gathers a
    batch's items from outputs computed once (`fill`, eval mode, no grad, in the run's
    training autocast) and the head runs on them as `Ranker.forward` would run it.
    `tests/test_finetune_cache.py` checks that a phase's losses, vali scores and weights stay
    equal to recomputing the encoder each epoch. Not used (None) when the QGs may be truncated
    (``max_list_len`` below the longest training QG: the kept items are drawn per epoch) or
    the outputs pass ``max_bytes``.
    """

    def __init__(self, max_bytes: int = 512 * 2**20) -> None:
        self.max_bytes = max_bytes
        self.items: torch.Tensor | None = None
        self.offsets: np.ndarray | None = None

    def clear(self) -> None:
        self.items = None

    def fill(
        self,
        model: nn.Module,
        split: RankingSplit,
        groups: np.ndarray,
        *,
        runtime: Runtime,
        item_budget: int,
        max_list_len: int | None,
    ) -> bool:
        """Encode the items of ``groups``; False (and nothing kept) when the cache cannot
        stand in for the encoder (see the class)."""
        self.items = None
        if not (
            getattr(model, "encoder_frozen", False)
            and isinstance(getattr(model, "encoder", None), ItemwiseEncoder)
        ):
            return False
        sizes = split.offsets[groups + 1] - split.offsets[groups]
        if max_list_len is not None and len(sizes) and int(sizes.max()) > max_list_len:
            return False
        out_dim = model.encoder.out_dim
        if split.n_items * out_dim * 4 > self.max_bytes:
            return False
        training = model.training
        model.eval()
        items = None
        batches = QueryGroupBatcher(split, item_budget=item_budget, groups=groups)
        with torch.no_grad(), runtime.train_autocast():
            for batch in batches:
                b = batch.to(runtime.device)
                encoded = model.encode(b.features, b.mask)
                if items is None:
                    items = encoded.new_zeros(split.n_items, encoded.shape[1])
                rows = rows_of_groups(split.offsets, batch.groups.numpy())
                items[torch.from_numpy(rows).to(encoded.device)] = encoded
        model.train(training)
        self.items, self.offsets = items, split.offsets
        return items is not None

    def lookup(self, groups: torch.Tensor) -> torch.Tensor:
        """``[N, out_dim]``: the kept outputs of the items of ``groups``, in mask order."""
        rows = rows_of_groups(self.offsets, groups.cpu().numpy())
        return self.items[torch.from_numpy(rows).to(self.items.device)]


def predict(
    model: nn.Module,
    split: RankingSplit,
    *,
    runtime: Runtime,
    item_budget: int,
    groups: np.ndarray | None = None,
    frozen: FrozenEncoderCache | None = None,
    kept: KeptBatches | None = None,
) -> np.ndarray:
    """``[n_items]`` float64 scores of ``split`` (0 for items outside ``groups``), eval mode.

    ``frozen``: reuse a frozen encoder's outputs from an earlier call with the same arguments;
    ``kept``: reuse the batches of an earlier call with the same arguments.
    """
    model.eval()
    scores = np.zeros(split.n_items, dtype=np.float64)
    batches = QueryGroupBatcher(split, item_budget=item_budget, groups=groups)
    with torch.no_grad():
        for rows, mask, out in _scored_batches(model, batches, runtime, frozen, kept):
            scores[rows] = out.float()[mask].cpu().numpy()
    return scores


def _scored_batches(model, batches: QueryGroupBatcher, runtime: Runtime, frozen, kept):
    """``(rows, mask, scores [B, L])`` of each batch: the head alone on a frozen encoder's kept
    outputs where ``frozen`` has them (or takes them now), else the whole model."""
    encoded = None
    if frozen is not None:
        encoded = frozen.outputs(model, batches, runtime=runtime, kept=kept)
    if encoded is not None:
        for rows, mask, items in encoded:
            yield rows, mask, model.score_encoded(items, mask)
        return
    for rows, b in device_batches(batches, runtime, kept):
        yield rows, b.mask, model(b.features, b.mask)


def selection_score(
    model: nn.Module,
    prepared: PreparedData,
    metrics_cfg,
    *,
    runtime: Runtime,
    item_budget: int,
    frozen: FrozenEncoderCache | None = None,
    kept: KeptBatches | None = None,
) -> float:
    """NDCG@5 of the labeled vali QGs (the only vali QGs scored); ``frozen`` and ``kept`` as
    in `predict`."""
    labeled = np.flatnonzero(prepared.labels.vali_labeled)
    scores = predict(
        model,
        prepared.vali,
        runtime=runtime,
        item_budget=item_budget,
        groups=labeled,
        frozen=frozen,
        kept=kept,
    )
    if np.isnan(scores[rows_of_groups(prepared.vali.offsets, labeled)]).any():
        # A diverged model (too high a learning rate): NaN ranks below every score
        # (search.selection.nan_low), so that epoch is never the one kept.
        print("warning: vali scores are NaN (training diverged; lower the lr)", file=sys.stderr)
        return float("nan")
    return vali_selection(prepared, scores, metrics_cfg)
