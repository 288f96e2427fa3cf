"""Dropout whose masks cost a fraction of `nn.Dropout`'s: 16 random bits per activation.

`nn.Dropout` draws one float per activation (``bernoulli_``): 15 % of a SimCLR-Rank or SimSiam
epoch's CPU time and 16 % of a ``full`` finetuning epoch's (benchmarks/profile_epoch.py,
BENCHMARKS.md). Here each 64-bit word of one ``random_`` call gives four independent 16-bit
lanes, and an activation is dropped when its lane falls below ``round(p * 2**16)``: a quarter
of the draws, and the comparison and the scaling are cheap vectorised passes (about 4x less
time for the mask on one core).

The drop probability is ``q = round(p * 2**16) / 2**16`` (``|q - p| <= 2**-17``: 0.1 becomes
0.100006); kept activations are scaled by ``1 / (1 - q)`` so that the expectation is exact, as
`nn.Dropout` scales by ``1 / (1 - p)``. Lanes are distinct bits of the generator's stream, so
masks are independent across positions and steps, and a fixed seed gives the same masks.
Evaluation mode (and ``p = 0``) returns the input itself, so exported graphs hold no dropout.
"""

from __future__ import annotations

import torch
from torch import nn

_LANES = 4  # 16-bit lanes per 64-bit word
_LEVELS = 2**16


def drop_levels(p: float) -> int:
    """Lanes ``< -2**15 + drop_levels(p)`` (of ``2**16`` equally likely values) are dropped."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p must be in [0, 1), got {p}")
    return round(p * _LEVELS)


def keep_mask(
    shape: torch.Size | tuple[int, ...],
    p: float,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``shape`` tensor of ``0`` (dropped) and ``1 / (1 - q)`` (kept), ``q`` as above."""
    levels = drop_levels(p)
    n = 1
    for size in shape:
        n *= int(size)
    words = torch.empty(-(-n // _LANES), dtype=torch.int64, device=device)
    # The whole int64 range: random_() alone leaves every word's sign bit 0.
    words.random_(-(2**63), None, generator=generator)
    lanes = words.view(torch.int16)[:n].view(shape)
    keep = lanes >= levels - _LEVELS // 2
    return keep.to(dtype).mul_(_LEVELS / (_LEVELS - levels))


class Dropout(nn.Dropout):
    """`nn.Dropout` with `keep_mask`'s cheaper masks (same module interface, no state)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or drop_levels(self.p) == 0:
            return x
        if self.inplace:
            return x.mul_(keep_mask(x.shape, self.p, device=x.device, dtype=x.dtype))
        return x * keep_mask(x.shape, self.p, device=x.device, dtype=x.dtype)
