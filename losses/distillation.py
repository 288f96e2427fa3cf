"""Listwise distillation: softmax cross-entropy from a teacher's scores to the student's.

``loss_q = -sum_i p_i log softmax(s)_i`` over the real items of QG ``q``, with the teacher's
distribution ``p = softmax(t / temperature)``: the student learns how the teacher orders and
separates the items of a QG, not the scale of its scores (a shift of ``t`` changes nothing). A
higher temperature flattens ``p``. The batch loss is the mean of ``loss_q`` over QGs with a real
item. Unlike the label losses, no QG is left out for lacking a relevant item: the teacher scores
every QG. Example: scores ``[0, 0]``, teacher ``[0, ln 3]`` give ``p = [1/4, 3/4]`` and
``log 2 = 0.6931``; scores ``[ln 3, 0]``, teacher ``[0, 0]`` give
``-(log(3/4) + log(1/4)) / 2 = 0.8370``.
"""

from __future__ import annotations

import torch

from scarce_ltr.losses.common import check_inputs, mean_over_groups
from scarce_ltr.losses.listnet import masked_log_softmax


def distillation_loss(
    scores: torch.Tensor, teacher: torch.Tensor, *, mask: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Scalar distillation loss of a batch; ``scores``, ``teacher``, ``mask`` are ``[B, L]``."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    scores, teacher = check_inputs(scores, teacher, mask)
    target = masked_log_softmax(teacher / temperature, mask).exp()
    per_item = torch.where(mask, -target * masked_log_softmax(scores, mask), 0.0)
    return mean_over_groups(per_item.sum(dim=1), mask.any(dim=1))
