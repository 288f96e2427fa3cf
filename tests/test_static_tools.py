"""Editors, type checkers and import-graph tools see the package from a checkout with nothing
installed: the repository root is the package `scarce_ltr`, which only an install maps to its
name, so `.pkg/scarce_ltr` holds one relative link per top-level entry of the package and
pyproject.toml points mypy (`mypy_path`) and pyright (`extraPaths`) at `.pkg`
(docs/architecture.md, "Editors and static tools")."""

from __future__ import annotations

import ast
import os
import tomllib
from importlib.machinery import PathFinder
from pathlib import Path

import pytest
from test_architecture import PACKAGE, ROOT, package_modules

LINKS = ROOT / ".pkg"
# Git checks a link out as a small text file where symlinks are off (Windows' default).
posix_links = pytest.mark.skipif(os.name != "posix", reason="git checks links out as links")


def find_module(name: str, search: list[str]) -> Path | None:
    """The file ``name`` (dotted) resolves to through ``search`` alone, as a static tool given
    those folders finds it: each part in its parent's folder, nothing imported or installed."""
    parts, spec = name.split("."), None
    for depth in range(1, len(parts) + 1):
        if search is None:  # a module, not a package: it has no submodules
            return None
        spec = PathFinder.find_spec(".".join(parts[:depth]), search)
        if spec is None:
            return None
        search = spec.submodule_search_locations
    return Path(spec.origin) if spec and spec.origin else None


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, module)`` for every import statement of a ``scarce_ltr`` module in ``path``;
    lazy imports too. ``from a.b import c``: ``a.b`` (``c`` may be a name defined there)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:  # relative: resolve against the importing package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, name))
    return [(line, n) for line, n in found if n == PACKAGE or n.startswith(f"{PACKAGE}.")]


def test_the_tools_are_pointed_at_the_link_folder() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert tool["mypy"]["mypy_path"] == ".pkg"
    assert tool["mypy"]["packages"] == [PACKAGE]
    assert tool["pyright"]["extraPaths"] == [".pkg"]


@posix_links
def test_the_link_folder_mirrors_the_package() -> None:
    """One link per subpackage, top-level module and the configs, relative (a clone anywhere
    resolves them), each to the entry of the same name at the root: a new subpackage without
    its link fails here."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    expected = {name.split(".")[1] for name in listed if name != PACKAGE}
    expected |= {path.name for path in ROOT.glob("*.py")} | {"configs"}
    entries = sorted((LINKS / PACKAGE).iterdir())
    assert {entry.name for entry in entries} == expected
    for entry in entries:
        assert entry.is_symlink(), entry
        assert not Path(os.readlink(entry)).is_absolute(), entry
        assert entry.resolve() == (ROOT / entry.name).resolve(), entry


@posix_links
def test_every_scarce_ltr_import_resolves_to_its_file_in_the_checkout() -> None:
    """What a type checker or import-graph tool given ``.pkg`` sees: every ``scarce_ltr.*`` import
    of the package, the tests and the benchmarks names a file of this checkout."""
    search = [str(LINKS)]
    modules = package_modules()
    assert find_module(PACKAGE, search).resolve() == (ROOT / "__init__.py").resolve()
    files = [(path, module) for module, path in modules.items()]
    for folder in ("tests", "benchmarks"):
        files += [(path, path.stem) for path in sorted((ROOT / folder).glob("*.py"))]
    unresolved, checked = [], 0
    for path, module in files:
        for line, name in imported_modules(path, module):
            checked += 1
            found = find_module(name, search)
            if found is None or name not in modules or found.resolve() != modules[name].resolve():
                unresolved.append(f"{path.relative_to(ROOT)}:{line}: {name} -> {found}")
    assert checked > 500
    assert unresolved == []
    # Only the package's name is added: nothing generic (`core`, `data`) becomes importable.
    assert [name for name in ("core", "data", "cli") if PathFinder.find_spec(name, search)] == []


def test_an_unknown_module_is_not_found() -> None:
    """The resolver above fails where a static tool would: a module that is not there."""
    search = [str(LINKS)]
    assert find_module(f"{PACKAGE}.core.no_such_module", search) is None
    assert find_module(f"{PACKAGE}.cli.main", search) is None  # cli is a module, not a package
    assert find_module(PACKAGE, [str(ROOT)]) is None  # the root alone maps no `scarce_ltr`
