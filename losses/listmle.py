"""ListMLE (Xia et al., 2008; allRank's ``listMLE``): the Plackett-Luce likelihood of the
label order.

Items of QG ``q`` sorted by label, best first (``pi``), give
``loss_q = sum_i [log sum_{j >= i} exp(s_pi(j)) - s_pi(i)]``, the negative log-probability that
a Plackett-Luce model with utilities ``s`` draws them in that order. Ties in label have no
order to learn: allRank breaks them at random, here they are ordered by the current scores
(best first, then input order), the likeliest of the tied orders, so a model is not pushed to
reorder items whose labels are equal, and the loss is deterministic. The batch loss is the mean
of ``loss_q`` over QGs with a relevant item. Example: scores ``[0, 0]``, labels ``[1, 0]`` give
``log 2 + 0 = 0.6931``.
"""

from __future__ import annotations

import torch

from scarce_ltr.losses.base import Loss, LossOptions
from scarce_ltr.losses.common import check_inputs, has_relevant, mean_over_groups

NAME = "listmle"


def listmle_loss(scores: torch.Tensor, labels: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """Scalar ListMLE loss of a batch; ``scores``, ``labels``, ``mask`` are ``[B, L]``."""
    scores, labels = check_inputs(scores, labels, mask)
    safe = torch.where(mask, scores, 0.0)
    # Stable sorts from the last key to the first: label desc, then score desc, then input order;
    # padding (label -inf) goes last.
    by_score = torch.sort(safe.detach(), dim=1, descending=True, stable=True).indices
    label_key = torch.where(mask, labels, float("-inf")).gather(1, by_score)
    by_label = torch.sort(label_key, dim=1, descending=True, stable=True).indices
    order = by_score.gather(1, by_label)
    s = safe.gather(1, order)
    real = mask.gather(1, order)
    # log sum_{j >= i} exp(s_j) by a reversed cumulative sum after subtracting the row maximum:
    # no -inf enters, so padding cannot produce NaN gradients.
    top = torch.where(real, s, float("-inf")).amax(dim=1, keepdim=True).detach()
    top = torch.where(real.any(dim=1, keepdim=True), top, 0.0)
    # exp of padding would overflow when every real score is very negative: select first.
    e = torch.where(real, torch.exp(torch.where(real, s - top, 0.0)), 0.0)
    tail = e.flip(1).cumsum(dim=1).flip(1)
    log_tail = torch.log(tail.clamp(min=torch.finfo(s.dtype).tiny)) + top
    per_item = torch.where(real, log_tail - s, 0.0)
    return mean_over_groups(per_item.sum(dim=1), has_relevant(labels, mask))


LOSS = Loss(NAME, LossOptions, listmle_loss)  # reads no key of the loss section
