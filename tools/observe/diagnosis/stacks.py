"""Stack dumps of hung processes (py-spy dump, faulthandler) to per-process summaries.

Both formats list the innermost frame first; summaries keep innermost last. Of several
threads, the one waiting in a collective is kept, else the main / current thread. A frame
whose function is a torch.distributed collective marks the process as waiting in it.
"""

from __future__ import annotations

import re
from pathlib import Path

from rootcause.tools.observe.diagnosis.frames import display_module, resolve_in_root
from rootcause.tools.observe.diagnosis.models import Frame, StackSummary
from rootcause.tools.observe.logs.traceback_lines import FAULTHANDLER_FRAME

COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast", "broadcast_object_list", "barrier",
    "monitored_barrier", "all_to_all", "all_to_all_single", "reduce", "gather", "scatter", "send", "recv",
    "isend", "irecv", "batch_isend_irecv", "gather_object", "scatter_object_list", "all_reduce_coalesced",
    "all_gather_coalesced", "_store_based_barrier", "allreduce", "allgather",
})
_PYSPY_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_PYSPY_THREAD = re.compile(r'^Thread (?:0x[0-9A-Fa-f]+|\d+) \((\w+)\)(?:: "(.*)")?')
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file>[^():]+):(?P<line>\d+)\)\s*$")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[[^\]]*\])? \(most recent call first\):|"
                        r"^Stack \(most recent call first\):")
_FATAL = re.compile(r"^Fatal Python error: |^Timeout \(\d+:\d\d:\d\d\)!")


def collective_of(frames: list[Frame]) -> str | None:
    """The innermost collective on a stack (frames outermost first)."""
    for frame in reversed(frames):
        if frame.function in COLLECTIVES and ("distributed" in frame.file or "c10d" in frame.file
                                              or frame.function not in {"send", "recv", "reduce", "gather",
                                                                        "scatter", "broadcast"}):
            return frame.function
    return None


def threads(text: str) -> list[tuple[str, list[Frame]]]:
    """(thread label, frames outermost first) for every thread in a py-spy or faulthandler dump."""
    threads: list[tuple[str, list[Frame]]] = []
    label, frames = None, []
    for line in text.splitlines():
        m = _PYSPY_THREAD.match(line) or _FH_THREAD.match(line)
        if m:
            if label is not None:
                threads.append((label, list(reversed(frames))))
            label, frames = line, []
            continue
        if label is None:
            continue
        f = FAULTHANDLER_FRAME.match(line) or _PYSPY_FRAME.match(line)
        if f:
            frames.append(Frame(file=f.group("file"), line=int(f.group("line")), function=f.group("func")))
        elif line.strip() and not line.startswith(" "):
            threads.append((label, list(reversed(frames))))
            label, frames = None, []
    if label is not None:
        threads.append((label, list(reversed(frames))))
    return [(lbl, fr) for lbl, fr in threads if fr]


def main_frames(text: str) -> list[Frame]:
    """The frames of the thread that matters: one waiting in a collective, else the main / current one."""
    found = threads(text)
    if not found:
        return []
    chosen = next(((lbl, fr) for lbl, fr in found if collective_of(fr)), None)
    chosen = chosen or next(((lbl, fr) for lbl, fr in found
                             if "Current thread" in lbl or "MainThread" in lbl), found[0])
    return chosen[1]


def summarise(text: str, root: Path, pid: int | None = None, rank: int | None = None,
              keep: int = 12) -> StackSummary | None:
    frames = main_frames(text)
    if not frames:
        return None
    shown = [f"{display_module(f.file, root)}:{f.function} ({Path(f.file).name}:{f.line})" for f in frames[-keep:]]
    return StackSummary(pid=pid, rank=rank, frames=shown, collective=collective_of(frames),
                        user_frame=user_frame(frames, root))


def user_frame(frames: list[Frame], root: Path) -> str | None:
    """The innermost frame inside the root, as `file:line` relative to the root."""
    for frame in reversed(frames):
        rel = resolve_in_root(frame.file, str(root))
        if rel:
            return f"{rel}:{frame.line}" if frame.line else rel
    return None


def stacks_in_log(text: str, root: Path, limit: int = 16) -> list[StackSummary]:
    """Dumps embedded in a log: py-spy `Process N:` blocks or faulthandler blocks, one summary each.

    Read one stream at a time (a rank's `[rank1]:` lines), so interleaved dumps of several ranks
    stay apart and each summary keeps its rank."""
    from rootcause.tools.observe.diagnosis.text import split_lines, streams

    found: list[StackSummary] = []
    for (rank, _), stream in streams(split_lines(text)).items():
        for block_pid, lines in _blocks([ln.text for ln in stream]):
            summary = summarise("\n".join(lines), root, pid=block_pid, rank=rank)
            if summary:
                found.append(summary)
    found.sort(key=lambda s: (s.rank is None, s.rank or 0))
    return found[:limit]


def _blocks(texts: list[str]) -> list[tuple[int | None, list[str]]]:
    blocks: list[tuple[int | None, list[str]]] = []
    current: list[str] | None = None
    pid: int | None = None
    for line in texts:
        p = _PYSPY_PROCESS.match(line)
        if p or _FATAL.match(line):
            if current:
                blocks.append((pid, current))
            pid = int(p.group(1)) if p else None
            current = []
            continue
        if current is None and _FH_THREAD.match(line):
            current, pid = [], None
        if current is not None:
            current.append(line)
    if current:
        blocks.append((pid, current))
    return blocks
