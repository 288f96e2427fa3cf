"""SimCLR-Sample (paper 3.1): SimCLR-Rank's loss and keys over fake QGs of random items.

Each epoch the pretraining items are permuted at random and cut into QGs of the real QGs' sizes
(``fake_groups``; `pretraining_set.fake_group_split`): the negatives are random items, which shows
what negatives from the same QG are worth.
"""

from __future__ import annotations

from scarce_ltr.pretrain.objectives.simclr_rank import SimCLRRank


class SimCLRSample(SimCLRRank):
    """SimCLR-Rank over fake QGs: items permuted at random each epoch, then grouped."""

    fake_groups = True
    qg_negatives = False  # a fake QG's items are random: nothing asks the real QGs for two
