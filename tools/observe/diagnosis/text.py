"""Raw log text to lines, through the one line model (rootcause.tools.observe.logs.lines), grouped into streams.

Lines keep their order; each carries the rank (or worker) it came from so that interleaved
tracebacks can be read back one stream at a time.
"""

from __future__ import annotations

from rootcause.tools.observe.logs.lines import Line, clean, split_lines

__all__ = ["Line", "clean", "split_lines", "streams"]


def streams(lines: list[Line]) -> dict[tuple[int | None, str | None], list[Line]]:
    """Lines grouped by stream (rank and worker; (None, None): unprefixed), each group in log order."""
    grouped: dict[tuple[int | None, str | None], list[Line]] = {}
    for line in lines:
        grouped.setdefault(line.stream, []).append(line)
    return grouped
