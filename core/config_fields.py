"""What a config schema is built from: numeric ranges declared once, and the shared sections.

A numeric key's range is declared once, as its field's metadata (`allowed`): `check_allowed`
enforces it in ``__post_init__``, and a type error (``epochs=1e23``, a float for an int) quotes
it (`scarce_ltr.core.config`). nan is never allowed, and inf only at a closed infinite end.
The bounds several stages share: `POSITIVE`, `NON_NEGATIVE`, `SEEDS`, `MAX_EPOCHS`, `MAX_TRIALS`;
the values of the ``logger`` and ``metrics.policy`` keys: `LOGGERS`, `POLICIES`. What a user
set in a section, against its defaults: `changed_keys`; a key that only some choices of a
section's method or search read: `read_with`, `check_read` (in the words of every refusal of an
unread key, `core.registry.unread`).

The sections several stages' configs hold: `MetricsConfig` (the cutoffs of NDCG, ERR and P
reported, what a QG without a relevant item counts as) and `OptimizerConfig` (Adam or AdamW,
the rate's schedule).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from typing import Any

from scarce_ltr.core.registry import either, unread

POLICIES = ("skip", "one", "zero")
LOGGERS = ("wandb", "none")
SEED_MAX = 2**32 - 1  # numpy's seeds (np.random.seed) are 0 .. 2**32 - 1
# More epochs (or boosting rounds) than this is a typo (epochs=1e23), not a plan: refused.
MAX_EPOCHS = 1_000_000
MAX_TRIALS = 100_000  # Optuna trials, likewise


@dataclass(frozen=True)
class Allowed:
    """The values a numeric key allows, from ``low`` to ``high`` (an end left out when open).
    nan is never allowed, and inf only at a closed infinite end."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    why: str = ""  # said after the range: what the bound is, or what to do instead

    def __contains__(self, value: float) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        """``>= 0 and <= 4294967295``; ``> 0 and finite``; ``>= 0 and < 1``."""
        parts = []
        if self.low > -math.inf:
            parts.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
        if self.high < math.inf:
            parts.append(f"{'<' if self.high_open else '<='} {_number(self.high)}")
        elif self.high_open:
            parts.append("finite")
        return " and ".join(parts) or "a number"

    def check(self, key: str, value: float | None) -> None:
        """`ValueError` ``key=value: key must be <range> (why)`` for a value outside."""
        if value is not None and value not in self:
            why = f" ({self.why})" if self.why else ""
            raise ValueError(f"{key}={value!r}: {key} must be {self}{why}")


def allowed(bounds: Allowed) -> dict:
    """A field's metadata: the range `check_allowed` enforces and a type error quotes
    (``seed: int = field(default=0, metadata=allowed(SEEDS))``)."""
    return {"allowed": bounds}


def check_allowed(config: Any, prefix: str = "") -> None:
    """Each field of ``config`` that declares a range (`allowed`) holds a value inside it;
    ``prefix`` is the section's dotted name (``optimizer.``). A list is checked item by item."""
    for f in fields(config):
        bounds = f.metadata.get("allowed")
        if bounds is None:
            continue
        value = getattr(config, f.name)
        for item in value if isinstance(value, list | tuple) else [value]:
            bounds.check(f"{prefix}{f.name}", item)


def changed_keys(prefix: str, options: Any, default: Any) -> list[str]:
    """``<prefix>.<key>=<value>`` of each key of ``options`` (a dataclass section; a nested
    section by its dotted keys) whose value differs from ``default``'s: what a user set in a
    section that the chosen method, executor or missing teacher leaves unread."""
    changed = []
    for f in fields(options):
        value, base = getattr(options, f.name), getattr(default, f.name)
        if is_dataclass(value) and type(value) is type(base):
            changed += changed_keys(f"{prefix}.{f.name}", value, base)
        elif value != base:
            changed.append(f"{prefix}.{f.name}={value}")
    return changed


@dataclass(frozen=True)
class ReadWith:
    """The values of a choice under which a section's key is read: ``choice`` is ``method``
    (the run's) or a key of the section itself (``search``: ``gbdt.search``)."""

    choice: str
    values: tuple[str, ...]


def read_with(choice: str, *values: str) -> dict:
    """A field's metadata: the values of ``choice`` that read it (`check_read`), as a section's
    options name the methods that read the whole section (``read_by``, `baselines.config`)
    (``pca_components: list[int] = field(..., metadata=read_with("method", "gbdt-pca"))``)."""
    return {"read_with": ReadWith(choice, values)}


def check_read(prefix: str, options: Any, **choices: str) -> None:
    """`ValueError` for the first key of ``options`` (the section ``prefix``) set away from its
    default under a choice that does not read it (`read_with`), naming the key, the choice made and
    the values that read it: ``gbdt.n_trials=5: gbdt.search=paper-grid does not read it (read
    with gbdt.search=optuna or random)``. ``choices``: the values of choices made outside the
    section (``method=gbdt``); a choice the section holds is read from it."""
    for f in fields(options):
        reader = f.metadata.get("read_with")
        if reader is None:
            continue
        if reader.choice in choices:
            key, chosen = reader.choice, choices[reader.choice]
        else:
            key, chosen = f"{prefix}.{reader.choice}", getattr(options, reader.choice)
        if chosen in reader.values:
            continue
        value, default = getattr(options, f.name), field_default(f)
        if is_dataclass(value) and type(value) is type(default):
            changed = changed_keys(f"{prefix}.{f.name}", value, default)
        else:
            changed = [f"{prefix}.{f.name}={value}"] if value != default else []
        if changed:
            raise unread(changed[:1], f"{key}={chosen}", f"{key}={either(reader.values)}")


def field_default(f: Field) -> Any:
    """The default of a dataclass field (its factory's value for a list or a section)."""
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


def _number(value: float) -> str:
    if isinstance(value, int) or (math.isfinite(value) and value.is_integer()):
        return str(int(value))
    return f"{value:g}"


POSITIVE = Allowed(0, low_open=True, high_open=True)  # > 0 and finite: rates, temperatures
NON_NEGATIVE = Allowed(0, high_open=True)  # >= 0 and finite: penalties, noise scales
SEEDS = Allowed(0, SEED_MAX, why="numpy's seeds are 0 .. 2**32 - 1")


@dataclass(frozen=True)
class MetricsConfig:
    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10])  # cutoffs: NDCG, ERR, P@k
    policy: str = "skip"  # what a QG without any relevant item counts as: skip | one | zero

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"metrics.policy must be one of {', '.join(POLICIES)}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError("metrics.ks must be a non-empty list of positive integers")


@dataclass(frozen=True)
class OptimizerConfig:
    """Adam at a constant rate (paper A.2.3). ``lr``'s default, the paper's 5e-4, is
    pretraining's, named here alone (configs/pretrain/*.yaml leave it); finetuning's is
    `FinetuneConfig`'s. The A.2.5 recipe: ``name=adamw weight_decay=0.01 schedule=cosine``
    (`core.optim`)."""

    lr: float = field(default=5e-4, metadata=allowed(POSITIVE))  # the base learning rate
    # adam: L2 penalty in the gradient; adamw: decoupled decay
    weight_decay: float = field(default=0.0, metadata=allowed(NON_NEGATIVE))
    name: str = "adam"  # adam | adamw
    schedule: str = "constant"  # constant | cosine (per batch, over the run or phase)
    warmup: float = 0.05  # cosine: share of the steps with a linear warmup from 0

    def __post_init__(self) -> None:
        from scarce_ltr.core.optim import OPTIMIZERS, SCHEDULES

        check_allowed(self, "optimizer.")
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer.name must be one of {', '.join(OPTIMIZERS)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"optimizer.schedule must be one of {', '.join(SCHEDULES)}")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"optimizer.warmup must be in [0, 1), got {self.warmup}")
