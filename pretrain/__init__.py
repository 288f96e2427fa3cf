"""Self-supervised pretraining of item encoders. ``pretrain.fit(cfg, data) -> Encoder`` trains
on in-memory splits (`scarce_ltr.pretrain.train.fit`), imported when first used: the command
line reads this package's configs without importing torch's training code."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "fit":
        from scarce_ltr.pretrain.train import fit

        return fit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
