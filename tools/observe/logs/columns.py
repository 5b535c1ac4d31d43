"""Compact append-only columns for series of millions of points.

Steps and line numbers mostly advance by a constant stride (every step, every 8th line of an
8-rank log, one progress-bar line for all its updates): they are kept as arithmetic runs, a few
bytes per run; a sequence too irregular for runs falls back to a flat array of 4-byte integers
(8-byte once a value needs it). Values stay float64 (array('d')), exact as printed.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import numpy as np

_INT32 = 2**31 - 1
_BLOCK = 1 << 20


class IntSeq:
    """Append-only integers: arithmetic runs (start, stride, count) while they pay, else a flat array."""

    __slots__ = ("_counts", "_flat", "_len", "_next", "_starts", "_stride", "_strides", "increasing", "last")

    def __init__(self) -> None:
        self._starts, self._strides, self._counts = array("q"), array("q"), array("q")
        self._flat: array | None = None
        self._len = 0
        self._next: int | None = None  # the value that continues the current run (None: no run of 2 yet)
        self._stride = 0
        self.last: int | None = None
        self.increasing = True
        """Every value above the one before it."""

    def __len__(self) -> int:
        return self._len

    def append(self, value: int) -> None:
        if value == self._next:  # the run goes on (the common case; `increasing` was settled by its stride)
            self._counts[-1] += 1
            self._len += 1
            self.last = value
            self._next = value + self._stride
            return
        if self.last is not None and value <= self.last:
            self.increasing = False
        self._len += 1
        previous, self.last = self.last, value
        self._next = None
        if self._flat is not None:
            self._append_flat(value)
            return
        counts = self._counts
        if counts and counts[-1] == 1:
            self._stride = self._strides[-1] = value - previous  # type: ignore[operator]
            counts[-1] = 2
            self._next = value + self._stride
        else:
            self._starts.append(value)
            self._strides.append(0)
            counts.append(1)
            if len(counts) > 64 and 6 * len(counts) > self._len:  # runs cost 24 bytes: worse than 4 per value
                self._to_flat()

    def _append_flat(self, value: int) -> None:
        flat = self._flat
        assert flat is not None
        if flat.typecode == "i" and not -_INT32 <= value <= _INT32:
            flat = self._flat = array("q", flat)
        flat.append(value)

    def _to_flat(self) -> None:
        values = self.array()
        self._flat = array("q" if len(values) and (values.max() > _INT32 or values.min() < -_INT32) else "i",
                           values.tolist())
        self._starts, self._strides, self._counts = array("q"), array("q"), array("q")

    def lookup(self) -> np.ndarray | RunInts:
        """The values for reading by index: the flat array, else the runs themselves (a few bytes, not 4 a value)."""
        if self._flat is not None or not self._len:
            return self.array()
        return RunInts(np.frombuffer(self._starts, dtype=np.int64), np.frombuffer(self._strides, dtype=np.int64),
                       np.frombuffer(self._counts, dtype=np.int64))

    def array(self) -> np.ndarray:
        """The values as int32 when they fit, else int64."""
        if self._flat is not None:
            return np.frombuffer(self._flat, dtype=np.int32 if self._flat.typecode == "i" else np.int64)
        if not self._len:
            return np.zeros(0, np.int32)
        starts = np.frombuffer(self._starts, dtype=np.int64)
        strides = np.frombuffer(self._strides, dtype=np.int64)
        counts = np.frombuffer(self._counts, dtype=np.int64)
        ends = starts + strides * (counts - 1)
        wide = max(int(starts.max()), int(ends.max())) > _INT32 or min(int(starts.min()), int(ends.min())) < -_INT32
        dtype = np.int64 if wide else np.int32
        if len(counts) == 1:
            start, stride, count = int(starts[0]), int(strides[0]), int(counts[0])
            return np.arange(start, start + stride * count, stride, dtype) if stride else np.full(count, start, dtype)
        out = np.empty(self._len, dtype)
        at = 0
        for start, stride, count in zip(starts.tolist(), strides.tolist(), counts.tolist(), strict=True):
            for done in range(0, count, _BLOCK):  # a long run in blocks: no temporary of the run's size
                n = min(_BLOCK, count - done)
                first = start + stride * done
                out[at:at + n] = np.arange(first, first + stride * n, stride, dtype) if stride else first
                at += n
        return out


class RunInts:
    """Integers kept as arithmetic runs and read by index: a column's line numbers, which are only ever looked up
    a few at a time (a spike's line, the first non-finite value's), so they are never laid out in full."""

    __slots__ = ("_ends", "_starts", "_strides")

    def __init__(self, starts: np.ndarray, strides: np.ndarray, counts: np.ndarray) -> None:
        self._starts, self._strides = starts.copy(), strides.copy()
        self._ends = np.cumsum(counts)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __getitem__(self, key: int | np.integer | slice) -> int | np.ndarray:
        if isinstance(key, slice):
            return np.asarray(self)[key]
        i = int(key)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {key} out of range for {n} values")
        run = int(np.searchsorted(self._ends, i, side="right"))
        before = int(self._ends[run - 1]) if run else 0
        return int(self._starts[run]) + int(self._strides[run]) * (i - before)

    def __iter__(self) -> Iterator[int]:
        return iter(np.asarray(self).tolist())

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        counts = np.diff(self._ends, prepend=0)
        out = np.repeat(self._starts, counts) + np.repeat(self._strides, counts) * (
            np.arange(len(self)) - np.repeat(self._ends - counts, counts))
        return out if dtype is None else out.astype(dtype)


class Column:
    """Append-only (step, value, line) triples of one metric; the first value printed for a step is kept."""

    __slots__ = ("lines", "steps", "values")

    def __init__(self) -> None:
        self.steps = IntSeq()
        self.values = array("d")
        self.lines = IntSeq()

    def add(self, step: int, value: float, line: int) -> None:
        if step == self.steps.last:
            return  # an eval line repeating the step does not replace its value
        self.steps.append(step)
        self.values.append(value)
        self.lines.append(line)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | RunInts, int]:
        """(steps, values, lines, repeats): sorted by step, one value per step (the first printed); `repeats`
        values dropped at steps printed again (a resumed run). Lines may be runs read by index (RunInts)."""
        steps = self.steps.array()
        values = np.frombuffer(self.values, dtype=np.float64) if self.values else np.zeros(0)
        if self.steps.increasing:
            return steps, values, self.lines.lookup(), 0
        order = np.argsort(steps, kind="stable")
        unique, first = np.unique(steps[order], return_index=True)
        keep = order[first]
        return unique, values[keep], self.lines.array()[keep], len(steps) - len(unique)
