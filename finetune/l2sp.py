"""L2-SP: finetuning kept near the pretrained encoder (Li, Grandvalet & Davoine, 2018).

``alpha / 2 * ||theta_enc - theta_enc^0||^2``, the squared distance of the encoder's parameters
from the values they had when finetuning began (the pretrained ones), is added to the ranking
loss of every training step that trains the encoder. Plain weight decay pulls toward 0, which
after pretraining means toward forgetting; L2-SP pulls toward what pretraining learned, so a
few labeled QGs cannot wash it out as fast (benchmarks/hybrid-log.md). The head is not
penalised (the paper's optional ``beta / 2 * ||theta_head||^2`` is weight decay,
``optimizer.weight_decay``).
BatchNorm running statistics are buffers, not parameters: they are not anchored.

Example: an encoder with one parameter ``[1., 2.]`` anchored there and moved to ``[1., 4.]``
has, at alpha 0.1, the penalty ``0.1 / 2 * (0 ** 2 + 2 ** 2) = 0.2``.
"""

from __future__ import annotations

import torch
from torch import nn


class L2SP:
    """The penalty of an encoder against a copy of its parameters taken at construction.

    The copies live on the parameters' device. ``__call__`` returns the penalty (a scalar
    tensor with a gradient into the encoder) and keeps a running sum of its values, which
    `epoch_mean` reads and resets, so an epoch's history row can show it beside the loss.
    """

    def __init__(self, encoder: nn.Module, *, alpha: float) -> None:
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = alpha
        self.parameters = list(encoder.parameters())
        self.reference = [p.detach().clone() for p in self.parameters]
        self._sum, self._count = 0.0, 0

    def __call__(self) -> torch.Tensor:
        """``alpha / 2 * sum((theta - theta^0) ** 2)`` over the encoder's parameters, fp32."""
        pairs = zip(self.parameters, self.reference, strict=True)
        distance = torch.stack([(p.float() - p0.float()).pow(2).sum() for p, p0 in pairs]).sum()
        penalty = 0.5 * self.alpha * distance
        self._sum, self._count = self._sum + float(penalty.detach()), self._count + 1
        return penalty

    def epoch_mean(self) -> float:
        """The mean penalty of the steps since the last call (0.0 when there were none)."""
        mean = self._sum / max(self._count, 1)
        self._sum, self._count = 0.0, 0
        return mean
