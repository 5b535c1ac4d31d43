"""Metric yardsticks: a run that exits 0 is bad when the numbers it printed say so.

Two forms, taken by every tool that runs a command (RunFields `metric` and `reference`):
- `metric`: `<name> <op> <number>` with op `< <= > >= ==`, optionally followed by `at step N`. The
  condition describes BAD: judged at the series' last value (or at step N), the run fails when it holds.
- `reference`: `{log, metric, rtol}`: the run is bad from the first step where its series of `metric`
  leaves the reference log's by more than rtol (|run - ref| > rtol * |ref|), compared at the steps
  both logs print.

Values come from the one metric extractor (`scan_metrics(..., keep=[name])`: names go through
metric_names.yaml, so `val_accuracy` and `Acc@1` are read as val_acc and top1). Steps are the ones the
log prints (or one per metric line when it prints none); lines are 1-based lines of the run's log.
Each run gets one `MetricReading`: the value read, its step, its line and whether the condition holds
(None: the output lacks the metric, the step, or any step of the reference, so the run is inconclusive).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, Field
from rootcause.tools.core.errors import UsageError
from rootcause.tools.observe.logs.metric_formats import NUM
from rootcause.tools.observe.logs.metrics import MetricSeries, Points, canonical, scan_metrics

if TYPE_CHECKING:
    from rootcause.tools.core.workspace import Workspace

Op = Literal["<", "<=", ">", ">=", "=="]
OPS: dict[str, Callable[[float, float], bool]] = {"<": operator.lt, "<=": operator.le, ">": operator.gt,
                                                  ">=": operator.ge, "==": operator.eq}
MAX_CONDITION = 200
_FORM = "`<name> <op> <number>` with op one of < <= > >= ==, e.g. \"val_acc < 0.85\" or \"loss > 2.0 at step 100\""
_CONDITION = re.compile(r"^\s*(?P<name>[A-Za-z_][\w./@-]*(?: [A-Za-z_][\w./@-]*)*?)\s*(?P<op>[<>=!]+)\s*"
                        r"(?P<num>\S+)(?:\s+at\s+step\s+(?P<step>\S+))?\s*$", re.IGNORECASE)
_NUMBER = re.compile(rf"^{NUM}$", re.IGNORECASE)
_TEXT_LIMIT = 200


class Reference(BaseModel):
    """A reference run's log: the run is bad from the first step where its series leaves the reference's."""

    log: str = Field(description="The reference run's log, a file inside the root.")
    metric: str = Field(description="The metric both logs print, e.g. loss.")
    rtol: float = Field(0.01, description="The largest relative difference |run - ref| / |ref| that still "
                                          "matches, e.g. 0.01.")


class Condition(BaseModel):
    """A parsed `metric` argument."""

    text: str = Field(description="The condition as given.")
    metric: str = Field(description="The metric's name as the vocabulary knows it.")
    op: Op
    threshold: float
    step: int | None = None

    def describe(self) -> str:
        at = f" at step {self.step}" if self.step is not None else ""
        return f"{self.metric} {self.op} {self.threshold:g}{at}"


class ReferenceSeries(BaseModel):
    """A reference argument, validated: the reference log's series of its metric."""

    log: str = Field(description="The reference log, relative to the root.")
    metric: str
    rtol: float
    steps: list[int]
    values: list[float]

    def describe(self) -> str:
        return f"{self.metric} within rtol {self.rtol:g} of {self.log}"


class MetricYardstick(BaseModel):
    """What makes a run bad by its numbers: a condition, a reference, or both (either finding makes it bad)."""

    condition: Condition | None = None
    reference: ReferenceSeries | None = None

    def names(self) -> list[str]:
        return list(dict.fromkeys([*([self.condition.metric] if self.condition else []),
                                   *([self.reference.metric] if self.reference else [])]))

    def describe(self) -> str:
        ref = self.reference
        parts = [*([f"metric {self.condition.describe()}"] if self.condition else []),
                 *([f"reference {ref.log} ({ref.metric}, rtol {ref.rtol:g})"] if ref else [])]
        return " or ".join(parts)


class MetricReading(BaseModel):
    """One run read against the metric yardstick: the value read, where, and the verdict."""

    kind: Literal["metric", "reference"]
    metric: str
    condition: str = Field(description="What was judged: 'val_acc < 0.85', 'loss within rtol 0.01 of ref.log'.")
    holds: bool | None = Field(description="True: the run is bad by its numbers; False: it is not; null: the "
                                           "output cannot say (the metric, the step or a common step is missing).")
    value: float | None = Field(None, description="The value read (for a reference: the first departing one, else "
                                                  "the closest to departing).")
    step: int | None = None
    line: int | None = Field(None, description="Its 1-based line in the run's log.")
    text: str | None = Field(None, description="That log line.")
    reference_value: float | None = Field(None, description="The reference log's value at that step.")
    reason: str = Field(description="'val_acc 0.744 at step 100 (line 412) < 0.85', or why it cannot judge.")

    def brief(self) -> str:
        """'val_acc 0.744 at step 30' (the first departing value for a reference), or 'no val_acc'."""
        if self.value is None:
            return f"no {self.metric}"
        return f"{self.metric} {_num(self.value)} at step {self.step}"


# ---------------------------------------------------------------- validation (where the arguments enter)


def parse_condition(text: str) -> Condition:
    """A `metric` argument -> Condition; UsageError naming the argument and the form otherwise."""
    raw = text.strip()
    if not raw:
        raise UsageError("metric is empty.", f"give {_FORM}, or omit metric")
    if len(raw) > MAX_CONDITION:
        raise UsageError(f"metric is {len(raw)} characters, over {MAX_CONDITION}.", f"give {_FORM}")
    m = _CONDITION.match(raw)
    if not m:
        raise UsageError(f"metric {raw!r} is not a condition.", f"write {_FORM}")
    op, number, step = m.group("op"), m.group("num"), m.group("step")
    if op not in OPS:
        raise UsageError(f"metric {raw!r}: unknown comparison {op!r}.", "use one of < <= > >= ==, e.g. "
                                                                         "\"val_acc < 0.85\"")
    if not _NUMBER.match(number) or math.isnan(float(number)):
        raise UsageError(f"metric {raw!r}: {number!r} is not a number.", f"write {_FORM}")
    if step is not None and not step.isdigit():
        raise UsageError(f"metric {raw!r}: step {step!r} is not a whole number.", "write e.g. \"loss > 2.0 at "
                                                                                   "step 100\"")
    return Condition(text=raw, metric=canonical(m.group("name")), op=op, threshold=float(number),  # type: ignore[arg-type]
                     step=int(step) if step is not None else None)


def load_reference(reference: Reference, workspace: Workspace) -> ReferenceSeries:
    """A `reference` argument -> the reference log's series; UsageError for a missing log or metric, rtol <= 0."""
    if not isinstance(reference.rtol, int | float) or not math.isfinite(reference.rtol) or reference.rtol <= 0:
        raise UsageError(f"reference.rtol must be a finite number > 0, got {reference.rtol}.",
                         "give a relative tolerance such as 0.01 (1%)")
    if not reference.metric.strip():
        raise UsageError("reference.metric is empty.", "name the metric both logs print, e.g. \"loss\"")
    path = workspace.resolve(reference.log, what="reference.log")
    if not path.is_file():
        raise UsageError(f"reference.log {reference.log!r} is not a file under {workspace.root}.",
                         "give the log of the reference run (e.g. the uninterrupted run's output), inside the root")
    name = canonical(reference.metric)
    series = scan_metrics(path, keep=[name])
    points = series.points.get(name)
    if points is None or not len(points):
        found = ", ".join(series.metrics()[:8]) or "none"
        raise UsageError(f"reference.log {reference.log!r} shows no {name} values (metrics read there: {found}).",
                         "name a metric the reference log prints per step, e.g. \"loss\"")
    return ReferenceSeries(log=workspace.relative(path), metric=name, rtol=float(reference.rtol),
                           steps=[int(s) for s in points.steps], values=[float(v) for v in points.values])


def metric_yardstick(metric: str | None, reference: Reference | None,
                     workspace: Workspace) -> MetricYardstick | None:
    """The run's metric yardstick from its `metric` and `reference` arguments (None when neither is given)."""
    if metric is None and reference is None:
        return None
    return MetricYardstick(condition=parse_condition(metric) if metric is not None else None,
                           reference=load_reference(reference, workspace) if reference is not None else None)


# ---------------------------------------------------------------- reading a run


def _num(value: float) -> str:
    return "NaN" if math.isnan(value) else f"{value:g}"


def _line_text(log: Path | None, output: str, line: int) -> str | None:
    """The 1-based line of the run's log (or of its output held in memory)."""
    try:
        if log is not None and log.is_file():
            with open(log, encoding="utf-8", errors="replace", newline="\n") as fh:
                found = next(islice(fh, line - 1, None), None)
        else:
            found = next(islice(output.splitlines(), line - 1, None), None)
    except OSError:
        return None
    return found.rstrip("\r\n").strip()[-_TEXT_LIMIT:] if found is not None else None


def _missing(series: MetricSeries, name: str) -> str:
    found = ", ".join(series.metrics()[:8])
    return f"the output shows no {name}" + (f" (metrics read: {found})" if found else " (no metric lines)")


def _read_condition(cond: Condition, series: MetricSeries, log: Path | None, output: str) -> MetricReading:
    reading = MetricReading(kind="metric", metric=cond.metric, condition=cond.describe(), holds=None, reason="")
    points = series.points.get(cond.metric)
    if points is None or not len(points):
        reading.reason = _missing(series, cond.metric)
        return reading
    if cond.step is None:
        index = len(points) - 1
    else:
        at = np.flatnonzero(points.steps == cond.step)
        if not len(at):
            reading.reason = (f"no {cond.metric} at step {cond.step} (its steps: {int(points.steps[0])}.."
                              f"{int(points.steps[-1])})")
            return reading
        index = int(at[0])
    value, step, line = float(points.values[index]), int(points.steps[index]), int(points.lines[index]) + 1
    reading.value, reading.step, reading.line = value, step, line
    reading.text = _line_text(log, output, line)
    where = f"{cond.metric} {_num(value)} at step {step} (line {line})"
    if math.isnan(value):  # a NaN accuracy or loss is never a good value, whichever way the condition points
        reading.holds, reading.reason = True, f"{where} is not a number"
    elif OPS[cond.op](value, cond.threshold):
        reading.holds, reading.reason = True, f"{where} {cond.op} {cond.threshold:g}"
    else:
        reading.holds, reading.reason = False, f"{where}, not {cond.op} {cond.threshold:g}"
    return reading


def _departures(run: Points, ref: ReferenceSeries) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(common steps, run indices, reference values, relative differences) at the steps both logs print."""
    ref_steps = np.asarray(ref.steps, dtype=np.int64)
    common, run_at, ref_at = np.intersect1d(run.steps, ref_steps, return_indices=True)
    a, b = run.values[run_at], np.asarray(ref.values, dtype=np.float64)[ref_at]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(a - b) / np.abs(b)
    both_nan = np.isnan(a) & np.isnan(b)
    same = (a == b) | both_nan  # equal (zeros and infinities included) is no departure
    rel = np.where(same, 0.0, np.where(np.isnan(rel), np.inf, rel))
    return common, run_at, b, rel


def _read_reference(ref: ReferenceSeries, series: MetricSeries, log: Path | None, output: str) -> MetricReading:
    reading = MetricReading(kind="reference", metric=ref.metric, condition=ref.describe(), holds=None, reason="")
    points = series.points.get(ref.metric)
    if points is None or not len(points):
        reading.reason = _missing(series, ref.metric)
        return reading
    common, run_at, ref_values, rel = _departures(points, ref)
    if not len(common):
        reading.reason = (f"no step of the run's {ref.metric} ({int(points.steps[0])}..{int(points.steps[-1])}) "
                          f"is in {ref.log} ({ref.steps[0]}..{ref.steps[-1]})")
        return reading
    over = np.flatnonzero(rel > ref.rtol)
    if not len(over):
        worst = int(np.argmax(rel)) if rel.max() > 0 else len(common) - 1  # the closest call, else the last step
        index = int(run_at[worst])
        reading.value, reading.step, reading.line = float(points.values[index]), int(common[worst]), \
            int(points.lines[index]) + 1
        reading.reference_value, reading.text = float(ref_values[worst]), _line_text(log, output, reading.line)
        reading.holds = False
        closest = "equal at every one" if rel[worst] == 0 else \
            f"largest difference {rel[worst]:.3%} at step {int(common[worst])}"
        reading.reason = (f"{ref.metric} stays within rtol {ref.rtol:g} of {ref.log} at all {len(common)} steps both "
                          f"print ({closest})")
        if int(points.steps[-1]) < ref.steps[-1]:
            reading.reason += f"; the run stops at step {int(points.steps[-1])}, the reference at {ref.steps[-1]}"
        return reading
    first = int(over[0])
    index = int(run_at[first])
    value, step, line = float(points.values[index]), int(common[first]), int(points.lines[index]) + 1
    reading.holds, reading.value, reading.step, reading.line = True, value, step, line
    reading.reference_value = float(ref_values[first])
    reading.text = _line_text(log, output, line)
    by = "" if math.isinf(rel[first]) else f" by {rel[first]:.3g}x" if rel[first] >= 10 else f" by {rel[first]:.2%}"
    reading.reason = (f"{ref.metric} {_num(value)} at step {step} (line {line}) leaves {ref.log}'s "
                      f"{_num(reading.reference_value)}{by} > rtol {ref.rtol:g}"
                      + (f" (the first of {len(over)} departing steps)" if len(over) > 1 else ""))
    return reading


def read_run(stick: MetricYardstick, log: Path | None, output: str,
             series: MetricSeries | None = None) -> MetricReading:
    """The run's reading: its log (or output) scanned once for the yardstick's metrics.

    With both a condition and a reference, the one that finds the run bad is reported, else the one that
    cannot judge it, else the condition's."""
    if series is None:
        series = scan_metrics(log, keep=stick.names()) if log is not None and log.is_file() \
            else scan_metrics(output, keep=stick.names())
    readings = [*([_read_condition(stick.condition, series, log, output)] if stick.condition else []),
                *([_read_reference(stick.reference, series, log, output)] if stick.reference else [])]
    for wanted in (True, None):
        for reading in readings:
            if reading.holds is wanted:
                return reading
    return readings[0]


__all__ = ["OPS", "Condition", "MetricReading", "MetricYardstick", "Reference", "ReferenceSeries", "load_reference",
           "metric_yardstick", "parse_condition", "read_run"]
