"""What a ranking loss is: its name, the options it reads, and the function they are bound to.

A loss module exports its ``NAME`` (the ``loss.name`` a user writes), its options (a frozen
`LossOptions` dataclass whose fields are the keys of the ``loss`` section it reads, with their
defaults, and whose `check` refuses a value the loss cannot take, naming the key) and ``LOSS``,
a `Loss`: the name, the options class and the pure function ``f(scores, labels, *, mask,
**options)`` that `Loss.build` binds them to. `losses.LOSSES` lists them by name, and
the stage configs refuse a ``loss.<key>`` the chosen loss does not read
(`finetune.config.LossConfig.check_taken`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import torch

from scarce_ltr.core.config_fields import POSITIVE

BoundLoss = Callable[..., torch.Tensor]  # f(scores [B, L], labels [B, L], *, mask [B, L])


@dataclass(frozen=True)
class LossOptions:
    """The keys of the ``loss`` section one loss reads: a field per key, named as the key, with
    the key's default. Checked when made (`check`); `of` reads them from a ``loss`` section. A
    field left at None is not passed to the loss (`arguments`), so the loss's own default
    applies (``loss.temperature``: approx-ndcg's 0.1, neural-ndcg's 1.0)."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """`ValueError` naming the key (``loss.<key>``) of a value this loss cannot take."""

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The keys of the ``loss`` section these options hold, in field order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def of(cls, section: Any):
        """The options a ``loss`` section (`finetune.config.LossConfig`) gives, checked."""
        return cls(**{key: getattr(section, key) for key in cls.keys()})

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of the loss function: every option but those left at None."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {key: value for key, value in values.items() if value is not None}


# The checks of the keys several losses read, each written once; a loss's `check` calls those
# of its keys (a key one loss alone reads is checked in its module: lambdaloss's mu).
def check_sigma(sigma: float) -> None:
    POSITIVE.check("loss.sigma", sigma)


def check_cutoff(k: int | None) -> None:
    if k is not None and k < 1:
        raise ValueError("loss.k must be >= 1 (or null for no truncation)")


def check_temperature(temperature: float | None) -> None:
    POSITIVE.check("loss.temperature", temperature)


@dataclass(frozen=True)
class Loss:
    """One ranking loss: its command-line name, the options it reads and its function."""

    name: str
    options: type[LossOptions]
    function: Callable[..., torch.Tensor]

    def build(self, options: LossOptions) -> BoundLoss:
        """The function with ``options`` (this loss's, checked) bound: ``f(scores, labels, *,
        mask)``."""
        if not isinstance(options, self.options):
            raise TypeError(f"{self.name} takes {self.options.__name__}, got {options!r}")
        return partial(self.function, **options.arguments())

    def __call__(
        self, scores: torch.Tensor, labels: torch.Tensor, *, mask: torch.Tensor, **options: Any
    ) -> torch.Tensor:
        """The loss of a batch with ``options`` by key (checked; the others at their
        defaults): ``LOSSES["lambdarank"](scores, labels, mask=mask, k=5)``."""
        return self.build(self.options(**options))(scores, labels, mask=mask)
