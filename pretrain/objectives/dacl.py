"""DACL+ (Verma et al., 2021): SimCLR's loss (paper eq. 2) on two Mixup-noise views.

Each view keeps a share ``lambda ~ U(mixup, 1)`` of the item and takes the rest from another item
of the batch (`augmentations.mixup_noise`), optionally followed by Gaussian noise
(``noise_scale``); every other view of the batch is a negative (`simclr.simclr_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from torch import nn

from scarce_ltr.pretrain.augmentations import compose, gaussian_noise, mixup_noise
from scarce_ltr.pretrain.objectives.base import ContrastOptions, check_probability, option
from scarce_ltr.pretrain.objectives.simclr import SimCLR


@dataclass(frozen=True)
class DACLOptions(ContrastOptions):
    """DACL+'s keys: the least share an item keeps of itself (``augment.mixup``), the Gaussian
    noise after it, the temperature and the projector's width."""

    mixup: float = option("augment.mixup")
    noise_scale: float = option("augment.noise_scale")

    def check(self) -> None:
        super().check()
        check_probability("augment.mixup", self.mixup, closed=True)


class DACL(SimCLR):
    """DACL+: eq. 2 on Mixup-noise views (then Gaussian noise when ``noise_scale`` > 0)."""

    options = DACLOptions

    def __init__(
        self,
        *,
        encoder: nn.Module,
        projector_dim: int | None = None,
        temperature: float = 0.1,
        mixup: float = 0.9,
        noise_scale: float = 0.0,
    ) -> None:
        super().__init__(
            encoder=encoder, projector_dim=projector_dim, temperature=temperature, noise_scale=0.0
        )
        steps = [partial(mixup_noise, alpha=mixup)]
        if noise_scale > 0:
            steps.append(partial(gaussian_noise, scale=noise_scale))
        self.augment = compose(*steps)
