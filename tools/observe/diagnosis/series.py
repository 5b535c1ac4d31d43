"""Training-log numbers: a finite grad-norm blow-up or loss spike in a log that raised nothing.

The numbers come from the one metric extractor (tools/logs/metrics.py: its formats, its one
vocabulary of metric names) and spikes from its one rule (SPIKE_RULE: above 3x the rolling
median of the previous 20 finite values), read from the 3rd value on since a pasted
excerpt often shows only a few steps before the jump. For a diagnosis of a log without an error
the spike must also be strong: at least MIN_FACTOR times the median and, for grad norms, above
an absolute floor (tiny norms jumping are noise). A steady rise counts too: every logged value
above the one before for RISE_STEPS steps, ending RISE_FACTOR times where it started, or
RISE_ABOVE_FLOOR's smaller factor above its floor (a run that diverges smoothly never jumps at
once). A grad norm above ABSURD is an explosion whatever its trend. A short series (a pasted excerpt of a few
steps) climbs when its last value is SHORT_CLIMB times its first, or its grad norm stays SHORT_ORDERS times the
first step's. Only values before the metric's first non-finite one count (those are the nonfinite templates'
business). The message says which series and how many points it rests on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.text import Line
from rootcause.tools.observe.logs.metrics import MetricExtractor, MetricSeries, find_spikes

MIN_FACTOR = {"grad_norm": 20.0, "loss": 3.0}
FLOOR = {"grad_norm": 100.0, "loss": 0.0}
RISE_STEPS = 4
RISE_FACTOR = {"grad_norm": 10.0, "loss": 2.5}
# A smaller rise counts too once the grad norm is past a value no warm-up reaches: (factor, floor).
RISE_ABOVE_FLOOR = {"grad_norm": (5.0, 10.0)}
# A grad norm this large is no healthy run's, whatever its trend (clipping hides it from the loss for a while).
ABSURD = {"grad_norm": 1e6}
# A pasted excerpt of a few steps has no history for the spike rule: a climb over a short series counts when the
# last value is SHORT_CLIMB times the first, or (grad norms) every value after the first is SHORT_ORDERS times it.
SHORT_SERIES = 20
SHORT_MIN_POINTS = 3
SHORT_CLIMB = 4.0
SHORT_ORDERS = 100.0


# A training loss or grad norm under a framework's own name (NeMo's `reduced_train_loss`, `lm_loss`), never an
# evaluation's loss or the loss scale.
_ROLE = {"loss": re.compile(r"^(?!val|eval|valid|test|aux)(?:\w+_)?loss$", re.IGNORECASE),
         "grad_norm": re.compile(r"^(?:\w+_)?grad(?:ient)?_?norm$", re.IGNORECASE)}


def _explosion(name: str, message: str, at: Line | None) -> FoundError:
    """One identity per metric (`grad-norm-explosion`): a jump and a steady rise are one failure seen two ways."""
    index = at.index if at else 0
    return FoundError(type="GradientExplosion" if name == "grad_norm" else "LossSpike", message=message,
                      line=index, rank=at.rank if at else None, source="template", category="gradient_explosion",
                      template=f"{name.replace('_', '-')}-explosion", start=max(0, index - 3), end=index + 1,
                      evidence="metrics")


def _spikes(values: np.ndarray) -> Iterator[tuple[int, float, float]]:
    """(position, factor, median) of each spike by the one rule (rootcause.tools.observe.logs.metrics.find_spikes: above
    SPIKE_FACTOR x the median of the previous SPIKE_WINDOW values, from the SPIKE_MIN_HISTORY-th value on)."""
    for spike in find_spikes(np.arange(len(values)), values, "", None):
        yield spike.step, spike.factor, spike.median


def _rises(values: np.ndarray) -> Iterator[tuple[int, float, int]]:
    """(position, start value, steps risen) while a steady rise lasts RISE_STEPS or more steps."""
    rising = 0
    for i in range(1, len(values)):
        rising = rising + 1 if values[i] > values[i - 1] else 0
        if rising >= RISE_STEPS:
            yield i, float(values[i - rising]), rising


def find_series_failure(lines: list[Line]) -> FoundError | None:
    """What a log that raised nothing shows in its numbers: the first non-finite training loss or grad norm
    (nonfinite; a column table's `nan` names no metric on its line, so no template sees it), else the first strong
    spike or steady rise (gradient_explosion)."""
    extractor = MetricExtractor()
    for line in lines:
        if line.text.strip():
            extractor.feed(line.text, index=line.index, rank=line.rank)
    series = extractor.result()
    by_index = {line.index: line for line in lines}
    return _nonfinite(series, by_index) or _spike(series, by_index)


def _nonfinite(series: MetricSeries, by_index: dict[int, Line]) -> FoundError | None:
    """The first NaN / Inf of a series in a training loss's or grad norm's role, named as the NonFiniteLoss
    template names one read from a line (`nonfinite loss`, the series' own name as its site)."""
    found: tuple[tuple[int, int], str, str, float, int] | None = None
    for metric, pts in series.points.items():
        role = next((r for r, pattern in _ROLE.items() if pattern.search(metric)), None)
        bad = np.flatnonzero(~np.isfinite(pts.values)) if role else ()
        if not len(bad):
            continue
        i = int(bad[0])
        key = (int(pts.steps[i]), int(pts.lines[i]))
        if found is None or key < found[0]:
            found = (key, metric, role, float(pts.values[i]), i)
    if found is None:
        return None
    (step, index), metric, role, value, position = found
    at = by_index.get(index)
    return FoundError(type="NonFiniteLoss", message=f"from the {metric} series alone ({position + 1} points): "
                      f"{metric} {value:g} at step {step}", line=index, rank=at.rank if at else None,
                      source="template", category="nonfinite", template=f"nonfinite {role}", site=metric,
                      start=max(0, index - 3), end=index + 1, evidence="metrics")


def _spike(series: MetricSeries, by_index: dict[int, Line]) -> FoundError | None:
    """The first strong spike (or steady rise) of grad_norm, else loss, as a template error of category
    gradient_explosion."""
    for name in ("grad_norm", "loss"):
        pts = series.points.get(name) or next((series.points[n] for n in series.points if _ROLE[name].search(n)),
                                              None)
        if pts is None:
            continue
        bad = np.flatnonzero(~np.isfinite(pts.values))
        end = int(bad[0]) if len(bad) else len(pts)
        steps, values, where = pts.steps[:end], pts.values[:end], pts.lines[:end]
        found: list[tuple[int, str]] = []
        for i, factor, base in _spikes(values):
            if factor >= MIN_FACTOR[name] and values[i] > FLOOR[name]:
                found.append((int(where[i]), f"{name} {values[i]:g} at step {steps[i]} is {factor:.0f}x "
                              f"the median {base:g} of the previous values"))
                break
        absurd = np.flatnonzero(values >= ABSURD.get(name, np.inf))
        if len(absurd):
            i = int(absurd[0])
            found.append((int(where[i]), f"{name} {values[i]:g} at step {steps[i]} is beyond any healthy scale"))
        for i, start, risen in _rises(values):
            factor, floor = RISE_ABOVE_FLOOR.get(name, (np.inf, np.inf))
            if start > 0 and (values[i] >= RISE_FACTOR[name] * start or
                              (values[i] >= factor * start and values[i] >= floor)):
                found.append((int(where[i]), f"{name} rose {values[i] / start:.1f}x over {risen} logged "
                              f"steps ({start:g} to {values[i]:g})"))
                break
        found.extend(_short_climb(name, values, steps, where))
        if found:
            index, message = min(found)
            return _explosion(name, f"from the {name} series alone ({len(values)} points): {message}",
                              by_index.get(index))
    return None


def _short_climb(name: str, values: np.ndarray, steps: np.ndarray, where: np.ndarray) -> list[tuple[int, str]]:
    """A climb over a series too short for the spike rule (SHORT_SERIES points or fewer), stating the rule."""
    if not SHORT_MIN_POINTS <= len(values) <= SHORT_SERIES or values[0] <= 0:
        return []
    first, last = float(values[0]), float(values[-1])
    if last >= SHORT_CLIMB * first and last > FLOOR[name]:
        return [(int(where[-1]), f"{name} rose {last / first:.1f}x in {len(values)} points ({first:g} at step "
                                 f"{steps[0]} to {last:g} at step {steps[-1]}): a short series climbing "
                                 f"{SHORT_CLIMB:g}x or more")]
    low = float(values[1:].min())
    if name == "grad_norm" and low >= SHORT_ORDERS * first and low > FLOOR[name]:
        return [(int(where[1]), f"grad_norm stayed {low / first:.0f}x or more above the first "
                                f"step's {first:g} from step {steps[1]} on: two orders of magnitude above the first "
                                f"step")]
    return []
