"""The package ships its type hints (PEP 561): a ``py.typed`` marker as package data."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_py_typed_marker_is_package_data() -> None:
    assert (ROOT / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["scarce_ltr"]
