"""The registered tree backends: the one line a new backend adds beyond its module.

Each backend's one module declares its entry (``BACKEND``, a `trees.tuning.TreeBackendEntry`:
its section's options, its family, its in-memory fit, its optional package), and `TREE_BACKENDS`
lists the entries. The rest derives from this table, so a backend edits no central file:
`baselines.config.BaselineConfig` gets a section per entry (its keys on the command line, in
``--help`` and in a run's ``config.yaml``; another method's setting of them refused),
`baselines.run` its methods' entry points and fits, `families` its bundle kind and scorer, and
the backend names its missing package from its own `core.extras.Extra`.

LightGBM is not listed: it is the baselines' default backend (not optional), and the config's
own checks read its ``gbdt:`` section (``gbdt.teacher``) and its variants' (gbdt-ssl's
``pretrained`` and ``embedding:``), so those stay typed fields of `BaselineConfig`.
"""

from __future__ import annotations

from scarce_ltr.core.registry import Registry
from scarce_ltr.trees import catboost, xgboost
from scarce_ltr.trees.tuning import TreeBackendEntry

# Name (its section's) -> its module's entry, in the order of the config's sections, --help and
# the baselines' names. `TREE_BACKENDS.readers(section)`: the backend reading that section.
TREE_BACKENDS: Registry[TreeBackendEntry] = Registry(
    "method",
    {backend.name: backend for backend in (catboost.BACKEND, xgboost.BACKEND)},
    reads=lambda backend: (backend.name,),
    sections=True,
)
