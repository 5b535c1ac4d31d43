"""Interleaved tracebacks without prefixes (several processes writing one stderr), told apart by structure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rootcause.tools.observe.logs.prefixes import Line, Parsed
from rootcause.tools.observe.logs.traceback_lines import (
    FRAME_START,
    SUFFIXES,
    TRACEBACK_HEADER,
    exception_named,
    type_pattern,
)

_EXC = exception_named("start", "colon")
_CARET = re.compile(r"^\s*[\^~]+\s*$")
# Another process's `RuntimeError` written right after this line's last word, its `: message` on the next line.
_GLUED_TYPE = re.compile(rf"(?<=[a-z0-9)\]])(?P<type>{type_pattern(warnings=False)})$")


def unglue(split: list[tuple[str, Parsed]]) -> list[tuple[str, Parsed]]:
    """Two processes' writes glued into each other (`...for send operation to completeRuntimeError` then
    `: [...] Timed out ...`), prefixes peeled: the first line ends where the other's exception type begins,
    which heads the next line."""
    out = list(split)
    for i in range(len(out) - 1):
        (text, parsed), (after, parsed_after) = out[i], out[i + 1]
        if after.startswith(": ") and text.endswith(SUFFIXES):
            m = _GLUED_TYPE.search(text)
            if m:
                out[i], out[i + 1] = (text[:m.start()], parsed), (m.group("type") + after, parsed_after)
    return out


def demux(lines: list[Line]) -> list[Line]:
    """Give each of several interleaved unprefixed tracebacks its own worker label (`tb1`, `tb2`, ...).

    Only where a traceback header appears while another traceback of the same stream is still
    listing frames. Each line goes to the open traceback whose structure expects it: a `File` line
    to the oldest one expecting a frame, a code line to the oldest one expecting code, an exception
    line to the oldest one with frames.
    """
    out = list(lines)
    open_at: dict[object, int] = {}
    interleaved: set[object] = set()
    for i, ln in enumerate(lines):
        key = ln.stream
        if TRACEBACK_HEADER.search(ln.text):
            if key in open_at:
                interleaved.add(key)
            open_at[key] = i
        elif key in open_at and _EXC.match(ln.text):
            del open_at[key]
    if not interleaved:
        return out
    for key in interleaved:
        _demux_stream([i for i, ln in enumerate(lines) if ln.stream == key], out)
    return out


@dataclass
class _Open:
    label: str
    expect: str  # "frame" (a File or exception line next) or "code"
    frames: int = 0


def _demux_stream(positions: list[int], out: list[Line]) -> None:
    active: list[_Open] = []
    closed: _Open | None = None
    last: _Open | None = None
    count = 0
    for i in positions:
        ln = out[i]
        text = ln.text
        target: _Open | None = None
        if TRACEBACK_HEADER.search(text):
            count += 1
            target = _Open(f"tb{count}", "frame")
            active.append(target)
            closed = None
        elif not active:
            continue
        elif FRAME_START.match(text):
            target = next((t for t in active if t.expect == "frame"), active[0])
            target.expect, target.frames = "code", target.frames + 1
        elif _CARET.match(text):
            target = last
        elif _EXC.match(text.strip()) and not text.startswith(" "):
            target = next((t for t in active if t.expect == "frame" and t.frames), None) or \
                next((t for t in active if t.frames), active[0])
            active.remove(target)
            closed = target
        elif text.startswith((" ", "\t")) and text.strip():
            target = next((t for t in active if t.expect == "code"), None) or last
            if target is not None and target.expect == "code":
                target.expect = "frame"
        elif not text.strip():
            closed = None
        else:
            target = closed
        if target is None:
            continue
        last = target
        worker = f"{ln.worker} {target.label}" if ln.worker else target.label
        out[i] = Line(ln.index, ln.rank, ln.text, worker, ln.level, ln.record)
