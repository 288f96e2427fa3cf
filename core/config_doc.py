"""Every key of a config dataclass with its type, default and one line of help.

Read from the dataclasses themselves, so help never drifts from the code: the type is the field's
annotation, the default its default (or the value a YAML layer gives it), and the help line the
comment on the field's line (or the comment lines just above it, or a nested section's docstring).
``./run.sh <command> [<name>] --help`` prints `help_text`; a type error names the expected type
through `expected_type`, and the range a field's metadata declares through `key_field`.
"""

from __future__ import annotations

import inspect
import io
import re
import textwrap
import tokenize
import types
import typing
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class KeyDoc:
    key: str  # dotted: scarcity.fraction
    type: str  # int | float or null | list[int] | section | ...
    default: Any
    doc: str


def describe(schema: type, prefix: str = "", instance: Any = None) -> list[KeyDoc]:
    """Every key of ``schema``, sections before their keys, in declaration order.

    ``instance`` holds a section's defaults when its parent's factory sets them (finetuning's
    ``optimizer`` is ``OptimizerConfig(lr=5e-5)``, not the class default).
    """
    try:
        hints = typing.get_type_hints(schema)
    except (NameError, TypeError):  # an annotation only a type checker resolves: show its text
        hints = {f.name: f.type for f in fields(schema)}
    docs = field_docs(schema)
    out: list[KeyDoc] = []
    for f in fields(schema):
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        default = _default(f) if instance is None else getattr(instance, f.name)
        if is_dataclass(tp):
            doc = docs.get(f.name) or _class_doc(tp)
            out.append(KeyDoc(key, "section", None, doc))
            out.extend(describe(tp, f"{key}.", default))
            continue
        out.append(KeyDoc(key, type_name(tp), default, docs.get(f.name, "")))
    return out


def expected_type(schema: type, key: str) -> str | None:
    """The type of dotted ``key`` (or of its nearest documented parent), None when unknown."""
    known = {d.key: d.type for d in describe(schema)}
    while key:
        if key in known:
            return known[key]
        key = key.rpartition(".")[0]
    return None


def key_field(schema: type, key: str) -> Field | None:
    """The dataclass field of dotted ``key`` (its metadata: the range it allows), None when no
    field of a dataclass section holds it (a key inside a plain ``dict``)."""
    node: Any = schema
    found = None
    for name in key.split("."):
        if not is_dataclass(node):
            return None
        found = next((f for f in fields(node) if f.name == name), None)
        if found is None:
            return None
        try:
            node = typing.get_type_hints(node).get(name)
        except (NameError, TypeError):
            node = None
    return found


def type_name(tp: Any) -> str:
    """``int | None`` -> ``int or null``; ``list[float]`` -> ``list[float]``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        name = " or ".join(type_name(a) for a in args)
        return f"{name} or null" if len(args) < len(typing.get_args(tp)) else name
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in typing.get_args(tp))}]"
    return getattr(tp, "__name__", str(tp))


def _default(f) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _class_doc(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    if not doc or doc.startswith(f"{cls.__name__}("):  # the signature dataclass() writes
        return ""
    return " ".join(doc.split("\n\n")[0].split())


@cache
def field_docs(schema: type) -> dict[str, str]:
    """The comment of each field in the class bodies of ``schema`` and its bases."""
    docs: dict[str, str] = {}
    for cls in reversed(schema.__mro__):
        if is_dataclass(cls):
            docs.update(_class_comments(cls))
    return docs


def _class_comments(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (a frozen install): help without lines
        return {}
    docs: dict[str, str] = {}
    above: list[str] = []
    line_field: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if tok.start[0] in line_field:  # trailing comment of a field
                docs[line_field[tok.start[0]]] = text
            elif tok.start[1] == 4:  # a comment line in the class body
                above.append(text)
        elif tok.type == tokenize.NAME and tok.start[1] == 4:
            if tok.string in ("def", "class", "return", "if", "@"):
                above = []
                continue
            if tok.string in {f.name for f in fields(cls)} and tok.string not in docs:
                line_field[tok.start[0]] = tok.string
                if above:
                    docs[tok.string] = " ".join(above)
            above = []
    return docs


def help_text(schema: type, values: dict[str, Any] | None = None) -> str:
    """One line per key: ``key: type = default  help``; ``values`` (dotted keys) win over the
    dataclass defaults (a named config's YAML)."""
    values = values or {}
    lines = []
    for d in describe(schema):
        if d.type == "section":
            lines.append(f"  {d.key}.*  {_one_line(d.doc)}".rstrip())
            continue
        shown = f"  {d.key}: {d.type} = {_show(values.get(d.key, d.default))}"
        lines.append(f"{shown:<44} {_one_line(d.doc)}".rstrip())
    return "\n".join(lines)


def _one_line(doc: str) -> str:
    """The first sentence, so that every key takes one line."""
    sentence = re.split(r"(?<!e\.g)(?<!i\.e)\. ", doc)[0].rstrip(".")
    return sentence if len(sentence) <= 100 else sentence[:97] + "..."


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value else "''"
    return str(value).replace(" ", "")
