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


def divergence(a: Points, b: Points, metric: str, rtol: float) -> DivergenceFound:
    common, ia, ib = np.intersect1d(a.steps, b.steps, assume_unique=True, return_indices=True)
    if not len(common):
        return DivergenceFound(metric, 0, None, None, None, None, None)
    diff = relative_difference(a.values[ia], b.values[ib])
    over = np.flatnonzero(diff > rtol)
    finite = diff[np.isfinite(diff)]
    worst = float(finite.max()) if len(finite) else 0.0
    if not len(over):
        return DivergenceFound(metric, len(common), None, None, None, None, worst)
    i = int(over[0])
    return DivergenceFound(metric, len(common), int(common[i]), float(a.values[ia[i]]), float(b.values[ib[i]]),
                           float(diff[i]), worst)


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
    keep = np.isfinite(lr.values) & ((lr.steps <= end_step) if end_step is not None else True)
    steps, values = lr.steps[keep], lr.values[keep]
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
