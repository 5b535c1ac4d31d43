"""Raw log text to lines: ANSI codes removed, rank prefixes split off into a rank number.

Launchers prefix worker output in several ways (`[rank3]:` from PyTorch, `[default0]:` from
torchrun --tee, `rank 2:`, `[1,0]<stderr>:` from mpirun, `0: ` from srun --label, sometimes
behind a `host: ` prefix from pdsh). Lines keep their order; each carries the rank it came
from so that interleaved tracebacks can be read back one rank at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_PREFIXES: tuple[re.Pattern[str], ...] = (
    re.compile(r"^(?:[\w.\-]+:\s)?\[(?:rank|Rank|RANK)\s?(\d+)\]:\s?"),
    re.compile(r"^\[(?:default|trainer|worker|role)(\d+)\]:\s?"),
    re.compile(r"^(?:rank|Rank|RANK)\s+(\d+):\s"),
    re.compile(r"^\[(\d+),\d+\]<std(?:out|err)>:\s?"),
)
_SRUN = re.compile(r"^\s{0,3}(\d{1,4}): ")
# Prefixes a log viewer or collector puts on every line (line numbers, timestamps): stripped when most lines
# carry one, so that the traceback and rank prefixes behind them parse.
_LINE_DECOR = (
    re.compile(r"^\[\d+\] "),
    re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s"),
    re.compile(r"^\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?\]\s"),
    re.compile(r"^ ?\d{4}-\d\d-\d\d \d\d:\d\d "),
    re.compile(r"^> ?"),  # a log quoted in an issue comment
    re.compile(r"^\[std(?:out|err)\]|^std(?:out|err): "),  # a launcher relaying its children's streams
    re.compile(r"^\(\w+ pid=\d+(?:, ip=[\d.]+)?\) "),  # Ray: the actor or task a line came from
)


@dataclass(frozen=True)
class Line:
    index: int
    rank: int | None
    text: str


def clean(text: str) -> str:
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")


def split_lines(text: str) -> list[Line]:
    raw = clean(text).split("\n")
    nonblank = [r for r in raw if r.strip()]
    for decor in _LINE_DECOR:
        if nonblank and sum(1 for r in nonblank if decor.match(r)) > 0.6 * len(nonblank):
            raw = [decor.sub("", r, count=1) for r in raw]
            nonblank = [r for r in raw if r.strip()]
    # srun --label's bare "N: " prefix is only trusted when most lines carry it.
    srun = bool(nonblank) and sum(1 for r in nonblank if _SRUN.match(r)) > 0.6 * len(nonblank)
    lines: list[Line] = []
    for index, line in enumerate(raw):
        rank = None
        for pattern in _PREFIXES:
            m = pattern.match(line)
            if m:
                rank, line = int(m.group(1)), line[m.end():]
                break
        else:
            if srun:
                m = _SRUN.match(line)
                if m:
                    rank, line = int(m.group(1)), line[m.end():]
        lines.append(Line(index, rank, line.rstrip()))
    return lines


def streams(lines: list[Line]) -> dict[int | None, list[Line]]:
    """Lines grouped by rank (None: unprefixed), each group in log order."""
    grouped: dict[int | None, list[Line]] = {}
    for line in lines:
        grouped.setdefault(line.rank, []).append(line)
    return grouped
