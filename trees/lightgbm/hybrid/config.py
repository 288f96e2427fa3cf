"""Options of ``./run.sh baseline gbdt-ssl``: the ``embedding:`` section of a baseline config.

The encoder of ``pretrained=<run dir>`` embeds every item; the GBDT gets the item's features
with one of these appended, the choice made on vali NDCG@5 together with the grid point:

- ``pca-<k>`` for each k in ``components``: the first k principal components of the embeddings,
  the PCA fit on every train item's embedding (labeled or not);
- ``raw`` (``raw=true``): the whole embedding;
- ``none`` (0 in ``components``): no embedding, the plain GBDT as a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class EmbeddingOptions:
    read_by: ClassVar[tuple[str, ...]] = ("gbdt-ssl",)  # the baselines that read this section
    section: ClassVar[str] = "embedding"  # its field of the config (`tree_run.section_of`)

    components: list[int] = field(default_factory=lambda: [8, 16, 32])  # PCA sizes; 0: none
    raw: bool = True  # the whole embedding is a candidate too
    item_budget: int = 20000  # items per forward pass when embedding
    cache: bool = True  # keep embeddings.npz in the source run dir, reuse it when it matches

    def __post_init__(self) -> None:
        if any(k < 0 for k in self.components):
            raise ValueError("embedding.components must be integers >= 0 (0: no embedding)")
        if not self.components and not self.raw:
            raise ValueError("embedding.components is empty and embedding.raw is false")
        if self.item_budget < 1:
            raise ValueError("embedding.item_budget must be >= 1")

    def candidates(self, dim: int) -> list[tuple[str, int | None]]:
        """``(name, k)``: k PCA components (0 none), ``None`` the raw embedding of ``dim``."""
        out: list[tuple[str, int | None]] = []
        for k in dict.fromkeys(self.components):
            if k <= dim:
                out.append(("none" if k == 0 else f"pca-{k}", k))
        if self.raw:
            out.append(("raw", None))
        return out
