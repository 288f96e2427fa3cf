"""QG-bins: from a corrupted item, predict the in-QG quantile bin of each of its clean features.

Binning as a pretext task (Lee et al., ICML 2024): instead of reconstructing a feature's value,
predict which of ``n_bins`` equal-count bins it falls in. Here the bins are cut within each QG,
not over the data set, since ranking features are compared within a query: the target of item
``i`` and feature ``f`` is the bin of ``x_if`` among the values of ``f`` in ``i``'s own QG
(`qg_quantile_bins`). The input is the item with each entry replaced with probability
``augment.replace_p`` (default 0.3) by the same feature of a uniformly drawn item of its own QG
(`augmentations.qg_corruption`; the QG's items are the only donors: a value from another query
would be on another query's scale, and the bin is a position within the QG). A linear head maps
the embedding to ``n_features x n_bins`` logits:

    loss = mean over real items i and informative features f of CE(head(h(x~_i))_f, bin_if)

A feature constant within a QG puts all its items in bin 0 and tells nothing about them, so its
entries in that QG are left out of the mean (so is every entry of a one-item QG); a batch with
no informative entry gives 0 (with the graph kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from scarce_ltr.pretrain.augmentations import group_index, qg_corrupt
from scarce_ltr.pretrain.heads import linear_decoder
from scarce_ltr.pretrain.objectives.base import (
    Objective,
    ObjectiveOptions,
    check_probability,
    option,
)


@torch.no_grad()
def qg_quantile_bins(
    values: torch.Tensor, mask: torch.Tensor, *, n_bins: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equal-count bins of each column's values within each QG.

    The bin of a real value ``v`` of a QG of ``n`` real items is ``floor(n_bins * below / n)``,
    ``below`` the number of the QG's real values strictly below ``v``: the lowest value is in
    bin 0, equal values share a bin, and padding never counts. Example: one QG ``[0.1, 0.5,
    0.5, 0.9]``, ``n_bins=2``: ``below = [0, 1, 1, 3]``, bins ``[0, 0, 0, 1]``.

    Args:
        values: ``[B, L, K]`` (``K`` columns: features, or rank-pretext's task values).
        mask: ``[B, L]`` bool, True on real items.
        n_bins: number of bins.

    Returns:
        ``(bins [B, L, K] int64, 0 at padding; varies [B, K] bool, the columns holding two
        distinct real values or more in the QG)``.
    """
    if values.ndim != 3 or mask.shape != values.shape[:2] or mask.dtype != torch.bool:
        raise ValueError("values must be [B, L, K] with a bool mask [B, L]")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    columns = values.float().transpose(1, 2)  # [B, K, L]: searchsorted works on the last dim
    real = mask[:, None, :].expand_as(columns)
    # Padding at +inf sorts after every real value, so it is never below one.
    filled = torch.where(real, columns, torch.inf).contiguous()
    below = torch.searchsorted(filled.sort(dim=-1).values, filled, side="left")
    size = mask.sum(dim=1).clamp(min=1)[:, None, None]
    bins = torch.where(real, below * n_bins // size, 0).transpose(1, 2)
    low = torch.where(real, columns, torch.inf).amin(dim=-1)
    high = torch.where(real, columns, -torch.inf).amax(dim=-1)
    return bins.contiguous(), high > low


def qg_bins_loss(logits: torch.Tensor, bins: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the kept entries. ``logits [N, K, n_bins]``, ``bins [N, K]``
    (int64), ``keep [N, K]`` bool; 0 (with the graph) when nothing is kept. Example: uniform
    logits cost ``log n_bins`` (1.386 for 4 bins) whatever the bins."""
    if logits.ndim != 3 or bins.shape != logits.shape[:2] or keep.shape != bins.shape:
        raise ValueError("logits must be [N, K, n_bins], bins and keep [N, K]")
    if not bool(keep.any()):
        return logits.float().sum() * 0.0
    return F.cross_entropy(logits[keep].float(), bins[keep])


@dataclass(frozen=True)
class QGBinsOptions(ObjectiveOptions):
    """QG-bins' keys: the number of in-QG bins and the share of entries replaced by a same-QG
    donor's."""

    n_bins: int = option("pretext.n_bins")
    replace_p: float = option("augment.replace_p")

    def check(self) -> None:
        super().check()
        if self.n_bins < 2:
            raise ValueError(f"pretext.n_bins must be >= 2, got {self.n_bins}")
        check_probability("augment.replace_p", self.replace_p, closed=True)


class QGBins(Objective):
    options = QGBinsOptions

    def __init__(
        self, *, encoder: nn.Module, n_features: int, n_bins: int = 4, replace_p: float = 0.3
    ) -> None:
        super().__init__(encoder=encoder)
        QGBinsOptions(n_bins=n_bins, replace_p=replace_p)  # the same checks
        self.n_features, self.n_bins, self.replace_p = n_features, n_bins, replace_p
        self.head = linear_decoder(in_dim=self.width, out_dim=n_features * n_bins)

    @classmethod
    def build(cls, encoder: nn.Module, options: QGBinsOptions, *, n_features: int) -> QGBins:
        return cls(encoder=encoder, n_features=n_features, **options.arguments())

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        bins, varies = qg_quantile_bins(features, mask, n_bins=self.n_bins)
        keep = varies[:, None, :].expand_as(bins)[mask]  # [N, d]
        x, view_mask = self.inputs(features, mask)
        if self.replace_p > 0:
            x = qg_corrupt(
                x, view_mask, p=self.replace_p, generator=generator, groups=group_index(mask)
            )
        logits = self.head(self.encode(x, mask)).view(-1, self.n_features, self.n_bins)
        return qg_bins_loss(logits, bins[mask], keep)
