"""Big logs without loading them: the head, the tail and windows around error markers.

A multi-GB log is scanned in 4 MB chunks (read into one reused buffer: memory stays
constant) with one compiled pre-filter, an RE2 automaton over the bytes (a DFA: one pass,
hundreds of MB/s, where Python's backtracking `re` tries every alternative at every
position); the first and last matches keep a window of text around them. The windows, in
file order, form a condensed text of at most a few MB that the parsers read like a small log.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import re2

SMALL_LOG = 2_000_000
CHUNK = 4 * 1024 * 1024
HEAD = 64 * 1024
TAIL = 256 * 1024
BEFORE, AFTER = 4 * 1024, 24 * 1024
KEEP_FIRST, KEEP_LAST = 40, 40

_MARKERS = re2.compile(
    rb"Traceback \(most recent call last\)|Root Cause \(first observed|Watchdog caught|Fatal Python error|"
    rb"Segmentation fault|out of memory|Killed|terminate called|short test summary|= FAILURES =|"
    rb"Timed out|timed out|Error: |Exception: |most recent call first|\b(?:nan|NaN)\b|Signal \d+ \(|"
    rb"CANCELLED AT|oom-kill|double free|srun: error|core dumped|Aborted|error: "
)
OVERLAP = 256


def _windows(path: Path, size: int) -> list[tuple[int, int]]:
    first: list[int] = []
    last: deque[int] = deque(maxlen=KEEP_LAST)
    buffer = bytearray(CHUNK + OVERLAP)
    view = memoryview(buffer)
    with open(path, "rb") as fh:
        offset = 0
        while offset < size:
            base = max(0, offset - OVERLAP)
            fh.seek(base)
            got = fh.readinto(view[:min(CHUNK + (offset - base), size - base)])
            if not got:
                break
            for m in _MARKERS.finditer(view[:got]):
                at = base + m.start()
                if at < offset:
                    continue
                if len(first) < KEEP_FIRST:
                    if not first or at - first[-1] > AFTER:
                        first.append(at)
                elif not last or at - last[-1] > AFTER:
                    last.append(at)
            offset += CHUNK
    spans = [(0, min(size, HEAD))]
    spans += [(max(0, at - BEFORE), min(size, at + AFTER)) for at in [*first, *last]]
    spans.append((max(0, size - TAIL), size))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def condensed_text(path: Path, end: int | None = None) -> str:
    """The file (up to byte `end`) when small, else head + marker windows + tail, cut at line boundaries."""
    size = path.stat().st_size if end is None else min(end, path.stat().st_size)
    if size <= SMALL_LOG:
        with open(path, "rb") as fh:
            return fh.read(size).decode("utf-8", "replace")
    parts: list[str] = []
    with open(path, "rb") as fh:
        for start, end in _windows(path, size):
            fh.seek(start)
            data = fh.read(end - start)
            if start > 0:
                cut = data.find(b"\n")
                data = data[cut + 1:] if cut >= 0 else b""
            if end < size:
                cut = data.rfind(b"\n")
                data = data[:cut + 1] if cut >= 0 else b""
            if start > 0:
                parts.append(f"… [{start} bytes into the log] …\n")
            parts.append(data.decode("utf-8", "replace"))
    return "".join(parts)
