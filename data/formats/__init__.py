"""How a data set's splits are stored: ``data.format`` names one of `FORMATS`.

Each format is one module exporting ``NAME``, ``Options`` (the ``data.*`` keys it reads, checked
by ``check()``) and ``FORMAT`` (`DataFormat`: how a split's file is found and read, and which
inputs ``predict`` reads as it). `DataConfig` refuses a format's key set for another format,
naming the keys the chosen one reads; `scarce_ltr.data.datasets` and
`scarce_ltr.serving.predict` dispatch through this registry. docs/architecture.md ("A data
format") lists what a new one touches.
"""

from __future__ import annotations

from scarce_ltr.core.registry import Registry
from scarce_ltr.data.formats import arrays, letor, table
from scarce_ltr.data.formats.base import DataFormat

# The one list of formats; the order is the one ``data.format``'s messages list. What each reads
# (`DataFormat.keys`): the ``data.*`` keys of its options.
FORMATS: Registry[DataFormat] = Registry(
    "format",
    {
        letor.NAME: letor.FORMAT,
        arrays.NAME: arrays.FORMAT,
        table.NAME: table.FORMAT,
    },
    reads=lambda fmt: fmt.keys,
)
