"""The one metric extractor: per-step loss / grad_norm / lr (and other numbers) from training logs.

Every tool that reads metrics from a log uses it: analyze_training_log, diagnose_log's spike
template, the run observation that decides that a run which exited 0 printed NaN losses, and the
metric yardstick (`keep=["val_acc"]`: any named metric, read step by step).

    series = scan_metrics(path_or_lines)        # a MetricSeries
    series.first_nonfinite                      # NonFinite(step, metric, value, line) or None
    series.spikes()                             # the one spike rule (SPIKE_RULE), loss and grad_norm

Lines are read one at a time (streaming), at most MAX_LINE characters at once: a longer line comes
in pieces cut at carriage returns, so every progress-bar update of a one-line tqdm log is read, and a
segment longer than that is cut and counted in `series.cuts` (tools/observe/logs/bounded.py). Lines
are normalised by tools/logs/lines.py (the launcher's rank tag, timestamps, logger formats); each
carriage-return segment gives at most one record (tools/logs/metric_formats.py: the formats and the
vocabulary of names). One rank is read: rank 0 when it prints metrics, else the first stream that
does. Per-step numbers are kept in compact columns (tools/observe/logs/columns.py: float64 values,
steps and lines as arithmetic runs, about 8 bytes a point) for loss, grad_norm, lr and every metric
named like a loss or a norm; other metrics keep a running summary only. Whole-series passes (spikes,
ranges) go a block at a time, so their temporaries stay a few MB.
"""

from __future__ import annotations

import io
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rootcause.tools.observe.logs.bounded import MAX_LINE, Cuts, pieces
from rootcause.tools.observe.logs.columns import Column, IntSeq, RunInts
from rootcause.tools.observe.logs.lines import PREFIXES, LineModel, clean
from rootcause.tools.observe.logs.metric_formats import (
    IGNORED,
    RECOGNISED,
    MetricRecord,
    canonical,
    delimited_header,
    delimited_row,
    keeps_points,
    parse_text,
    record_of,
    table_header,
    table_row,
    trigger,
    vocabulary,
)

__all__ = [
    "IGNORED",
    "RANK_RULE",
    "RECOGNISED",
    "SPIKE_RULE",
    "MetricExtractor",
    "MetricSeries",
    "NonFinite",
    "Points",
    "Spike",
    "Stats",
    "canonical",
    "find_spikes",
    "parse_text",
    "scan_metrics",
    "vocabulary",
]

_DIGITS = str.maketrans("123456789", "000000000")
SPIKE_WINDOW = 20
SPIKE_FACTOR = 3.0
SPIKE_MIN_HISTORY = 3
SPIKE_RULE = (f"a finite value above {SPIKE_FACTOR:g}x the median of the previous {SPIKE_WINDOW} finite values "
              f"of the same metric (loss and grad_norm only, never lr; at least {SPIKE_MIN_HISTORY} previous values "
              "and a positive median needed)")
PREFIXED = object()
"""feed()'s default rank: split the launcher prefix off the line to learn it."""
RANK_RULE = "rank 0 when it prints metrics, else the first rank (or unprefixed stream) that does"
MAX_METRICS = 1000
"""Distinct metric names read (a log naming more, e.g. one key per sample, keeps the first ones)."""
MAX_RANKS = 1024
"""Streams listed in `ranks` (the first ones seen)."""


# -- series -------------------------------------------------------------------------------------------------------

@dataclass
class Stats:
    """Summary of one metric's values in step order."""
    count: int = 0
    nonfinite: int = 0
    first_step: int = 0
    last_step: int = 0
    min: float | None = None
    max: float | None = None
    first: float | None = None
    last: float | None = None
    final: float | None = None
    trailing_nonfinite: int = 0
    first_nonfinite_step: int | None = None
    last_finite_step: int | None = None
    trailing_from_step: int | None = None
    """The first step of the non-finite tail (when the series ends non-finite)."""

    def add(self, step: int, value: float) -> None:
        if not self.count:
            self.first_step = step
        self.count += 1
        self.last_step = step
        self.final = value
        if math.isfinite(value):
            self.trailing_nonfinite = 0
            self.trailing_from_step = None
            self.last, self.last_finite_step = value, step
            if self.first is None:
                self.first = value
            self.min = value if self.min is None else min(self.min, value)
            self.max = value if self.max is None else max(self.max, value)
        else:
            self.nonfinite += 1
            self.trailing_nonfinite += 1
            if self.trailing_from_step is None:
                self.trailing_from_step = step
            if self.first_nonfinite_step is None:
                self.first_nonfinite_step = step


@dataclass
class Points:
    """One metric's values by step (sorted, one value per step: the first printed), with log line numbers (an array,
    or runs read by index: `int(lines[i])`, `lines[a:b]` and `np.asarray(lines)` work on both)."""
    steps: np.ndarray
    values: np.ndarray
    lines: np.ndarray | RunInts

    def __len__(self) -> int:
        return len(self.steps)

    def stats(self) -> Stats:
        s = Stats()
        if not len(self):
            return s
        finite = np.isfinite(self.values)
        s.count, s.nonfinite = len(self), len(self) - int(np.count_nonzero(finite))
        s.first_step, s.last_step = int(self.steps[0]), int(self.steps[-1])
        s.final = float(self.values[-1])
        if s.nonfinite < s.count:
            low, high = _finite_range(self.values, finite if s.nonfinite else None)
            first, last = int(np.argmax(finite)), len(self) - 1 - int(np.argmax(finite[::-1]))
            s.min, s.max, s.first, s.last = low, high, float(self.values[first]), float(self.values[last])
            s.trailing_nonfinite = len(self) - 1 - last
            s.last_finite_step = int(self.steps[last])
        else:
            s.trailing_nonfinite = len(self)
        if s.trailing_nonfinite:
            s.trailing_from_step = int(self.steps[len(self) - s.trailing_nonfinite])
        if s.nonfinite:
            s.first_nonfinite_step = int(self.steps[int(np.argmin(finite))])
        return s


@dataclass
class Spike:
    step: int
    metric: str
    value: float
    factor: float
    median: float
    line: int | None = None


@dataclass
class NonFinite:
    step: int
    metric: str
    value: float
    line: int | None = None


CHUNK = 1 << 16
"""Points per block of the whole-series passes (a block's temporaries stay a few MB)."""


def _finite_range(values: np.ndarray, finite: np.ndarray | None) -> tuple[float, float]:
    """min and max of the finite values (all of them when `finite` is None), a block at a time."""
    if finite is None:
        return float(values.min()), float(values.max())
    low, high = math.inf, -math.inf
    for start in range(0, len(values), CHUNK * 16):
        block = values[start:start + CHUNK * 16][finite[start:start + CHUNK * 16]]
        if len(block):
            low, high = min(low, float(block.min())), max(high, float(block.max()))
    return low, high


def _rolling_medians(values: np.ndarray) -> np.ndarray:
    """medians[i]: median of values[max(0, i - WINDOW):i] (NaN when fewer than MIN_HISTORY)."""
    n = len(values)
    medians = np.full(n, np.nan)
    for i in range(SPIKE_MIN_HISTORY, min(n, SPIKE_WINDOW)):
        medians[i] = np.median(values[:i])
    if n > SPIKE_WINDOW:
        windows = np.lib.stride_tricks.sliding_window_view(values[:-1], SPIKE_WINDOW)
        medians[SPIKE_WINDOW:] = np.median(windows, axis=1)
    return medians


def find_spikes(steps: np.ndarray, values: np.ndarray, metric: str,
                lines: np.ndarray | None = None) -> list[Spike]:
    """The one spike rule (SPIKE_RULE) over a metric's values in step order; non-finite values are skipped.

    Read a block at a time, each block's windows starting with the last finite values of the blocks before."""
    found: list[Spike] = []
    history = np.zeros(0)
    for start in range(0, len(values), CHUNK // 4):  # each point's window of 20 is copied: 2.6 MB a block
        block = values[start:start + CHUNK // 4]
        idx = np.flatnonzero(np.isfinite(block)) + start
        joined = np.concatenate([history, values[idx]])
        medians = _rolling_medians(joined)[len(history):]
        vals = joined[len(history):]
        with np.errstate(invalid="ignore"):
            hit = (medians > 0) & (vals > SPIKE_FACTOR * medians)
        found += [Spike(int(steps[idx[i]]), metric, float(vals[i]), float(vals[i] / medians[i]), float(medians[i]),
                        None if lines is None else int(lines[idx[i]]))
                  for i in np.flatnonzero(hit)]
        history = joined[-SPIKE_WINDOW:]
    return found


@dataclass
class MetricSeries:
    """What scan_metrics found: the chosen rank's per-step metrics and how they were read."""
    lines: int = 0
    formats: Counter[str] = field(default_factory=Counter)
    ranks: list[str | None] = field(default_factory=list)
    rank_used: str | None = None
    rank_rule: str = RANK_RULE
    explicit: int = 0
    inferred: int = 0
    steps: int = 0
    points: dict[str, Points] = field(default_factory=dict)
    stats: dict[str, Stats] = field(default_factory=dict)
    sample: list[str] = field(default_factory=list)
    ignored_keys: Counter[str] = field(default_factory=Counter)
    cuts: Cuts = field(default_factory=Cuts)
    """Segments longer than MAX_LINE characters, of which only the first MAX_LINE were read."""
    repeated: dict[str, int] = field(default_factory=dict)
    """Per metric, values dropped at a step printed again (a resumed run: the first value printed is kept)."""
    metrics_dropped: int = 0
    """Values of metric names beyond the first MAX_METRICS, not read."""

    @property
    def records(self) -> int:
        return self.explicit + self.inferred

    @property
    def step_source(self) -> str:
        return "explicit" if not self.inferred else "inferred" if not self.explicit else "mixed"

    def metrics(self) -> list[str]:
        """loss, grad_norm, lr first, then the others by name."""
        return sorted(self.stats, key=lambda k: (RECOGNISED.index(k) if k in RECOGNISED else len(RECOGNISED), k))

    @property
    def first_nonfinite(self) -> NonFinite | None:
        """The first step with a NaN / Inf value (loss, grad_norm, lr preferred at the same step)."""
        best: tuple[tuple[int, int, str], NonFinite] | None = None
        for metric, s in self.stats.items():
            if s.first_nonfinite_step is None:
                continue
            value, line = math.nan, None
            pts = self.points.get(metric)
            if pts is not None:
                i = int(np.argmin(np.isfinite(pts.values)))
                value, line = float(pts.values[i]), int(pts.lines[i])
            key = (s.first_nonfinite_step, 0 if metric in RECOGNISED else 1, metric)
            if best is None or key < best[0]:
                best = (key, NonFinite(s.first_nonfinite_step, metric, value, line))
        return best[1] if best else None

    def spikes(self, metrics: Iterable[str] | None = None) -> list[Spike]:
        """Spikes by the one rule, in step order (loss and grad_norm unless told)."""
        names = vocabulary().spike_metrics if metrics is None else tuple(metrics)
        found = [s for m in names if m in self.points
                 for s in find_spikes(self.points[m].steps, self.points[m].values, m, self.points[m].lines)]
        return sorted(found, key=lambda s: (s.step, s.metric))


class _Stream:
    """The chosen rank's records turned into columns (explicit steps, or one step per record)."""

    def __init__(self, wanted: frozenset[str] = frozenset()) -> None:
        self.wanted = wanted
        self.columns: dict[str, Column] = {}
        self.stats: dict[str, Stats] = {}
        self.step_list = IntSeq()
        self.dropped = 0
        self.keeps: dict[str, bool] = {}
        self.explicit = 0
        self.inferred = 0
        self.current = 0
        self.current_keys: set[str] = set()
        self.started = False

    def add(self, record: MetricRecord, line: int) -> None:
        if record.step is not None:
            if not self.started or record.step != self.current:
                self.current_keys = set()
            self.current = record.step
            self.explicit += 1
        else:
            # A record without a step continues the current step unless it repeats one of its training
            # metrics or a kept one (an eval dict between two training dicts belongs to the step before it;
            # `epoch 2: val_acc=0.8` after `epoch 1: val_acc=0.7` is the next step).
            if not self.started or set(record.metrics) & self.current_keys & {*RECOGNISED, *self.wanted}:
                self.current += 1
                self.current_keys = set()
            self.inferred += 1
        self.started = True
        step = self.current
        if self.step_list.last != step:
            self.step_list.append(step)
        for key, value in record.metrics.items():
            if key in self.current_keys:
                continue
            keeps = self.keeps.get(key)
            if keeps is None:
                keeps = keeps_points(key, self.wanted)
                if len(self.keeps) < 4 * MAX_METRICS:
                    self.keeps[key] = keeps
            if keeps:
                column = self.columns.get(key)
                if column is None:
                    if len(self.columns) + len(self.stats) >= MAX_METRICS:
                        self.dropped += 1
                        continue
                    column = self.columns[key] = Column()
                column.add(step, value, line)
            else:
                stats = self.stats.get(key)
                if stats is None:
                    if len(self.columns) + len(self.stats) >= MAX_METRICS:
                        self.dropped += 1
                        continue
                    stats = self.stats[key] = Stats()
                stats.add(step, value)
        self.current_keys.update(record.metrics)


class MetricExtractor:
    """Feed lines one at a time; `result()` gives the MetricSeries. Stateful: line model, CSV header, rank, steps.

    The line model (tools/logs/lines.py: ANSI codes, rank tags, timestamps, logger formats) is learnt
    from the first HEAD lines, which are held back until then. Once a rank is chosen, other ranks'
    lines are skipped on their launcher tag alone, and once a metric line was found, lines that name
    no metric, step or progress bar are skipped before they are normalised.
    """

    HEAD = 200
    HEAD_CHARS = 1_000_000

    def __init__(self, keep: Iterable[str] = ()) -> None:
        self.wanted = frozenset(canonical(name) for name in keep)
        self._trigger = trigger(self.wanted)
        self.series = MetricSeries()
        self._stream = _Stream(self.wanted)
        self._chosen: str | None = None
        self._chose = False
        self._delimited: tuple[str, list[str]] | None = None
        self._table: list[str] | None = None
        self._content_lines = 0
        self._ranks_seen: dict[str | None, None] = {}
        self._model: LineModel | None = None
        self._head: list[tuple[str, int]] = []
        self._head_chars = 0
        self._rank_tags: tuple[re.Pattern[str], ...] = ()
        self._tags: dict[str, str] = {}
        self._prefix: tuple[int, str, str | None] = (0, "", None)

    def feed(self, line: str, index: int | None = None, rank: int | str | object | None = PREFIXED, *,
             continues: bool = False) -> None:
        """One physical line of the log; `index` is its 0-based line number (default: lines fed so far).

        Pass `rank` when the caller split the launcher prefix off already (None: unprefixed): the line
        is then read as it is, with no line model. `continues`: a further piece of the line fed last (a long
        line read in pieces, tools/observe/logs/bounded.py), not counted again. A line longer than MAX_LINE is
        read in such pieces, each carriage-return segment kept (a segment longer than that is cut, in
        `series.cuts`)."""
        if continues:
            number = self.series.lines - 1 if index is None else index
        else:
            number = self.series.lines if index is None else index
            self.series.lines += 1
        if len(line) > MAX_LINE:
            with io.StringIO(line, newline="\n") as fh:
                for piece, _, _ in pieces(fh, self.series.cuts, start=number):
                    self._piece(piece, number, rank)
            return
        self._piece(line, number, rank)

    def _piece(self, line: str, number: int, rank: int | str | object | None) -> None:
        if rank is not PREFIXED:
            tag = None if rank is None else str(rank)
            for segment in line.split("\r"):
                if segment.strip():
                    self._segment(tag, segment.strip(), number)
            return
        if self._model is None:
            self._head.append((line, number))
            self._head_chars += len(line)
            if len(self._head) >= self.HEAD or self._head_chars >= self.HEAD_CHARS:
                self._learn()
            return
        self._raw(line, number)

    def _learn(self) -> None:
        head, self._head = self._head, []
        self._model = LineModel.detect(seg for raw, _ in head for seg in clean(raw).split("\n"))
        allowed = self._model.allowed
        self._rank_tags = tuple(p.pattern for p in PREFIXES
                                if "rank" in p.pattern.groupindex and (p.always or p.kind in allowed))
        for raw, number in head:
            self._raw(raw, number)

    def _tag(self, raw: str) -> str | None:
        """The launcher's rank tag of a raw line (`[rank3]:` -> "3"), remembered by the line's first characters."""
        head = raw[:16]
        known = self._tags.get(head)
        if known is not None:
            return known
        for pattern in self._rank_tags:
            m = pattern.match(raw)
            if m and m.group("rank") is not None:
                tag = str(int(m.group("rank")))
                if m.end() <= len(head) and len(self._tags) < 4096:
                    self._tags[head] = tag  # the tag ends inside `head`: every line starting so has it
                return tag
        return None

    def _raw(self, raw: str, number: int) -> None:
        if self._chose and not self._delimited and self._table is None:
            tag = self._tag(raw)
            if tag != self._chosen and not (tag == "0" and self._chosen is not None):
                if tag not in self._ranks_seen and len(self._ranks_seen) < MAX_RANKS:
                    self._ranks_seen[tag] = None
                return
            if not self._trigger.search(raw):
                return
        for segment in clean(raw).split("\n"):
            if not segment.strip():
                continue
            text, rank = self._split(segment)
            text = text.strip()
            if text:
                self._segment(rank, text, number)

    def _split(self, segment: str) -> tuple[str, str | None]:
        """The line model's split, remembered by the shape of the prefix it took off (digits as 0): the lines
        of one stream share their prefixes' shape (`[rank0]:[titan] 2026-01-01 10:00:00,000 - root - INFO - `);
        the rank tag must be the same too."""
        plen, shape, rank = self._prefix
        if plen and segment[:plen].translate(_DIGITS) == shape and self._tag(segment) == rank:
            return segment[plen:], rank
        assert self._model is not None
        text, parsed = self._model.split(segment)
        rank = None if parsed.rank is None else str(parsed.rank)
        plen = len(segment) - len(text)
        self._prefix = (plen, segment[:plen].translate(_DIGITS), rank)
        return text, rank

    def _segment(self, rank: str | None, text: str, number: int) -> None:
        series = self.series
        if rank not in self._ranks_seen and len(self._ranks_seen) < MAX_RANKS:
            self._ranks_seen[rank] = None
        if len(series.sample) < 8:
            series.sample.append(text[:160])
        self._content_lines += 1
        if self._content_lines == 1:
            self._delimited = delimited_header(text)
            if self._delimited:
                return
        if self._chose and rank != self._chosen and not (rank == "0" and self._chosen is not None):
            return
        record = None
        if self._delimited:
            found = delimited_row(text, *self._delimited)
            if found:
                record = record_of(found, "csv" if self._delimited[0] == "," else "tsv")
        else:
            if self._table is not None:
                row = table_row(text, self._table)
                if row is None:
                    self._table = None  # the table ended
                elif row:
                    record = record_of(row, "table")
            if self._table is None:
                self._table = table_header(text)
                if self._table is None:
                    record = parse_text(text, self.wanted)
        if record is None:
            return
        if record.format == IGNORED:
            if len(series.ignored_keys) < MAX_METRICS:  # kept for the error message only
                series.ignored_keys.update(list(record.metrics))
            return
        if not self._chose:
            self._chose, self._chosen = True, rank
        elif rank != self._chosen:  # rank 0 starts printing after another rank was chosen: read rank 0
            self._chosen, self._stream = rank, _Stream(self.wanted)
            series.formats.clear()
        series.formats[record.format] += 1
        self._stream.add(record, number)

    def result(self) -> MetricSeries:
        if self._head:
            self._learn()
        series, stream = self.series, self._stream
        series.ranks = list(self._ranks_seen)
        series.rank_used = self._chosen
        series.explicit, series.inferred = stream.explicit, stream.inferred
        for name, column in stream.columns.items():
            steps, values, lines, repeats = column.arrays()
            series.points[name] = Points(steps, values, lines)
            if repeats:
                series.repeated[name] = repeats
        series.stats = dict(stream.stats)
        series.stats.update({name: pts.stats() for name, pts in series.points.items()})
        step_list = stream.step_list
        series.steps = len(step_list) if step_list.increasing else len(np.unique(step_list.array()))
        series.metrics_dropped = stream.dropped
        return series


def scan_metrics(source: str | Path | Iterable[str],
                 progress: Callable[[int, int], None] | None = None, keep: Iterable[str] = ()) -> MetricSeries:
    """The metric series of a log file (a Path, streamed) or of text / lines in memory (a str is text).

    `progress(bytes_read, file_size)` is called about every 4 MB of a file. `keep`: names of other metrics
    to read step by step (val_acc, top1, f1: any name, through the vocabulary): a line naming one counts as a
    metric line and its per-step values are kept in `points` like a loss's."""
    extractor = MetricExtractor(keep)
    if isinstance(source, Path):
        total = source.stat().st_size
        next_report = 4 << 20
        # newline="\n": a carriage return (a progress bar redraw) stays inside its line, as a segment; a long
        # line comes in pieces cut at carriage returns (a tqdm log may be one line of 300 MB).
        with open(source, encoding="utf-8", errors="replace", newline="\n") as fh:
            raw = fh.buffer.raw  # type: ignore[attr-defined]
            read = 0  # characters, counted to call progress about every 4 MB whatever the line lengths
            for piece, number, first in pieces(fh, extractor.series.cuts):
                extractor.feed(piece, number, continues=not first)
                if progress is not None:
                    read += len(piece)
                    if read >= next_report:
                        next_report = read + (4 << 20)
                        progress(raw.tell(), total)
    else:
        lines = source.splitlines() if isinstance(source, str) else source
        for line in lines:
            extractor.feed(line)
    return extractor.result()
