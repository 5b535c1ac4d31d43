"""Judgements over metric series read by tools/logs/metrics.py: divergence of two runs, the lr's course.

The spike rule lives with the extractor (rootcause.tools.observe.logs.metrics.SPIKE_RULE, one rule for every tool).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rootcause.tools.observe.logs.metrics import Points

# bf16 keeps 8 significant bits: machine epsilon 2^-7 ~ 0.0078. Two runs that differ only in reduction
# order (1 GPU vs 8) drift by a few roundings of the loss; 2.5 epsilons separates that noise from a real change.
DEFAULT_RTOL = 0.02
RTOL_RULE = ("relative difference |a-b| / max(|a|, |b|) above rtol at a step both logs report; a value that is "
             "finite in one log and not in the other also diverges. Default rtol 0.02: about 2.5x bf16 machine "
             "epsilon (2^-7), above the reduction-order noise of bf16 runs on different GPU counts")
EARLY_FRACTION = 0.1
LR_RULE = (f"the lr's early maximum is its largest value over the first {EARLY_FRACTION:.0%} of the logged steps "
           "up to the first non-finite step (else the end); reported when the lr at that point is above it, and "
           "said to be still rising when it is the largest so far and above its value 10% of the points earlier")


@dataclass
class DivergenceFound:
    metric: str
    compared_steps: int
    first_step: int | None
    value: float | None
    reference_value: float | None
    relative_difference: float | None
    max_relative_difference: float | None


def relative_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise; 0 where both are the same non-finite value, inf where only one is finite."""
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.maximum(np.abs(a), np.abs(b))
        diff = np.where(scale == 0, 0.0, np.abs(a - b) / scale)
    finite_a, finite_b = np.isfinite(a), np.isfinite(b)
    same_nonfinite = (~finite_a & ~finite_b) & ((np.isnan(a) & np.isnan(b)) | (a == b))
    diff = np.where(finite_a & finite_b, diff, np.where(same_nonfinite, 0.0, np.inf))
    return diff


BLOCK = 1 << 18
"""Steps compared per block (the temporaries of a block stay a few MB however long the runs are)."""


def divergence(a: Points, b: Points, metric: str, rtol: float) -> DivergenceFound:
    """The first step both series print where they differ beyond rtol; both series' steps are sorted and unique."""
    compared, worst = 0, 0.0
    first: DivergenceFound | None = None
    for start in range(0, len(a), BLOCK):
        steps = a.steps[start:start + BLOCK]
        at = np.minimum(np.searchsorted(b.steps, steps), len(b) - 1) if len(b) else np.zeros(0, np.int64)
        both = np.flatnonzero(b.steps[at] == steps) if len(b) else np.zeros(0, np.int64)
        if not len(both):
            continue
        ia, ib = both + start, at[both]
        diff = relative_difference(a.values[ia], b.values[ib])
        compared += len(both)
        finite = diff[np.isfinite(diff)]
        if len(finite):
            worst = max(worst, float(finite.max()))
        over = np.flatnonzero(diff > rtol)
        if first is None and len(over):
            i = int(over[0])
            first = DivergenceFound(metric, 0, int(a.steps[ia[i]]), float(a.values[ia[i]]), float(b.values[ib[i]]),
                                    float(diff[i]), None)
    if not compared:
        return DivergenceFound(metric, 0, None, None, None, None, None)
    if first is None:
        return DivergenceFound(metric, compared, None, None, None, None, worst)
    first.compared_steps, first.max_relative_difference = compared, worst
    return first


@dataclass
class LrCourse:
    early_max: float
    early_until_step: int
    at_step: int
    value: float
    ratio: float
    rising: bool
    at_nonfinite: bool


def lr_course(lr: Points, end_step: int | None) -> LrCourse | None:
    """The lr up to the first non-finite step (else the end) against its early maximum; None when unremarkable."""
    end = len(lr) if end_step is None else int(np.searchsorted(lr.steps, end_step, side="right"))
    steps, values = lr.steps[:end], lr.values[:end]  # views: an lr of millions of steps is not copied
    finite = np.isfinite(values)
    if not finite.all():
        steps, values = steps[finite], values[finite]
    if len(values) < 5:
        return None
    early = max(1, math.ceil(EARLY_FRACTION * len(values)))
    early_max = float(values[:early].max())
    value = float(values[-1])
    back = float(values[-1 - max(1, early)]) if len(values) > early else float(values[0])
    rising = value >= float(values.max()) and value > back
    if not (early_max > 0 and value > early_max * (1 + 1e-9)):
        return None
    return LrCourse(early_max=early_max, early_until_step=int(steps[early - 1]), at_step=int(steps[-1]), value=value,
                    ratio=value / early_max if early_max > 0 else math.inf, rising=rising,
                    at_nonfinite=end_step is not None)
