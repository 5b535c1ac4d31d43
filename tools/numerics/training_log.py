"""analyze_training_log: loss / grad_norm / lr series from a training log, NaN onset, spikes, divergence."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from pydantic import BaseModel, Field

from tools.context import ToolContext
from tools.errors import UsageError
from tools.numerics.log_parsers import RECOGNISED
from tools.numerics.series import (
    DEFAULT_RTOL,
    RTOL_RULE,
    SPIKE_METRICS,
    SPIKE_RULE,
    ParsedLog,
    RankSeries,
    divergence,
    find_spikes,
    first_nonfinite,
    metric_series,
    parse_file,
)
from tools.results import ToolResult

MAX_OTHER_SERIES = 20
MAX_SPIKES = 50


class AnalyzeTrainingLogInput(BaseModel):
    """Analyze a training log: loss / grad_norm / lr by step, the first NaN/Inf step, spikes, divergence.

    Series are keyed by step (inferred when the log prints none); spikes are loss or grad-norm
    jumps against a rolling median; with compare_to, the first step where two runs diverge
    (e.g. 1 GPU vs 8 GPUs) beyond rtol.

    Reads key=value, key: value, `| loss 2.31 |` columns, JSON lines, Python dict lines (HF Trainer),
    tqdm postfixes and per-rank prefixes ([rank0]:), streaming, so logs of any size work.
    """

    path: str = Field(description="The training log (relative to the root or absolute inside it).")
    compare_to: str | None = Field(None, description="A second run's log (the reference) to find the first "
                                                     "divergent step against.")
    rtol: float | None = Field(None, description=f"Relative tolerance for divergence; default {DEFAULT_RTOL} "
                                                 "(chosen for bf16, stated in the result).")
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


class Spike(BaseModel):
    step: int
    metric: str
    value: float
    factor: float = Field(description="value / rolling median.")
    median: float


class NonFiniteAt(BaseModel):
    step: int
    metric: str
    value: str


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
    series: dict[str, SeriesSummary] = Field(description="loss, grad_norm, lr first, then other metrics.")
    other_series_omitted: int = 0
    first_nonfinite_step: int | None
    first_nonfinite: NonFiniteAt | None = None
    spikes: list[Spike]
    spike_count: int
    spike_rule: str
    compare_to: str | None = None
    rtol: float | None = None
    rtol_rule: str | None = None
    first_divergent_step: int | None = None
    divergence: list[Divergence] = Field(default_factory=list)
    series_path: str = Field(description="Every series point as JSON ({metric: [[step, value], ...]}).")
    notes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        fmt = ", ".join(f"{k} {v}" for k, v in sorted(self.formats.items(), key=lambda kv: -kv[1]))
        lines = [f"{self.path}: {self.steps} steps ({self.step_source}), formats: {fmt}; rank used: {self.rank_used}."]
        for name in RECOGNISED:
            s = self.series.get(name)
            if s:
                lines.append(f"{name}: {s.count} points, steps {s.first_step}-{s.last_step}, first {_num(s.first)}, "
                             f"last {_num(s.last)}, range {_num(s.min)}..{_num(s.max)}"
                             + (f", {s.nonfinite} non-finite" if s.nonfinite else ""))
        if self.first_nonfinite:
            f = self.first_nonfinite
            lines.append(f"FIRST NON-FINITE at step {f.step}: {f.metric} = {f.value}.")
        else:
            lines.append("No non-finite values.")
        if self.spikes:
            shown = "; ".join(f"step {s.step} {s.metric} {_num(s.value)} ({s.factor:.1f}x median)"
                              for s in self.spikes[:6])
            lines.append(f"{self.spike_count} spike(s): {shown}.")
        else:
            lines.append("No spikes.")
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
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


def _num(value: float | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:.6g}"


def _json_value(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _summarise(points: list[tuple[int, float]]) -> SeriesSummary:
    finite = [v for _, v in points if math.isfinite(v)]
    return SeriesSummary(count=len(points), nonfinite=len(points) - len(finite), first_step=points[0][0],
                         last_step=points[-1][0], min=min(finite) if finite else None,
                         max=max(finite) if finite else None, first=finite[0] if finite else None,
                         last=finite[-1] if finite else None)


def _no_series_error(parsed: ParsedLog, shown: str) -> UsageError:
    if not parsed.ranks:
        sample = " | ".join(parsed.sample[:4]) or "(empty file)"
        seen = ", ".join(f"{k} ({n})" for k, n in parsed.ignored_keys.most_common(10))
        found = f"found only numbers named {seen}" if seen else f"first lines: {sample}"
        return UsageError(
            f"no recognisable metric series in {shown}: {parsed.lines} lines, none with a loss, grad_norm, lr or "
            f"step in a known format; {found}.",
            "pass the log the training loop prints (key=value, key: value, | key value |, JSON or dict lines, "
            "tqdm postfixes)",
        )
    keys = sorted({k for s in parsed.ranks.values() for v in s.steps.values() for k in v})
    return UsageError(
        f"no loss, grad_norm or lr series in {shown}: found only {', '.join(keys[:15])}.",
        "pass a training log that prints loss / grad_norm / lr",
    )


async def _parse(path: Path, ctx: ToolContext) -> ParsedLog:
    import anyio
    import anyio.from_thread

    last = [time.monotonic()]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - last[0] >= 5:
            last[0] = time.monotonic()
            anyio.from_thread.run(ctx.progress, done, total, f"read {done >> 20} of {total >> 20} MB of {path.name}")

    return await anyio.to_thread.run_sync(parse_file, path, progress)


def _resolve_log(ctx: ToolContext, raw: str, what: str) -> Path:
    path = ctx.workspace.resolve(raw, must_exist=True, what=what)
    if not path.is_file():
        raise UsageError(f"{what} {raw!r} is a directory, not a log file.", "pass the log file itself")
    return path


def _usable(parsed: ParsedLog, shown: str) -> tuple[str | None, RankSeries]:
    if not parsed.ranks:
        raise _no_series_error(parsed, shown)
    rank, series = parsed.primary()
    keys = {k for v in series.steps.values() for k in v}
    if not keys & set(RECOGNISED) and not any("loss" in k for k in keys):
        raise _no_series_error(parsed, shown)
    return rank, series


async def analyze_training_log(inp: AnalyzeTrainingLogInput, ctx: ToolContext) -> AnalyzeTrainingLogResult:
    store = None
    if inp.session_id:
        from tools.sessions import SessionStore

        store = SessionStore(ctx.workspace)
        store.load(inp.session_id)
    if inp.rtol is not None and not (0 < inp.rtol < 10):
        raise UsageError(f"rtol must be a positive relative tolerance, got {inp.rtol}.", "e.g. rtol=0.02")
    path = _resolve_log(ctx, inp.path, "path")
    ref_path = _resolve_log(ctx, inp.compare_to, "compare_to") if inp.compare_to else None
    shown = ctx.workspace.relative(path)
    parsed = await _parse(path, ctx)
    rank, series = _usable(parsed, shown)
    metrics = sorted({k for v in series.steps.values() for k in v},
                     key=lambda k: (RECOGNISED.index(k) if k in RECOGNISED else len(RECOGNISED), k))
    others = [m for m in metrics if m not in RECOGNISED]
    kept = [m for m in metrics if m in RECOGNISED] + others[:MAX_OTHER_SERIES]
    points = {m: metric_series(series, m) for m in metrics}
    summaries = {m: _summarise(points[m]) for m in kept}
    spikes = [s for m in SPIKE_METRICS if m in points for s in find_spikes(points[m], m)]
    spikes.sort(key=lambda s: (s.step, s.metric))
    nonfinite = first_nonfinite(series)
    notes = []
    if len(parsed.ranks) > 1:
        notes.append(f"{len(parsed.ranks)} ranks log metrics; the series are rank {rank or 'none'}'s")

    out_dir = ctx.workspace.state_dir("numerics")
    series_file = out_dir / f"series-{path.name[:60]}-{int(time.time() * 1000)}.json"
    series_file.write_text(json.dumps({m: [[s, _json_value(v)] for s, v in pts] for m, pts in points.items()}),
                           encoding="utf-8")
    source = "explicit" if not series.inferred else "inferred" if not series.explicit else "mixed"
    result = AnalyzeTrainingLogResult(
        path=shown, formats=dict(parsed.formats.most_common()), lines=parsed.lines, steps=len(series.steps),
        step_source=source, ranks=[r if r is not None else "none" for r in parsed.ranks],
        rank_used=rank if rank is not None else "none", series=summaries,
        other_series_omitted=len(others) - min(len(others), MAX_OTHER_SERIES),
        first_nonfinite_step=nonfinite[0] if nonfinite else None,
        first_nonfinite=NonFiniteAt(step=nonfinite[0], metric=nonfinite[1], value=str(nonfinite[2]))
        if nonfinite else None,
        spikes=[Spike(step=s.step, metric=s.metric, value=s.value, factor=round(s.factor, 3), median=s.median)
                for s in spikes[:MAX_SPIKES]],
        spike_count=len(spikes), spike_rule=SPIKE_RULE, series_path=ctx.workspace.relative(series_file), notes=notes,
    )
    if ref_path is not None:
        result.compare_to = ctx.workspace.relative(ref_path)
        result.rtol = inp.rtol if inp.rtol is not None else DEFAULT_RTOL
        result.rtol_rule = RTOL_RULE
        ref_parsed = await _parse(ref_path, ctx)
        _, ref_series = _usable(ref_parsed, ctx.workspace.relative(ref_path))
        _fill_divergence(result, series, ref_series, result.rtol)
    if store is not None and inp.session_id:
        data = result.model_dump(mode="json", include={"path", "steps", "first_nonfinite_step", "spike_count",
                                                       "first_divergent_step", "rtol", "compare_to", "series_path"})
        data["spikes"] = [s.model_dump(mode="json") for s in result.spikes[:10]]
        store.record(inp.session_id, "analyze_training_log", result.summary(), data, phase=None)
    return result


def _fill_divergence(result: AnalyzeTrainingLogResult, series: RankSeries, ref: RankSeries, rtol: float) -> None:
    found = []
    for metric in SPIKE_METRICS:
        d = divergence(series, ref, metric, rtol)
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
