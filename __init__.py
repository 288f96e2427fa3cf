"""scarce-ltr: learning to rank when labels are scarce (Hou et al., 2024).

The repository root is this package (``pyproject.toml`` maps ``scarce_ltr`` to it), so its
folders are the subpackages: ``scarce_ltr.core`` (shared basics), ``.data``, ``.pretrain``,
``.finetune``, ``.baselines``, ``.ensembles``, ``.sweeps`` and the command line ``.cli``.
docs/architecture.md says what each may import.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("scarce-ltr")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
