"""The baselines: tree rankers and deep rankers trained without pretraining.
``baselines.fit(cfg, splits, labeled=mask) -> ranker`` trains one on in-memory splits
(`scarce_ltr.baselines.run.fit`), imported when first used: the command line reads this
package's configs without importing the backends."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "fit":
        from scarce_ltr.baselines.run import fit

        return fit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
