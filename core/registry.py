"""Extensions by name, and the one refusal of a key that the choice made does not read.

An extension (a pretraining objective, a ranking loss, a data format, a sweep executor) is
registered under its command-line name in a `Registry`: an explicit dict, name -> the registered
class, that also knows the key making the choice among them (``method``, ``name`` of the
``loss`` section, ``format`` of the ``data`` section, ``executor``) and which of the config's
keys each entry reads (``reads``: an objective's options' keys, a loss's, a format's, an
executor's section). The config holds the keys of every entry beside the choice; a key set away
from its default that the choice made does not read would be a silent no-op, so `check_unread`
refuses it, in one message for every kind of extension (`unread`)::

    loss.mu=3: loss.name=lambdarank does not read it (read with loss.name=lambdaloss); it reads
    loss.sigma, loss.k

the setting, the choice made, the choices that read it and the keys the choice made reads. The
keys of a section that only some values of a choice read (``gbdt.n_trials`` under
``gbdt.search=optuna``) declare those values on their fields (`core.config_fields.read_with`)
and are refused in the same words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(dict[str, T], Generic[T]):
    """Name -> registered extension, in the order messages list them, with what each reads.

    ``choice``: the key a user sets to choose one (relative to the section holding the keys:
    ``name`` for the ``loss`` section); ``reads(entry)``: the keys entry reads, as the config
    names them relative to that section (``augment.corrupt_p``; a whole section by its name,
    with ``sections``). Read anew on every call, so an entry added later (a test's) counts.

    >>> FRUITS = Registry("fruit", {"apple": ("peel",), "plum": ("stone", "peel")}, reads=tuple)
    >>> FRUITS.option_keys(), FRUITS.readers("stone")
    (('peel', 'stone'), ['plum'])
    """

    def __init__(
        self,
        choice: str,
        entries: Mapping[str, T],
        *,
        reads: Callable[[T], Iterable[str]],
        sections: bool = False,
    ) -> None:
        super().__init__(entries)
        self.choice = choice
        self.sections = sections  # a key is a whole section: shown as ``<key>.*``
        self._reads = reads

    def reads(self, name: str) -> tuple[str, ...]:
        """The keys entry ``name`` reads (none for a name not registered)."""
        return tuple(self._reads(self[name])) if name in self else ()

    def option_keys(self) -> tuple[str, ...]:
        """Every key some entry reads, in the order of the entries and their keys."""
        return tuple(dict.fromkeys(key for name in self for key in self.reads(name)))

    def readers(self, key: str) -> list[str]:
        """The entries that read ``key``, in registry order."""
        return [name for name in self if key in self.reads(name)]

    def check_unread(
        self,
        chosen: str | Sequence[str],
        changed: Callable[[str], list[str]],
        *,
        prefix: str = "",
        also_read: Sequence[str] = (),
        made: str | None = None,
    ) -> None:
        """`check_unread` over this registry's keys (see there): ``chosen`` the entry (or
        entries) chosen, ``prefix`` the dotted section holding the keys and the choice
        (``deep.loss.``)."""
        names = [chosen] if isinstance(chosen, str) else list(dict.fromkeys(chosen))
        check_unread(
            choice=f"{prefix}{self.choice}",
            chosen=names,
            readers={key: self.readers(key) for key in self.option_keys()},
            changed=changed,
            reads=list(dict.fromkeys(key for name in names for key in self.reads(name))),
            shown=lambda key: f"{prefix}{key}{'.*' if self.sections else ''}",
            also_read=also_read,
            made=made,
        )


def check_unread(
    *,
    choice: str,
    chosen: Sequence[str],
    readers: Mapping[str, Sequence[str]],
    changed: Callable[[str], list[str]],
    shown: Callable[[str], str] = str,
    also_read: Sequence[str] = (),
    made: str | None = None,
    reads: Sequence[str] | None = None,
) -> None:
    """`ValueError` (`unread`) for the first key of ``readers`` (key -> the values of
    ``choice`` that read it) that none of ``chosen`` reads and that the user set: ``changed(key)``
    gives its settings away from their defaults (``["loss.mu=3"]``; several for a section), none
    when it is at its default. ``shown(key)``: the key in messages (``loss.mu``, ``ray.*``);
    ``also_read``: what every choice reads beside the keys here, listed first (``workers``);
    ``made``: the choice in words when it is not ``choice=<chosen>`` (``data=synthetic``);
    ``reads``: the keys ``chosen`` reads in the order to list them (default: ``readers``')."""
    if reads is None:
        reads = [key for key, names in readers.items() if any(name in names for name in chosen)]
    for key, names in readers.items():
        if key in reads:
            continue
        settings = changed(key)
        if settings:
            said = made or f"{choice}={', '.join(chosen)}"
            raise unread(
                settings,
                said,
                f"{choice}={either(names)}",
                [*also_read, *map(shown, reads)],
                several=len(chosen) > 1,
            )


def unread(
    settings: Sequence[str],
    made: str,
    readers: str,
    reads: Sequence[str] | None = None,
    *,
    several: bool = False,
) -> ValueError:
    """The refusal of ``settings`` (``key=value``, of one key or section) that the choice
    ``made`` (``method=gbdt``; of ``several`` values: the search's losses too) does not read,
    naming the choices that do (``readers``: ``method=xgboost``) and, when given, the keys the
    choice made reads (``reads``).

    >>> str(unread(["xgboost.n_trials=5"], "method=gbdt", "method=xgboost", ["gbdt.*"]))
    'xgboost.n_trials=5: method=gbdt does not read it (read with method=xgboost); it reads gbdt.*'
    """
    it = "them" if len(settings) > 1 else "it"
    verb = f"none of {made} reads {it}" if several else f"{made} does not read {it}"
    text = f"{', '.join(settings)}: {verb} (read with {readers})"
    if reads is not None:
        listed = ", ".join(reads) or "no option of its own"
        text += f"; {'they read' if several else 'it reads'} {listed}"
    return ValueError(text)


def either(values: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``: the values that read a key, in messages."""
    if not values:
        return "none"
    *rest, last = values
    return f"{', '.join(rest)} or {last}" if rest else last
