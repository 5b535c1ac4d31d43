"""analyze_training_log: loss / grad_norm / lr series from a training log, NaN onset, spikes, lr, divergence, plot."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field, PrivateAttr
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.numerics.series import DEFAULT_RTOL, LR_RULE, RTOL_RULE, divergence, lr_course
from rootcause.tools.observe.logs import metrics
from rootcause.tools.observe.logs.metrics import RECOGNISED, SPIKE_RULE, MetricSeries, Points, Stats, scan_metrics

MAX_OTHER_SERIES = 20
MAX_SPIKES = 50
BEFORE_NONFINITE = 20
"""Spikes within this many logged steps before the first non-finite value are the ones that lead up to it."""


class AnalyzeTrainingLogInput(BaseModel):
    """Analyze a training log: loss / grad_norm / lr by step, the first NaN/Inf step, spikes, lr, divergence.

    Series are keyed by step (the record number when the log prints none); spikes are loss or
    grad-norm jumps against a rolling median; the text says how the run ends (trailing NaNs), the
    largest spike, the spikes just before the first non-finite value and an lr that climbs past its
    early maximum; with compare_to, the first step where two runs diverge beyond rtol; with
    plot=true, a PNG of the curves.

    Reads the formats trainers print (key=value, key: value, key value, `| key value |` columns,
    JSON lines, HF Trainer dicts, tqdm / Lightning postfixes, CSV / TSV metric files), one rank of
    a multi-rank log, streaming, so logs of any size work.
    """

    path: str = Field(description="The training log (relative to the root or absolute inside it).")
    compare_to: str | None = Field(None, description="A second run's log (the reference) to find the first "
                                                     "divergent step against.")
    rtol: float | None = Field(None, description=f"Relative tolerance for divergence; default {DEFAULT_RTOL} "
                                                 "(chosen for bf16, stated in the result).")
    plot: bool = Field(False, description="Also draw loss, grad norm and lr against step into a PNG under "
                                          ".rootcause/plots/ (returned as an image).")
    session_id: str | None = Field(None, description="Append the findings to this session as evidence.")


class SeriesSummary(BaseModel):
    count: int
    nonfinite: int
    first_step: int
    last_step: int
    min: float | None = Field(description="Smallest finite value.")
    max: float | None = Field(description="Largest finite value.")
    first: float | None = Field(description="First finite value.")
    last: float | None = Field(description="Last finite value.")
    final: float | str | None = Field(None, description="The value at the last step, as printed ('nan' included).")
    trailing_nonfinite: int = Field(0, description="How many values at the end of the series are NaN / Inf.")
    trailing_from_step: int | None = Field(None, description="Where that non-finite tail starts.")
    last_finite_step: int | None = None
    first_nonfinite_step: int | None = None


class Spike(BaseModel):
    step: int
    metric: str
    value: float
    factor: float = Field(description="value / rolling median.")
    median: float
    line: int | None = Field(None, description="1-based line of the log.")


class NonFiniteAt(BaseModel):
    step: int
    metric: str
    value: str
    line: int | None = Field(None, description="1-based line of the log.")


class LrFinding(BaseModel):
    early_max: float = Field(description="The largest lr over the first 10% of the logged steps.")
    early_until_step: int
    step: int = Field(description="The step the lr is judged at: the first non-finite step, else the last.")
    value: float
    ratio: float = Field(description="value / early_max.")
    still_rising: bool
    at_first_nonfinite: bool
    rule: str = LR_RULE


class Divergence(BaseModel):
    metric: str
    compared_steps: int
    first_divergent_step: int | None
    value: float | str | None = None
    reference_value: float | str | None = None
    relative_difference: float | str | None = None
    max_relative_difference: float | None = None


class AnalyzeTrainingLogResult(ToolResult):
    path: str
    formats: dict[str, int] = Field(description="Records found per line format.")
    lines: int
    steps: int
    step_source: str = Field(description="explicit (the log prints steps), inferred (one step per record), or mixed.")
    ranks: list[str] = Field(description="Rank prefixes seen; 'none' for unprefixed lines.")
    rank_used: str
    rank_rule: str = metrics.RANK_RULE
    series: dict[str, SeriesSummary] = Field(description="loss, grad_norm, lr first, then other metrics.")
    other_series_omitted: int = 0
    first_nonfinite_step: int | None
    first_nonfinite: NonFiniteAt | None = None
    spikes: list[Spike] = Field(description=f"The first {MAX_SPIKES} spikes in step order.")
    spike_count: int
    spike_rule: str
    largest_spike: Spike | None = None
    spikes_before_nonfinite: list[Spike] = Field(
        default_factory=list, description=f"Spikes within the {BEFORE_NONFINITE} logged steps before the first "
                                          "non-finite value.")
    lr: LrFinding | None = Field(None, description="Set when the lr climbs above its early maximum.")
    compare_to: str | None = None
    rtol: float | None = None
    rtol_rule: str | None = None
    first_divergent_step: int | None = None
    divergence: list[Divergence] = Field(default_factory=list)
    series_path: str = Field(description="Every series point as JSON ({metric: [[step, value], ...]}).")
    plot_path: str | None = Field(None, description="The PNG drawn with plot=true.")
    notes: list[str] = Field(default_factory=list)
    _plot_file: Path | None = PrivateAttr(None)

    def images(self) -> list[Path]:
        return [self._plot_file] if self._plot_file is not None else []

    def summary(self) -> str:
        fmt = ", ".join(f"{k} {v}" for k, v in sorted(self.formats.items(), key=lambda kv: -kv[1]))
        lines = [f"{self.path}: {self.steps} steps ({self.step_source}), formats: {fmt}; rank used: {self.rank_used}."]
        lines += [_series_line(name, s) for name in RECOGNISED if (s := self.series.get(name))]
        if self.first_nonfinite:
            f = self.first_nonfinite
            lines.append(f"FIRST NON-FINITE at step {f.step}: {f.metric} = {f.value}"
                         + (f" (line {f.line})." if f.line else "."))
        else:
            lines.append("No non-finite values.")
        if self.largest_spike:
            lines.append(f"Largest spike: {_spike(self.largest_spike)}; {self.spike_count} spike(s) in all "
                         f"(rule: 3x the rolling median of the previous 20 values).")
        else:
            lines.append("No spikes.")
        if self.first_nonfinite and self.spike_count:
            before = self.spikes_before_nonfinite
            near = "; ".join(_spike(s) for s in before[-6:]) or "none"
            count = f"{len(before)}, the last 6" if len(before) > 6 else f"{len(before)}" if before else "0"
            lines.append(f"Spikes in the {BEFORE_NONFINITE} logged steps before step {self.first_nonfinite.step} "
                         f"({count}): {near}.")
        if self.lr:
            lines.append(_lr_line(self.lr))
        if self.compare_to:
            if self.first_divergent_step is not None:
                d = next(d for d in self.divergence if d.first_divergent_step == self.first_divergent_step)
                lines.append(f"Against {self.compare_to}: FIRST DIVERGENT STEP {d.first_divergent_step} ({d.metric} "
                             f"{_num(d.value)} vs {_num(d.reference_value)}, relative difference "
                             f"{_num(d.relative_difference)} > rtol {self.rtol}).")
            else:
                compared = max((d.compared_steps for d in self.divergence), default=0)
                lines.append(f"Against {self.compare_to}: no divergence above rtol {self.rtol} over {compared} "
                             "common steps.")
        if self.plot_path:
            lines.append(f"Plot: {self.plot_path}")
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


def _series_line(name: str, s: SeriesSummary) -> str:
    head = f"{name}: {s.count} points, steps {s.first_step}-{s.last_step}, first {_num(s.first)}"
    if s.trailing_nonfinite == s.count:
        return f"{head.replace(', first -', '')}, every value non-finite (last {_num(s.final)})"
    if s.trailing_nonfinite:
        tail = "the last value is" if s.trailing_nonfinite == 1 else f"the last {s.trailing_nonfinite} values are"
        return (f"{head}, range {_num(s.min)}..{_num(s.max)}; ENDS NON-FINITE: {tail} NaN/Inf, from step "
                f"{s.trailing_from_step} (last finite {_num(s.last)} at step {s.last_finite_step}, final "
                f"{_num(s.final)})")
    tail = f", {s.nonfinite} non-finite" if s.nonfinite else ""
    return f"{head}, last {_num(s.last)}, range {_num(s.min)}..{_num(s.max)}{tail}"


def _spike(s: Spike) -> str:
    return f"step {s.step} {s.metric} {_num(s.value)} ({s.factor:.4g}x median {_num(s.median)})"


def _lr_line(lr: LrFinding) -> str:
    where = f"the first non-finite step {lr.step}" if lr.at_first_nonfinite else f"the last step {lr.step}"
    course = "is still rising at" if lr.still_rising else "ends above it at"
    return (f"lr rises to {_num(lr.value)}, {lr.ratio:.1f}x its early maximum {_num(lr.early_max)} (steps up to "
            f"{lr.early_until_step}), and {course} {where}: an uncapped or too long warm-up?")


def _num(value: float | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:.6g}"


def _json_value(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _summary(s: Stats) -> SeriesSummary:
    return SeriesSummary(count=s.count, nonfinite=s.nonfinite, first_step=s.first_step, last_step=s.last_step,
                         min=s.min, max=s.max, first=s.first, last=s.last,
                         final=None if s.final is None else _json_value(s.final),
                         trailing_nonfinite=s.trailing_nonfinite, trailing_from_step=s.trailing_from_step,
                         last_finite_step=s.last_finite_step, first_nonfinite_step=s.first_nonfinite_step)


def _spike_model(s: metrics.Spike) -> Spike:
    return Spike(step=s.step, metric=s.metric, value=s.value, factor=round(s.factor, 3), median=s.median,
                 line=None if s.line is None else s.line + 1)


def _reading_notes(series: MetricSeries) -> list[str]:
    """What the reading left out or cut, in words (empty when every line was read whole)."""
    notes = []
    cut = series.cuts.note()
    if cut:
        notes.append(cut)
    if series.repeated:
        repeated = ", ".join(f"{n:,} of {m}" for m, n in series.repeated.items())
        notes.append(f"steps printed more than once (a resumed run?): the first value printed for a step is kept, "
                     f"the later ones left out ({repeated})")
    if series.metrics_dropped:
        notes.append(f"the log names more than {metrics.MAX_METRICS} metrics: {series.metrics_dropped:,} values of "
                     "the later names were not read")
    return notes


def _no_series_error(series: MetricSeries, shown: str) -> UsageError:
    if not series.records:
        sample = " | ".join(series.sample[:4]) or "(empty file)"
        seen = ", ".join(f"{k} ({n})" for k, n in series.ignored_keys.most_common(10))
        found = (f"found only numbers named {seen}; " if seen else "") + f"first lines: {sample}"
        cut = series.cuts.note()
        if cut:
            found += f"; {cut}"
        return UsageError(
            f"no recognisable metric series in {shown}: {series.lines} lines, none with a loss, grad_norm, lr or "
            f"step in a known format; {found}.",
            "pass the log the training loop prints (key=value, key: value, | key value |, JSON or dict lines, "
            "tqdm postfixes, a CSV with a header row)",
        )
    return UsageError(
        f"no loss, grad_norm or lr series in {shown}: found only {', '.join(series.metrics()[:15])}.",
        "pass a training log that prints loss / grad_norm / lr",
    )


async def _scan(path: Path, ctx: ToolContext) -> MetricSeries:
    import anyio
    import anyio.from_thread

    last = [time.monotonic()]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - last[0] >= 5:
            last[0] = time.monotonic()
            anyio.from_thread.run(ctx.progress, done, total, f"read {done >> 20} of {total >> 20} MB of {path.name}")

    return await anyio.to_thread.run_sync(scan_metrics, path, progress)


def _resolve_log(ctx: ToolContext, raw: str, what: str) -> Path:
    path = ctx.workspace.resolve(raw, must_exist=True, what=what)
    if not path.is_file():
        raise UsageError(f"{what} {raw!r} is a directory, not a log file.", "pass the log file itself")
    return path


def _usable(series: MetricSeries, shown: str) -> MetricSeries:
    if not series.records:
        raise _no_series_error(series, shown)
    if not set(series.stats) & set(RECOGNISED) and not any("loss" in k for k in series.stats):
        raise _no_series_error(series, shown)
    return series


def _write_series(path: Path, points: dict[str, Points]) -> None:
    """Every point as JSON, written a chunk at a time (a long run has millions)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("{")
        for n, (metric, pts) in enumerate(points.items()):
            fh.write(("," if n else "") + f'"{metric}": [')
            chunk = 10_000
            for start in range(0, len(pts), chunk):
                pairs = zip(pts.steps[start:start + chunk].tolist(), pts.values[start:start + chunk].tolist(),
                            strict=True)
                body = ",".join(f"[{s},{v!r}]" if math.isfinite(v) else f'[{s},"{v}"]' for s, v in pairs)
                fh.write(("," if start else "") + body)
            fh.write("]")
        fh.write("}")


def _findings(result: AnalyzeTrainingLogResult, series: MetricSeries) -> None:
    spikes = series.spikes()
    result.spikes = [_spike_model(s) for s in spikes[:MAX_SPIKES]]
    result.spike_count = len(spikes)
    if spikes:
        result.largest_spike = _spike_model(max(spikes, key=lambda s: s.factor))
    first = series.first_nonfinite
    if first is not None and spikes:
        reference = series.points.get(first.metric) or series.points.get("loss") or next(iter(series.points.values()))
        logged = reference.steps[:int(np.searchsorted(reference.steps, first.step))]  # steps are sorted
        since = int(logged[-BEFORE_NONFINITE]) if len(logged) >= BEFORE_NONFINITE else (
            int(logged[0]) if len(logged) else first.step)
        result.spikes_before_nonfinite = [_spike_model(s) for s in spikes if since <= s.step < first.step]
    if "lr" in series.points:
        course = lr_course(series.points["lr"], first.step if first else None)
        if course is not None:
            result.lr = LrFinding(early_max=course.early_max, early_until_step=course.early_until_step,
                                  step=course.at_step, value=course.value, ratio=round(course.ratio, 3),
                                  still_rising=course.rising, at_first_nonfinite=course.at_nonfinite)


async def analyze_training_log(inp: AnalyzeTrainingLogInput, ctx: ToolContext) -> AnalyzeTrainingLogResult:
    store = None
    if inp.session_id:
        from rootcause.tools.record.store import SessionStore

        store = SessionStore(ctx.workspace)
        store.load(inp.session_id)
    if inp.rtol is not None and not (0 < inp.rtol < 10):
        raise UsageError(f"rtol must be a positive relative tolerance, got {inp.rtol}.", "e.g. rtol=0.02")
    path = _resolve_log(ctx, inp.path, "path")
    ref_path = _resolve_log(ctx, inp.compare_to, "compare_to") if inp.compare_to else None
    shown = ctx.workspace.relative(path)
    series = _usable(await _scan(path, ctx), shown)
    names = series.metrics()
    others = [m for m in names if m not in RECOGNISED]
    kept = [m for m in names if m in RECOGNISED] + others[:MAX_OTHER_SERIES]
    first = series.first_nonfinite
    notes = []
    if len(series.ranks) > 1:
        shown = ", ".join(r or "none" for r in series.ranks[:16]) + (", ..." if len(series.ranks) > 16 else "")
        many = f"at least {metrics.MAX_RANKS}" if len(series.ranks) >= metrics.MAX_RANKS else str(len(series.ranks))
        notes.append(f"{many} streams in the log (ranks {shown}); "
                     f"the series are rank {series.rank_used or 'none'}'s ({metrics.RANK_RULE})")
    notes += _reading_notes(series)

    out_dir = ctx.workspace.state_dir("numerics")
    stamp = f"{path.name[:60]}-{int(time.time() * 1000)}"
    series_file = out_dir / f"series-{stamp}.json"
    _write_series(series_file, series.points)
    result = AnalyzeTrainingLogResult(
        path=shown, formats=dict(series.formats.most_common()), lines=series.lines, steps=series.steps,
        step_source=series.step_source, ranks=[r if r is not None else "none" for r in series.ranks],
        rank_used=series.rank_used if series.rank_used is not None else "none",
        series={m: _summary(series.stats[m]) for m in kept},
        other_series_omitted=len(others) - min(len(others), MAX_OTHER_SERIES),
        first_nonfinite_step=first.step if first else None,
        first_nonfinite=NonFiniteAt(step=first.step, metric=first.metric, value=str(first.value),
                                    line=None if first.line is None else first.line + 1) if first else None,
        spikes=[], spike_count=0, spike_rule=SPIKE_RULE, series_path=ctx.workspace.relative(series_file), notes=notes,
    )
    _findings(result, series)
    reference = None
    if ref_path is not None:
        result.compare_to = ctx.workspace.relative(ref_path)
        result.rtol = inp.rtol if inp.rtol is not None else DEFAULT_RTOL
        result.rtol_rule = RTOL_RULE
        reference = _usable(await _scan(ref_path, ctx), result.compare_to)
        _fill_divergence(result, series, reference, result.rtol)
    if inp.plot:
        from rootcause.tools.numerics.plot import draw

        plot_file = ctx.workspace.state_dir("plots") / f"{stamp}.png"
        draw(plot_file, series, result, reference)
        result._plot_file = plot_file
        result.plot_path = ctx.workspace.relative(plot_file)
    if store is not None and inp.session_id:
        from rootcause.tools.record.findings import TrainingLogEvidence, dump

        evidence = TrainingLogEvidence.model_validate(
            {**result.model_dump(mode="json", include=set(TrainingLogEvidence.model_fields) - {"spikes"}),
             "spikes": [s.model_dump(mode="json") for s in result.spikes[:10]]})
        store.record(inp.session_id, "analyze_training_log", evidence.render(), dump(evidence), phase=None)
    return result


def _fill_divergence(result: AnalyzeTrainingLogResult, series: MetricSeries, ref: MetricSeries, rtol: float) -> None:
    found = []
    for metric in metrics.vocabulary().spike_metrics:
        if metric not in series.points or metric not in ref.points:
            continue
        d = divergence(series.points[metric], ref.points[metric], metric, rtol)
        if d.compared_steps:
            found.append(Divergence(
                metric=metric, compared_steps=d.compared_steps, first_divergent_step=d.first_step,
                value=None if d.value is None else _json_value(d.value),
                reference_value=None if d.reference_value is None else _json_value(d.reference_value),
                relative_difference=None if d.relative_difference is None else _json_value(d.relative_difference),
                max_relative_difference=d.max_relative_difference,
            ))
    result.divergence = found
    if not found:
        result.notes.append("the two logs share no step with a loss or grad_norm: nothing to compare")
    steps = [d.first_divergent_step for d in found if d.first_divergent_step is not None]
    result.first_divergent_step = min(steps) if steps else None
