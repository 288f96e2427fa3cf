"""Every model family's entry (`scarce_ltr.core.families.ModelFamily`), collected in one table.

Each family declares its entry as ``FAMILY`` in its own package; this layer sits above all of
them (the ensembles included) so that it may import every one. What the layers above need per
family, they read here: serving the scorer and the export formats of a bundle kind, the command
line and sweeps the families' names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scarce_ltr.baselines.run import BASELINE_FAMILIES
from scarce_ltr.core.families import ModelFamily, Scorer
from scarce_ltr.ensembles.family import FAMILY as ENSEMBLES
from scarce_ltr.finetune.family import FAMILY as FINETUNED

FAMILIES: tuple[ModelFamily, ...] = (FINETUNED, *BASELINE_FAMILIES, ENSEMBLES)


def bundle_kinds() -> list[str]:
    """Every model kind a family's bundle may hold, in the order of `FAMILIES`."""
    return list(dict.fromkeys(family.bundle_kind for family in FAMILIES))


def scorers() -> dict[str, Scorer]:
    """Each bundle kind's scorer (`ModelFamily.scorer`), in the order of `bundle_kinds`; the
    families sharing a kind name the same one (tests/test_families.py checks)."""
    found: dict[str, Scorer] = {}
    for family in FAMILIES:
        found.setdefault(family.bundle_kind, family.scorer)
    return found


def export_formats(bundle_kind: str) -> tuple[str, ...]:
    """The export formats a bundle of ``bundle_kind`` may take: those of any family writing
    that kind (a bundle's own contents may still rule one out, as PCA columns do)."""
    writers = [family for family in FAMILIES if family.bundle_kind == bundle_kind]
    return tuple(dict.fromkeys(f for family in writers for f in family.export_formats))


def torch_builders() -> dict[str, Callable[[dict], Any]]:
    """Every family's torch module builders by spec kind (`ModelFamily.torch_builders`)."""
    return {kind: build for family in FAMILIES for kind, build in family.torch_builders.items()}
