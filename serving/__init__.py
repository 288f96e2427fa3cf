"""Trained rankers at work: load a run's model bundle and score raw items (`load_ranker`),
``./run.sh predict``."""

from scarce_ltr.serving.ranker import BundledRanker, load_ranker

__all__ = ["BundledRanker", "load_ranker"]
