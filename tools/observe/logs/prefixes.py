"""The prefix model: a log line's prefixes (ANSI codes, timestamps, rank and worker tags, logger formats) peeled off.

A log's lines carry prefixes its content does not: ANSI colour codes, timestamps (syslog
`Mar 04 07:21:10 `, ISO stamps), launcher tags naming a rank or worker (`[rank3]:`,
`[default0]:`, `0: ` from srun -l, `(Worker pid=12)` from Ray), logger formats
(`2024-03-04 07:21:10,123 - INFO - `, `INFO 03-04 07:21:10 [core.py:12] `, glog
`[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] `). Prefixes are peeled off a line repeatedly
(they stack: `[rank0]:[titan] 2025-... - root - INFO - `); each line keeps its rank, worker
and log level. A prefix found on most lines is decoration; a timestamp or logger prefix on
few lines marks the start of a log record (where an exception message ends).

Ambiguous prefixes (a bare `0: `, a `> ` quote, `[12] ` line numbers, `stdout: ` relays)
only count when most lines carry them: `LineModel.detect` learns which from a sample, so a
streaming reader detects on the head of a file and applies the model to the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from rootcause.tools.observe.logs.traceback_lines import type_pattern

# Also a colour code whose ESC a paste dropped, where Ray puts one: `[36m(WorkerDict pid=2381)[0m Traceback`.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][AB012]|"
                   r"\[\d{1,2}(?:;\d{1,2})*m(?=\()|(?<=\))\[0?m(?=\s|$)")
LEVELS = r"(?P<level>TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_TIME = r"\d\d:\d\d:\d\d(?:[.,]\d+)?"
ISO = rf"\d{{4}}[-/]\d\d[-/]\d\d[T _]{_TIME}(?:Z|\s?[+-]\d\d:?\d\d)?"


@dataclass(frozen=True)
class Prefix:
    kind: str
    pattern: re.Pattern[str]
    always: bool
    """Stripped wherever found; otherwise only when most lines of the log carry it."""
    record: bool = False
    """On few lines, it starts a log record (a logger line); on most, it is decoration."""
    rival: str | None = None
    """An ambiguous prefix that is also used when few lines carry it, unless more lines carry this rival
    instead (`<stamp> - ` is a format, unless most stamped lines have no dash: then the dash is content)."""


def _p(kind: str, pattern: str, always: bool = True, record: bool = False, rival: str | None = None) -> Prefix:
    return Prefix(kind, re.compile(pattern), always, record, rival)


PREFIXES: tuple[Prefix, ...] = (
    # Launchers' rank and worker tags.
    # A host may stand before the tag (`node1: [rank0]:`), an exception type may not (`RuntimeError: [Rank 0]: ...`
    # is PyTorch's message naming the rank).
    _p("rank", rf"^(?:(?!{type_pattern()}\b)[\w.\-]+:\s)?\[(?:rank|Rank|RANK)\s?(?P<rank>\d+)\]:\s?"),
    _p("rank", r"^\[(?:default|trainer|worker|role)(?P<rank>\d+)\]:\s?"),
    # A launcher's tag without a role name (`[0]:`): when most lines carry it.
    _p("rank", r"^\[(?P<rank>\d{1,4})\]:\s?", always=False),
    _p("rank", r"^(?:rank|Rank|RANK)\s+(?P<rank>\d+):\s"),
    # Open MPI's --tag-output: `[jobid,rank]<stderr>:`.
    _p("rank", r"^\[\d+,(?P<rank>\d+)\]<std(?:out|err|diag)>:\s?"),
    _p("worker", r"^\((?P<worker>[\w.\-]+)?\s*(?:rank=(?P<rank>\d+)\s*)?pid=(?P<pid>\d+)(?:,\s*ip=[\w.:\-]+)?\)\s?"),
    _p("srun", r"^\s{0,3}(?P<rank>\d{1,4}): ", always=False),
    # docker compose: `trainer-1  | ` (v2), `proj_trainer_1  | ` (v1).
    _p("compose", r"^(?P<worker>[\w.\-]+[-_]\d+)\s+\|\s?", always=False),
    # kubectl logs --prefix: `[pod/trainer-0/trainer] `.
    _p("kubectl", r"^\[(?P<worker>pod/[\w.\-]+/[\w.\-]+)\]\s?"),
    # pdsh (DeepSpeed's multi-node launcher) and clush: `worker-3: `, `gpu-node-12.cluster: `.
    _p("host", r"^(?P<worker>[A-Za-z][\w]*(?:[-.][\w]+)*[-.][\w]*\d): ", always=False),
    # Timestamps and collectors (a stamp may end the line: a blank line of a stamped log, trailing space trimmed).
    _p("syslog", rf"^[A-Z][a-z]{{2}} [ \d]\d {_TIME}(?: [\w.\-]+ [\w.\-/]+(?:\[\d+\])?:)?(?:\s|$)", record=True),
    _p("iso-dash", rf"^\[?{ISO}\]?:?\s+-(?:\s|$)", always=False, record=True, rival="iso"),
    _p("iso", rf"^\[?{ISO}\]?:?(?:\s|$)", record=True),
    # What follows a stamp: journalctl -o short-iso's `<host> <process>[<pid>]: `, a CRI (containerd, CRI-O) log
    # file's `stderr F `.
    _p("journal", r"^[\w.\-]+ [\w.\-/]+\[\d+\]:(?:\s|$)", always=False),
    _p("cri", r"^std(?:out|err) [FP](?:\s|$)"),
    _p("iso-minutes", r"^ ?\d{4}-\d\d-\d\d \d\d:\d\d ", record=True),
    # rich's and loguru's clocks may write the fraction after a dash (`18:52:24-907213 INFO`).
    _p("time", rf"^\[?(?:{_TIME}|\d\d:\d\d:\d\d-\d+)\]?\s", always=False, record=True),
    _p("lineno", r"^\[\d+\] ", always=False),
    _p("quote", r"^> ?", always=False),
    _p("relay", r"^\[std(?:out|err)\]\s?|^std(?:out|err): ", always=False),
    # Logger formats (they keep the level).
    _p("glog", rf"^\[?(?P<glevel>[IWEF])\d{{3,4}} {_TIME}\s+(?:\d+ )?[\w.\-/]+:\d+\]\s?", record=True),
    # c10's logging before it printed a date: `[E ProcessGroupNCCL.cpp:916] `, `[W socket.cpp:464] `.
    _p("c10-level", r"^\[(?P<glevel>[IWEF]) [\w.\-/]+\.(?:cpp|cc|cu|h|hpp):\d+\]\s?", record=True),
    _p("vllm", rf"^{LEVELS} \d\d-\d\d {_TIME} (?:\[[\w.\-]+:\d+\]|[\w.\-]+:\d+\]) ", record=True),
    _p("hf", rf"^\[{LEVELS}\|[\w.\-]+:\d+\] (?:{ISO} )?>> ", record=True),
    _p("deepspeed", rf"^\[{LEVELS}\] \[[\w.\-]+:\d+:\w+\] ", record=True),
    _p("bracket-level", rf"^\[{LEVELS}\](?:\[[\w.\-]+\])?\s*(?:-\s)?", record=True),
    _p("bracket-name", r"^\[(?:titan|torchtitan|accelerate[\w.]*|lightning[\w.]*|transformers[\w.]*)\]\s?",
       record=True),
    # After a stamp, pipes around the level: FastChat's `| ERROR | stderr | `, loguru's `| ERROR    | mod:fn:42 - `.
    _p("pipe-level", rf"^\|\s*{LEVELS}\s*\|\s*[\w.:<>\-]+(?:\s*\|\s?|\s+-\s)", record=True),
    _p("dash-level", rf"^(?:-\s+)?(?:[\w.\-<>]+ - )?{LEVELS} - ", record=True),
    _p("colon-level", rf"^{LEVELS}:(?:[\w.\-]+:)?(?=\S)", record=True),
    # Not pytest's `ERROR tests/t.py::test - ...` summary nor unittest's `ERROR: test_x (mod.Class)`.
    _p("level", rf"^{LEVELS}(?::\s|\s+-?\s*)(?=\S)(?!\S*(?:::|\.py\b))(?!\w+ \([\w.]+\)$)", record=True),
)
_KINDS = {p.kind: p for p in PREFIXES}


_FAMILY = {p.kind: p.rival or p.kind for p in PREFIXES}


def _layers(kinds: list[str]) -> list[str]:
    """A line's prefixes as layers: rivals as one kind, a kind's second use tagged (`iso#2`: a collector's stamp and
    the program's own are two layers, each decoration or record start on its own)."""
    out: list[str] = []
    seen: dict[str, int] = {}
    for kind in kinds:
        family = _FAMILY[kind]
        n = seen[family] = seen.get(family, 0) + 1
        out.append(family if n == 1 else f"{family}#{n}")
    return out
_GLOG_LEVEL = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "FATAL"}
_MAX_PEEL = 8


@dataclass(frozen=True)
class Line:
    index: int
    """0-based position in the text (after a flattened traceback is unfolded, positions are of the unfolded text)."""
    rank: int | None
    text: str
    worker: str | None = None
    """A non-rank stream the line came from (`pid=123` of a Ray or vLLM worker, `tb2` for an interleaved
    traceback told apart by its structure)."""
    level: str | None = None
    """The log level its logger prefix named (ERROR, WARNING, ...)."""
    record: bool = False
    """The line starts a log record (a logger prefix the log does not put on every line)."""

    @property
    def stream(self) -> tuple[int | None, str | None]:
        """Where the line came from: its rank and worker ((None, None): unprefixed)."""
        return self.rank, self.worker


def clean(text: str) -> str:
    """ANSI escapes and byte-order marks removed, CRLF and lone CR (progress bars) turned into line breaks."""
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")


@dataclass
class Parsed:
    rank: int | None = None
    worker: str | None = None
    level: str | None = None
    kinds: list[str] = field(default_factory=list)


@lru_cache(maxsize=32)
def _combined(allowed: frozenset[str] | None) -> tuple[re.Pattern[str], dict[int, tuple[tuple[str, str], ...]]]:
    """All usable prefixes as one alternation (one match per peel); alternative i is group `p<i>`, its
    named groups `g<i>_<name>`."""
    parts: list[str] = []
    names: dict[int, tuple[tuple[str, str], ...]] = {}
    for i, prefix in enumerate(PREFIXES):
        if not prefix.always and allowed is not None and prefix.kind not in allowed:
            continue
        body = re.sub(r"\(\?P<(\w+)>", lambda m, i=i: f"(?P<g{i}_{m.group(1)}>", prefix.pattern.pattern)
        parts.append(f"(?P<p{i}>{body})")
        names[i] = tuple((name, f"g{i}_{name}") for name in prefix.pattern.groupindex)
    return re.compile("|".join(parts)), names


def peel(line: str, allowed: frozenset[str] | None) -> tuple[str, Parsed]:
    """Strip stacked prefixes; `allowed` None strips the ambiguous ones too (used while detecting)."""
    parsed = Parsed()
    pattern, names = _combined(allowed)
    for _ in range(_MAX_PEEL):
        m = pattern.match(line)
        if not m or not m.end():
            break
        i = int(m.lastgroup[1:])
        prefix = PREFIXES[i]
        # Prefixes of one kind stack too (a collector's stamp before the program's own stamp), but a second
        # bare `0: ` is content.
        if prefix.kind == "srun" and (parsed.rank is not None or "srun" in parsed.kinds):
            break
        groups = {name: m.group(group) for name, group in names[i]}
        if groups.get("rank") is not None and parsed.rank is None:
            parsed.rank = int(groups["rank"])
        if prefix.kind == "worker":
            parsed.worker = f"{groups.get('worker') or 'worker'} pid={groups['pid']}"
        elif prefix.kind in ("compose", "kubectl", "host") and parsed.worker is None:
            parsed.worker = groups["worker"]
        level = groups.get("level") or _GLOG_LEVEL.get(groups.get("glevel") or "")
        if level and parsed.level is None:
            parsed.level = "WARNING" if level == "WARN" else level
        parsed.kinds.append(prefix.kind)
        line = line[m.end():]
    return line, parsed


@dataclass(frozen=True)
class LineModel:
    """Which ambiguous prefixes a log uses, and which prefixes are on most of its lines (decoration)."""

    allowed: frozenset[str] = frozenset()
    everywhere: frozenset[str] = frozenset()
    """Prefixes on (nearly) every line: decoration, not the start of a record."""

    @classmethod
    def detect(cls, sample: Iterable[str], threshold: float = 0.5, decoration: float = 0.97) -> LineModel:
        counts: dict[str, int] = {}
        total = 0
        for raw in sample:
            if not raw.strip():
                continue
            text, parsed = peel(raw, None)
            if not text.strip():
                continue  # a blank line under a stamp: no layer of the program's own to count
            total += 1
            for kind in {*parsed.kinds, *_layers(parsed.kinds)}:
                counts[kind] = counts.get(kind, 0) + 1
        if not total:
            return cls()
        frequent = {k for k, c in counts.items() if c > threshold * total}
        allowed = frozenset(p.kind for p in PREFIXES if not p.always and (
            p.kind in frequent or (p.rival and counts.get(p.kind, 0) >= counts.get(p.rival, 0) and p.kind in counts)))
        return cls(allowed, frozenset(k for k, c in counts.items() if c >= decoration * total))

    def split(self, raw: str) -> tuple[str, Parsed]:
        """The line's content without its prefixes, and what the prefixes said."""
        text, parsed = peel(raw, self.allowed)
        return text, parsed

    def line(self, index: int, raw: str) -> Line:
        return self.make(index, *self.split(raw))

    def make(self, index: int, text: str, parsed: Parsed) -> Line:
        """The Line of a split line."""
        kinds = parsed.kinds
        if not kinds:
            record = False
        elif len(kinds) == 1:
            prefix = _KINDS[kinds[0]]
            record = prefix.record and (prefix.rival or prefix.kind) not in self.everywhere
        else:
            record = any(_KINDS[k].record and layer not in self.everywhere
                         for k, layer in zip(kinds, _layers(kinds), strict=True))
        return Line(index, parsed.rank, text.rstrip(), parsed.worker, parsed.level, record)
