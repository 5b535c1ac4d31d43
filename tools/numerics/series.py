"""Metric series keyed by step: building them from records, spikes, the first non-finite and divergent step."""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools.numerics.log_parsers import IGNORED, RECOGNISED, Record, parse_line

SPIKE_WINDOW = 20
SPIKE_FACTOR = 3.0
SPIKE_MIN_HISTORY = 5
SPIKE_METRICS = ("loss", "grad_norm")
SPIKE_RULE = (f"a finite value above {SPIKE_FACTOR:g}x the median of the previous {SPIKE_WINDOW} finite values "
              f"of the same metric (loss and grad_norm only, never lr; at least {SPIKE_MIN_HISTORY} previous values "
              "and a positive median needed)")
# bf16 keeps 8 significant bits: machine epsilon 2^-7 ~ 0.0078. Two runs that differ only in reduction
# order (1 GPU vs 8) drift by a few roundings of the loss; 2.5 epsilons separates that noise from a real change.
DEFAULT_RTOL = 0.02
RTOL_RULE = ("relative difference |a-b| / max(|a|, |b|) above rtol at a step both logs report; a value that is "
             "finite in one log and not in the other also diverges. Default rtol 0.02: about 2.5x bf16 machine "
             "epsilon (2^-7), above the reduction-order noise of bf16 runs on different GPU counts")


@dataclass
class RankSeries:
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    explicit: int = 0
    inferred: int = 0
    _current: int = 0

    def add(self, record: Record) -> None:
        if record.step is not None:
            step = record.step
            self._current = step
            self.explicit += 1
        else:
            # A record without a step continues the current step unless it repeats one of its training
            # metrics (an eval dict between two training dicts belongs to the step before it).
            here = self.steps.get(self._current)
            if here is None or set(record.metrics) & set(here) & set(RECOGNISED):
                self._current += 1
            step = self._current
            self.inferred += 1
        bucket = self.steps.setdefault(step, {})
        for key, value in record.metrics.items():
            bucket.setdefault(key, value)

    def records(self) -> int:
        return self.explicit + self.inferred


@dataclass
class ParsedLog:
    lines: int = 0
    formats: Counter[str] = field(default_factory=Counter)
    ranks: dict[str | None, RankSeries] = field(default_factory=dict)
    sample: list[str] = field(default_factory=list)
    ignored_keys: Counter[str] = field(default_factory=Counter)

    def primary(self) -> tuple[str | None, RankSeries]:
        """The rank with the most records (the lowest on a tie; unprefixed lines first)."""
        def order(item: tuple[str | None, RankSeries]) -> tuple[int, int]:
            rank, series = item
            return -series.records(), -1 if rank is None else int(rank)

        return min(self.ranks.items(), key=order)


def parse_file(path: Path, progress: Callable[[int, int], None] | None = None) -> ParsedLog:
    """Stream a log once; `progress(bytes_read, total)` is called every 4 MB."""
    parsed = ParsedLog()
    total = path.stat().st_size
    next_report = 4 << 20
    with open(path, "rb") as fh:
        for raw in fh:
            parsed.lines += 1
            line = raw.decode("utf-8", "replace")
            if len(parsed.sample) < 8 and line.strip():
                parsed.sample.append(line.strip()[:160])
            if len(line) > 100_000:
                line = line[:100_000]
            for record in parse_line(line):
                if record.format == IGNORED:
                    parsed.ignored_keys.update(list(record.metrics))
                    continue
                parsed.formats[record.format] += 1
                parsed.ranks.setdefault(record.rank, RankSeries()).add(record)
            if progress is not None and fh.tell() >= next_report:
                next_report += 4 << 20
                progress(fh.tell(), total)
    return parsed


def metric_series(series: RankSeries, metric: str) -> list[tuple[int, float]]:
    return [(step, values[metric]) for step, values in sorted(series.steps.items()) if metric in values]


@dataclass
class SpikeFound:
    step: int
    metric: str
    value: float
    factor: float
    median: float


def _median(values: deque[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def find_spikes(points: list[tuple[int, float]], metric: str) -> list[SpikeFound]:
    window: deque[float] = deque(maxlen=SPIKE_WINDOW)
    found = []
    for step, value in points:
        if not math.isfinite(value):
            continue
        if len(window) >= SPIKE_MIN_HISTORY:
            median = _median(window)
            if median > 0 and value > SPIKE_FACTOR * median:
                found.append(SpikeFound(step, metric, value, value / median, median))
        window.append(value)
    return found


def first_nonfinite(series: RankSeries) -> tuple[int, str, float] | None:
    for step, values in sorted(series.steps.items()):
        bad = [(k, v) for k, v in values.items() if not math.isfinite(v)]
        if bad:
            preferred = sorted(bad, key=lambda kv: (kv[0] not in RECOGNISED, kv[0]))[0]
            return step, preferred[0], preferred[1]
    return None


@dataclass
class DivergenceFound:
    metric: str
    compared_steps: int
    first_step: int | None
    value: float | None
    reference_value: float | None
    relative_difference: float | None
    max_relative_difference: float | None


def relative_difference(a: float, b: float) -> float:
    if math.isfinite(a) and math.isfinite(b):
        scale = max(abs(a), abs(b))
        return 0.0 if scale == 0 else abs(a - b) / scale
    if (math.isnan(a) and math.isnan(b)) or a == b:
        return 0.0
    return math.inf


def divergence(a: RankSeries, b: RankSeries, metric: str, rtol: float) -> DivergenceFound:
    left = dict(metric_series(a, metric))
    right = dict(metric_series(b, metric))
    common = sorted(set(left) & set(right))
    first: tuple[int, float] | None = None
    worst = 0.0
    for step in common:
        diff = relative_difference(left[step], right[step])
        if diff > rtol and first is None:
            first = (step, diff)
        if math.isfinite(diff):
            worst = max(worst, diff)
    return DivergenceFound(
        metric=metric, compared_steps=len(common), first_step=first[0] if first else None,
        value=left[first[0]] if first else None, reference_value=right[first[0]] if first else None,
        relative_difference=first[1] if first else None, max_relative_difference=worst if common else None,
    )
