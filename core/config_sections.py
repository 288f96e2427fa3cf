"""An extension's section: ``objective: {name: vime, alpha: 1.0}``, the chosen extension's options
spelled by their own field names, turned into the config's keys before the config is built.

A config that chooses among registered extensions (`core.registry.Registry`: ``method`` among
the pretraining objectives) and holds their options as flat keys (``vime_alpha``,
``augment.corrupt_p``) may also be given a section named after the kind: ``name`` is the choice,
every other key a field of the chosen entry's options, standing for the config key that field
declares. `SectionSpelling.flatten` rewrites one layer (a config file, the command line's
``key=value``, the estimators' keywords) in the config's own keys, so both spellings compose one
config and one saved ``config.yaml``; a field the chosen entry's options lack is refused in
`core.registry.unread`'s words, and one setting given both ways in a layer with two values is
refused naming both. An option declared without a config key (an extension's own) stays in the
section, which the config holds as a mapping (``objective: {beta: 3}``); `finish` fills the
chosen entry's defaults in and drops the mapping when it is empty, so the config of an entry
without options of its own keeps the bytes it had before the section existed.

A schema lists its spellings in ``SECTIONS`` (a class attribute); `core.config.merge_config`
flattens every layer with them and finishes the merged config.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.registry import Registry, either, unread


@dataclass(frozen=True)
class SectionSpelling:
    """The section ``section`` of the extensions in ``registry`` (its ``choice`` key receives
    the section's ``name``)."""

    section: str  # the section's key; the config's mapping of own options has the same name
    registry: Registry[Any]
    # entry -> its options' field names -> the config key each stands for (None: its own,
    # kept in the section)
    fields: Callable[[Any], Mapping[str, str | None]]
    # (entry, own options given by field name) -> every own option of entry, defaults filled in
    # and values checked (`ValueError` naming the key), any other key kept for the config's
    # refusal of a key the choice does not read
    complete: Callable[[Any, dict[str, Any]], dict[str, Any]]

    @property
    def choice(self) -> str:
        return self.registry.choice

    def flatten(self, layer: Any, merged: DictConfig, source: str) -> Any:
        """``layer`` with its section spelled as the config's keys (a layer without the section
        as it is). The chosen entry: the section's ``name``, else the layer's choice key, else
        the one ``merged`` (the layers before) holds."""
        if not isinstance(layer, Mapping | DictConfig) or self.section not in layer:
            return layer
        plain = OmegaConf.to_container(layer) if isinstance(layer, DictConfig) else layer
        plain = copy.deepcopy(dict(plain))  # type: ignore[arg-type]
        given = plain.pop(self.section)
        if not isinstance(given, dict):
            raise UserError(
                f"{source}: {self.section} expects keys ({self.section}.name=<{self.choice}>, "
                f"{self.section}.<option>=<value>), got {given!r}"
            )
        given = dict(given)
        name = given.pop("name", None)
        if name is not None:
            self._check_name(name, source)
            if plain.get(self.choice, name) != name:
                raise _twice(source, f"{self.section}.name={name}", self.choice, plain[self.choice])
            plain[self.choice] = name
        chosen = name or plain.get(self.choice) or merged.get(self.choice)
        if given:
            self._check_name(chosen, source, key=self.choice)
        own: dict[str, Any] = {}
        spelled = self.fields(self.registry[chosen]) if given else {}
        for key, value in given.items():
            if key not in spelled:
                raise self._unread(chosen, key, value, spelled, source)
            target = spelled[key]
            if target is None:
                own[key] = value
                continue
            *heads, last = target.split(".")
            node = plain
            for head in heads:
                node = node.setdefault(head, {})
                if not isinstance(node, dict):  # the layer gave the section one value
                    raise UserError(f"{source}: {head} expects keys, got {node!r}")
            if last in node and node[last] != value:
                raise _twice(source, f"{self.section}.{key}={value}", target, node[last])
            node[last] = value
        if own:
            plain[self.section] = own
        return plain

    def finish(self, merged: DictConfig) -> None:
        """The own options of the chosen entry completed in ``merged`` (`complete`), the section
        left out when it holds none."""
        if self.section not in merged:
            return
        chosen = merged.get(self.choice)
        given = OmegaConf.to_container(merged[self.section])
        assert isinstance(given, dict)
        if chosen in self.registry:
            try:
                given = self.complete(self.registry[chosen], given)
            except ValueError as exc:
                raise UserError(f"bad config value: {exc}") from None
        with read_write(merged), open_dict(merged):
            if given:
                merged[self.section] = given
            else:
                del merged[self.section]

    def _check_name(self, name: Any, source: str, *, key: str = "") -> None:
        if name not in self.registry:
            said = key or f"{self.section}.name"
            raise UserError(
                f"{source}: {said} must be one of {', '.join(self.registry)}, got {name!r}"
            )

    def _unread(
        self, chosen: str, key: str, value: Any, spelled: Mapping[str, Any], source: str
    ) -> UserError:
        """A field the chosen entry's options lack, in `core.registry.unread`'s words: the
        entries whose options have it, the fields the chosen one has."""
        setting = f"{self.section}.{key}={value}"
        made = f"{self.choice}={chosen}"
        listed = [f"{self.section}.{name}" for name in spelled]
        readers = [n for n in self.registry if key in self.fields(self.registry[n])]
        if not readers:
            reads = ", ".join(listed) or "no option of its own"
            return UserError(
                f"{source}: {setting}: no {self.choice} has an option '{key}'; {made} reads {reads}"
            )
        refusal = unread([setting], made, f"{self.choice}={either(readers)}", listed)
        return UserError(f"{source}: {refusal}")


def _twice(source: str, nested: str, key: str, value: Any) -> UserError:
    """One setting given in both spellings in one layer, with two values."""
    return UserError(
        f"{source}: {nested} and {key}={value} set one thing twice with different values; give one"
    )
