"""The config of ``./run.sh baseline <name>``: common keys, the method, one section per family.

``configs/baseline/<name>.yaml`` sets ``method`` (equal to the file name) and the method's
defaults. A family of baselines keeps its own keys in a section of its own (``gbdt:`` for the
LightGBM ones); a new family adds a field here and a dataclass in its own module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from baselines.deep_config import DeepBaselineOptions
from baselines.gbdt_config import GBDTOptions
from baselines.gbdt_ssl_config import EmbeddingOptions
from core.config import CommonConfig


@dataclass(frozen=True)
class BaselineConfig(CommonConfig):
    """Keys of every baseline run; ``method`` picks the entry in `baselines.run.BASELINES`."""

    method: str = "gbdt"
    gbdt: GBDTOptions = field(default_factory=GBDTOptions)
    deep: DeepBaselineOptions = field(default_factory=DeepBaselineOptions)
    pretrained: str | None = None  # gbdt-ssl: a pretraining or finetuning run dir
    embedding: EmbeddingOptions = field(default_factory=EmbeddingOptions)  # gbdt-ssl

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.method:
            raise ValueError("method must name a baseline")
        if self.pretrained is not None and self.method != "gbdt-ssl":
            raise ValueError(f"pretrained is a key of gbdt-ssl, not of {self.method}")

    def run_method(self, name: str) -> str:
        """The method part of the default run directory: gbdt-ssl names its encoder's run
        (``gbdt-ssl+simclr-rank``), so that two encoders never share one folder."""
        if self.method != "gbdt-ssl" or not self.pretrained:
            return name
        from baselines.embedding_features import source_model

        return f"{name}+{source_model(self.pretrained)}"
