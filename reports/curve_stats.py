"""The report's readings of one learning curve (a data set's groups along the label settings of a
series, `reports.stats.summarize`'s ``groups``): where pretrained DL stops beating the best other
group (`crossover`), what pretraining adds over the same networks from scratch
(`pretraining_gain`) and who wins each setting, claimed only where it is clear (`verdicts`);
each step a paired comparison over the units both groups have (`paired_step`).
"""

from __future__ import annotations

import math
from collections import defaultdict

from scarce_ltr.reports.stats import CHALLENGER_GROUP, SCRATCH_GROUP, by_unit, paired_greater


def crossover(groups: list[dict], *, dataset: str, series: str, metric: str) -> dict:
    """Where pretrained DL stops beating the best other group along one curve.

    ``metric`` is ``test_mean`` or ``outlier_mean``. At each x the pretrained-DL group meets the
    other group with the highest mean, by its paired margin over their shared (fold, seed) units
    (the means where they share none). Returns ``{"status", "wins", "paired", "x_line",
    "last_win", "first_loss"}`` (``paired``: per x, ``against``, ``margin``, its ``std``, ``n``
    pairs and the one-sided paired ``p`` in the direction of the margin), where status is
    ``crossover`` (wins up to ``last_win``, loses at ``first_loss``; ``x_line`` their geometric
    mean), ``always`` (wins at every x), ``never`` (loses at the lowest x) or ``n/a`` (no
    pretrained-DL group or no other group to beat)."""
    curve = _curve(groups, dataset, series, metric)
    wins, paired = [], []
    for x in sorted(curve):
        others = [g for name, g in curve[x].items() if name != CHALLENGER_GROUP]
        if CHALLENGER_GROUP not in curve[x] or not others:
            continue
        challenger, best = curve[x][CHALLENGER_GROUP], max(others, key=lambda g: g[metric])
        step = paired_step(challenger, best, metric)
        wins.append((x, step["margin"] > 0))
        paired.append({"x": x, "against": best["group"]} | step)
    result = {
        "status": "n/a",
        "wins": wins,
        "paired": paired,
        "x_line": None,
        "last_win": None,
        "first_loss": None,
    }
    if not wins:
        return result
    losses = [i for i, (_, won) in enumerate(wins) if not won]
    if not losses:
        return result | {"status": "always"}
    first = losses[0]
    if first == 0:
        return result | {"status": "never", "first_loss": wins[0][0]}
    last_win, first_loss = wins[first - 1][0], wins[first][0]
    return result | {
        "status": "crossover",
        "last_win": last_win,
        "first_loss": first_loss,
        "x_line": math.sqrt(last_win * first_loss) if last_win > 0 else first_loss,
    }


def _curve(groups: list[dict], dataset: str, series: str, metric: str) -> dict:
    """``{x: {group: entry}}`` of one curve, the entries with a finite ``metric``."""
    curve: dict[float, dict[str, dict]] = defaultdict(dict)
    for g in groups:
        if g["dataset"] == dataset and g["series"] == series and math.isfinite(g[metric]):
            curve[g["x"]][g["group"]] = g
    return curve


def paired_step(a: dict, b: dict, metric: str) -> dict:
    """Group entry ``a`` against ``b`` on ``metric`` (``test_mean`` or ``outlier_mean``):
    ``margin``, its ``std`` and ``n`` pairs over the units both have, and the one-sided paired
    ``p`` in the direction of the margin; where they share no unit, the means' difference."""
    per_unit = metric.removesuffix("_mean")  # test | outlier: the per-unit list
    margin, std, n, p_win = paired_greater(by_unit(a, per_unit), by_unit(b, per_unit))
    if n == 0:
        margin = a[metric] - b[metric]
    p_loss = paired_greater(by_unit(b, per_unit), by_unit(a, per_unit))[3]
    return {"margin": margin, "std": std, "n": n, "p": p_win if margin > 0 else p_loss}


def pretraining_gain(groups: list[dict], *, dataset: str, series: str, metric: str) -> list[dict]:
    """Per x of one curve where both DL groups ran: the pretrained-DL member against the
    no-pretrain-DL member (`paired_step` on ``metric``, plus ``x``, ``setting``, ``member``,
    ``against``)."""
    curve = _curve(groups, dataset, series, metric)
    steps = []
    for x in sorted(curve):
        pretrained, scratch = curve[x].get(CHALLENGER_GROUP), curve[x].get(SCRATCH_GROUP)
        if pretrained is None or scratch is None:
            continue
        step = {"x": x, "setting": pretrained["setting"], "member": pretrained["member"]}
        step["against"] = scratch["member"]
        steps.append(step | paired_step(pretrained, scratch, metric))
    return steps


def verdicts(
    groups: list[dict], *, dataset: str, series: str, alpha: float, metric: str = "test_mean"
) -> list[dict]:
    """Per label setting of one curve, who wins on ``metric``, claimed only where it is clear.

    A group wins a setting when its paired margin (`paired_step`, over the units both have) is
    positive against every other group of the setting with a one-sided paired p below ``alpha``
    each; the comparison reported is its weakest one (the largest p). Otherwise there is no
    clear winner, and the comparison reported is the group with the highest mean against the
    next one. Returns per setting ``{"setting", "x", "status", "leader", "against", "margin",
    "p", "n"}`` with status ``win``, ``none`` (no clear winner) or ``alone`` (one group ran).
    Example: at 2% the pretrained DL leads the GBDT by +0.06 with p = 0.15 over n = 3 units:
    ``none``; at 50% the GBDT leads both others with p = 0.01 and 0.03: ``win``, against the
    one with p = 0.03.
    """
    curve = _curve(groups, dataset, series, metric)
    out = []
    for x in sorted(curve):
        ranked = sorted(curve[x].values(), key=lambda g: (-g[metric], g["group"]))
        head = {"setting": ranked[0]["setting"], "x": x, "leader": ranked[0]["group"]}
        if len(ranked) == 1:
            out.append(head | {"status": "alone", "against": None} | _NO_STEP)
            continue
        out.append(head | _verdict(ranked, metric, alpha))
    return out


_NO_STEP = {"margin": math.nan, "p": math.nan, "n": 0}


def _verdict(ranked: list[dict], metric: str, alpha: float) -> dict:
    """``ranked``: a setting's groups, highest mean first (see `verdicts`)."""
    for candidate in ranked:
        steps = [
            {"against": other["group"]} | paired_step(candidate, other, metric)
            for other in ranked
            if other is not candidate
        ]
        clear = all(s["n"] >= 2 and s["margin"] > 0 and s["p"] < alpha for s in steps)
        if clear:
            weakest = max(steps, key=lambda s: s["p"])
            return {"status": "win", "leader": candidate["group"]} | weakest
    step = paired_step(ranked[0], ranked[1], metric)
    return {"status": "none", "against": ranked[1]["group"]} | step
