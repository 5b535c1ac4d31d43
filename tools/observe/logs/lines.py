"""The one line model of every log reader: raw log text to normalised lines.

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

Before any of that, `raw_lines` undoes what a paste or a collector did to the whole text (HTML
entities, JSON log records, an indented, quoted or double-spaced paste, newest-first order, a
terminal's hard wrap); after it, tracebacks flattened onto one line are unfolded, keeping the
line's rank. tests/test_diagnosis_shapes.py checks that every such shape keeps a corpus log's
diagnosis.

API: `clean`, `raw_lines`, `Line`, `LineModel` (`detect`, `split`, `make`), `split_lines`,
`iter_lines`, `unflatten`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][AB012]")
LEVELS = r"(?P<level>TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_TIME = r"\d\d:\d\d:\d\d(?:[.,]\d+)?"
_ISO = rf"\d{{4}}[-/]\d\d[-/]\d\d[T _]{_TIME}(?:Z|\s?[+-]\d\d:?\d\d)?"


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
    _p("rank", r"^(?:(?![\w.]*(?:Error|Exception|Warning)\b)[\w.\-]+:\s)?\[(?:rank|Rank|RANK)\s?(?P<rank>\d+)\]:\s?"),
    _p("rank", r"^\[(?:default|trainer|worker|role)(?P<rank>\d+)\]:\s?"),
    _p("rank", r"^(?:rank|Rank|RANK)\s+(?P<rank>\d+):\s"),
    _p("rank", r"^\[(?P<rank>\d+),\d+\]<std(?:out|err)>:\s?"),
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
    _p("iso-dash", rf"^\[?{_ISO}\]?:?\s+-(?:\s|$)", always=False, record=True, rival="iso"),
    _p("iso", rf"^\[?{_ISO}\]?:?(?:\s|$)", record=True),
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
    _p("vllm", rf"^{LEVELS} \d\d-\d\d {_TIME} (?:\[[\w.\-]+:\d+\]|[\w.\-]+:\d+\]) ", record=True),
    _p("hf", rf"^\[{LEVELS}\|[\w.\-]+:\d+\] (?:{_ISO} )?>> ", record=True),
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


def _peel(line: str, allowed: frozenset[str] | None) -> tuple[str, Parsed]:
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
            text, parsed = _peel(raw, None)
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
        text, parsed = _peel(raw, self.allowed)
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


_FLAT_TB = re.compile(r"Traceback \(most recent call last\):?\s*(?:\\n|\s)\s*File ")
_FLAT_FRAME = re.compile(r'\s*(?:\\n)?\s*(?=File "[^"]+", line \d+)')
_FLAT_IN = re.compile(r'^(File "[^"]+", line \d+(?:, in [\w.<>]+)?)\s*(.*)$')
_FLAT_EXC = re.compile(r"(?:^|\s)((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure|Timeout))"
                       r"(?::\s|:$|$)")


# PyTorch's C++ errors print these on lines of their own after the message: where a flattened message breaks.
_C10_TRAILERS = re.compile(r"\s+(?=CUDA kernel errors might be asynchronously reported|For debugging consider passing "
                           r"CUDA_LAUNCH_BLOCKING|Compile with `?TORCH_USE_CUDA_DSA|Exception raised from \S+ at |"
                           r"C\+\+ CapturedTraceback:|frame #\d+: )")


def unflatten(raw: str) -> list[str]:
    """A traceback flattened onto one line (a JSON string with `\\n`, a log joining lines) as its lines."""
    if not _FLAT_TB.search(raw):
        return [raw]
    if "\\n" in raw:
        return raw.replace('\\"', '"').replace("\\'", "'").replace("\\t", "    ").split("\\n")
    head, _, rest = raw.partition("Traceback (most recent call last)")
    out = [f"{head}Traceback (most recent call last):"] if head.strip() else ["Traceback (most recent call last):"]
    parts = [p for p in _FLAT_FRAME.split(rest.lstrip(":").strip()) if p.strip()]
    for n, part in enumerate(parts):
        m = _FLAT_IN.match(part.strip())
        if not m:
            out.append(part.strip())
            continue
        out.append(f"  {m.group(1)}")
        tail = m.group(2).strip()
        if n == len(parts) - 1 and tail:
            exc = None
            for found in _FLAT_EXC.finditer(tail):
                exc = found
                break
            if exc:
                code = tail[:exc.start(1)].strip()
                if code:
                    out.append(f"    {code}")
                out.extend(_C10_TRAILERS.split(tail[exc.start(1):].strip()))
                continue
        if tail:
            out.append(f"    {tail}")
    return out


_RULE_END = re.compile(r"([^\w\s^~])\1\1$")  # a line ending in a rule (====, ____) is filled to the width on purpose


def _head(line: str) -> str:
    """A line's first word with its punctuation (`Epoch:`), how a record format starts each line."""
    return line.split(None, 1)[0] if line.strip() else ""


# What starts a line of its own: a prefix, pytest's `E   ` marker, a traceback's structure, an exception line.
# (A frame's `File "` unindented is a flattened traceback's wrap.)
_LINE_START = re.compile(r'[A-Z]\s{3,}|Traceback \(|\s+File "|(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Warning|'
                         r"Interrupt|Exit):|\S+\.py:\d+:")
# What goes on with a token the line before cut (`...c10d_logger` / `.py", line 83`), never starts a line.
_GOES_ON = re.compile(r"[.,:;)\]}](?!\.\.)|_[^\W_]|['\"](?=[\s,.:;)\]}]|$)|/(?=\w)")
_TOKEN = re.compile(r"[\w./\-]")
_OPENS = "=([{/"  # a line that ends so expects more on the same line


def _starts_line(text: str) -> bool:
    return bool(_LINE_START.match(text)) or bool(_peel(text, None)[1].kinds)


def _unwrap_width(raw: list[str]) -> list[str]:
    """Lines hard-wrapped at a fixed width (by a terminal or a mail client) joined again.

    The wrap width is the longest line's length. A line of that length breaks when its next line goes
    on with the same token (no space on either side) or the wrap fell on a space (one space on one
    side). A break is clear evidence when it cuts a word in two (letters or digits on both sides), when
    its next line starts with a single space (no line of a log does), or when the line ends in a space
    and the next cannot start a line of its own (below). The log counts as wrapped when
    most lines of that length break and there are 3 clear breaks, or 2 breaks of which one is clear,
    or one clear break that is not between two letters and whose next line cannot start a line of its
    own (it starts in lower case, with a digit, a space or punctuation that goes on with a token)."""
    lengths = [len(r) for r in raw if r.strip()]
    if len(lengths) < 2:
        return raw
    width = max(lengths)
    if width < 60:
        return raw

    # Lines of one fixed-width record format (`Epoch: 6: Step: 555/1511, loss=0.531204, ...`) are as long as
    # each other without being wrapped: a line that starts as most lines start begins a record.
    heads: dict[str, int] = {}
    for r in raw:
        if r.strip():
            heads[_head(r)] = heads.get(_head(r), 0) + 1
    record_head: str | None = max(heads, key=heads.__getitem__)
    if heads[record_head] < 0.5 * len(lengths):
        record_head = None

    def breaks(i: int) -> bool:
        if len(raw[i]) != width or i + 1 >= len(raw) or not raw[i + 1] or _head(raw[i + 1]) == record_head:
            return False
        if not raw[i + 1].strip():
            return raw[i][-1].isspace()  # a line padded with spaces (pytest's reprs) wrapped in its padding
        if _starts_line(raw[i + 1]):
            return False
        end_space, next_space = raw[i][-1].isspace(), raw[i + 1][0].isspace()
        if not end_space and not next_space:
            return True
        # Wrapped on a space: the space ends the line or starts the next, once (an indented line is not that).
        return (end_space and not raw[i][-2:-1].isspace() and not next_space) or \
            (next_space and not end_space and not raw[i + 1][1:2].isspace())

    def continues(i: int) -> bool:
        """The next line cannot start a line: it goes on with a word in lower case, a number or after a space."""
        nxt = raw[i + 1]
        head = _head(nxt)
        return (nxt[0].islower() or nxt[0].isdigit() or nxt[0] == " ") and (not head.endswith(":") or
                                                                              nxt.strip() == head)

    def clear(i: int) -> bool:
        end, nxt = raw[i][-1], raw[i + 1]
        if not nxt.strip():
            return False
        # A token cut in two (`...distributed_` / `c10d.py`), not a sentence's end before the next one.
        token_cut = bool(_TOKEN.match(end) and _TOKEN.match(nxt[0])) and not (end == "." and nxt[0].isupper())
        return token_cut or (not end.isspace() and (nxt[0] == " " or _GOES_ON.match(nxt))) \
            or (end in _OPENS and not nxt[0].isspace()) or (end == " " and not padded and continues(i))

    # Where most lines end in whitespace (an editor's padding), a space at a line's end says nothing.
    padded = sum(1 for r in raw if r.strip() and r[-1].isspace()) > 0.5 * len(lengths)
    at_width = [i for i, r in enumerate(raw) if len(r) == width and not _RULE_END.search(r)]
    broken = [i for i in at_width if breaks(i)]
    evident = [i for i in broken if clear(i)]
    # One break alone: not between two words' letters (`...cuda:0 and` / `cpu! (when`), which is as often a line
    # broken on a space the paste lost (the message then goes on after a space) as a word cut in two.
    single = len(broken) == 1 and evident and not (raw[evident[0]][-1].isalnum() and raw[evident[0] + 1][0].isalnum()) \
        and (continues(evident[0]) or _GOES_ON.match(raw[evident[0] + 1]) or raw[evident[0]][-1] in _OPENS)
    if len(broken) < 0.5 * len(at_width) or not (len(evident) >= 3 or (len(broken) >= 2 and evident) or single):
        return raw
    joined: list[str] = []
    carry = ""
    for i, r in enumerate(raw):
        carry += r
        if not breaks(i):
            joined.append(carry)
            carry = ""
    if carry:
        joined.append(carry)
    return joined


_FRAME_HEAD = re.compile(r'^\s*File "')
_FRAME = re.compile(r'^\s*File "[^"]+", line \d+')


def _rejoin_frames(raw: list[str]) -> list[str]:
    """A frame line broken inside its path or before its line number is joined with its continuation."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        r = raw[i]
        if _FRAME_HEAD.match(r) and not _FRAME.match(r) and i + 1 < len(raw):
            for glue in ("", " "):
                if _FRAME.match(r + glue + raw[i + 1].lstrip()):
                    out.append(r + glue + raw[i + 1].lstrip())
                    i += 2
                    break
            else:
                out.append(r)
                i += 1
            continue
        out.append(r)
        i += 1
    return out


def _dedent(raw: list[str]) -> list[str]:
    """A log pasted as an indented block (every non-blank line indented) without that common indent."""
    indent: int | None = None
    for r in raw:
        if r.strip():
            n = len(r) - len(r.lstrip(" "))
            indent = n if indent is None else min(indent, n)
            if not indent:
                return raw
    if not indent:
        return raw
    return [r[indent:] if r.strip() else "" for r in raw]


def _unquote(raw: list[str]) -> list[str]:
    """A log pasted as a Markdown quote (every non-blank line starting with `>`, nested or not) without the quote:
    a paste-level decoration, taken off before a wrap or a double spacing inside the quote is undone."""
    for _ in range(3):
        if not all(r.startswith(">") for r in raw if r.strip()):
            return raw
        texts = [r for r in raw if r.strip()]
        if len(texts) < 2 or all(r.startswith(">>>") for r in texts):
            return raw
        raw = [r[2:] if r.startswith("> ") else r[1:] for r in raw]
    return raw


# A logger that stamps every write() rather than every line (ComfyUI's stdout hook, some notebook relays)
# leaves its stamp inside lines where a print() was cut into several writes: `File <stamp>"x.py"<stamp>, line`.
_CHUNK_STAMP = re.compile(rf"\[{_ISO}\]\s?|{_ISO}\s+-\s")


def _unchunk(raw: list[str]) -> list[str]:
    """Per-write stamps removed from inside lines when most lines start with one (the writes joined again)."""
    stamped = [r for r in raw if r.strip()]
    if len(stamped) < 3 or sum(bool(_CHUNK_STAMP.match(r)) for r in stamped) < 0.5 * len(stamped):
        return raw
    out: list[str] = []
    for r in raw:
        head = _CHUNK_STAMP.match(r)
        start = head.end() if head else 0
        out.append(r[:start] + _CHUNK_STAMP.sub("", r[start:]) if _CHUNK_STAMP.search(r, start) else r)
    return out


_ENTITY = re.compile(r"&(?:quot|apos|amp|lt|gt|nbsp|#39|#x27|#34|#x22);")
_ENTITIES = {"&quot;": '"', "&apos;": "'", "&amp;": "&", "&lt;": "<", "&gt;": ">", "&nbsp;": " ", "&#39;": "'",
             "&#x27;": "'", "&#34;": '"', "&#x22;": '"'}


def _unescape_html(text: str) -> str:
    """A log copied out of a web page's HTML (`&quot;`, `&gt;`, `&#39;`) as the program wrote it.

    Only the entities an escaper writes for a log's characters: a log holding other `&...;` text keeps it."""
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(0)], text) if "&" in text and _ENTITY.search(text) else text


_JSON_META = ("time", "timestamp", "ts", "severity", "level", "levelname", "stream", "logger", "name")


def _json_message(raw: str) -> tuple[str, bool] | None:
    """A JSON log record's line and whether it is whole: a container runtime's `{"log": "...\\n", "stream": ...}`
    (a line it split has no final newline) or a structured logger's `{"message": ..., "severity": ...}`."""
    if not raw.startswith("{") or not raw.rstrip().endswith("}") or ('"log"' not in raw and '"message"' not in raw
                                                                     and '"msg"' not in raw):
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("log"), str):
        line = record["log"]
        return (line[:-1], True) if line.endswith("\n") else (line, not line)
    message = record.get("message", record.get("msg"))
    if isinstance(message, str) and any(key in record for key in _JSON_META):
        return message.rstrip("\n"), True
    return None


def _decode_json_lines(text: str) -> str:
    """A JSON log file (a record per line) as the lines its records hold; a line the runtime split is joined again.
    Lines that are no such record are kept (a JSON log interleaved with plain lines)."""
    out: list[str] = []
    partial = ""
    for raw in text.split("\n"):
        found = _json_message(raw)
        if found is not None:
            partial += found[0]
            if found[1]:
                out.append(partial)
                partial = ""
            continue
        if partial:
            out.append(partial)
            partial = ""
        out.append(raw)
    if partial:
        out.append(partial)
    return "\n".join(out)


def _undouble(raw: list[str]) -> list[str]:
    """A log pasted double-spaced (a blank line after every line: some editors, chat clients) as written: where no
    two lines with text touch, every run of 2k+1 blank lines was k blank lines."""
    if any(raw[i].strip() and raw[i + 1].strip() for i in range(len(raw) - 1)) or sum(1 for r in raw if r.strip()) < 3:
        return raw
    out: list[str] = []
    blanks = 0
    for r in raw:
        if r.strip():
            out.extend([""] * (blanks // 2) if out else [])
            out.append(r)
            blanks = 0
        else:
            blanks += 1
    out.extend([""] * max(blanks // 2, 1))
    return out


_TB_HEADER = "Traceback (most recent call last)"
_FRAME_ISH = re.compile(r'File "|File \S+:\d+|Cell In\[|<ipython-input|\S\.py in \w|^\s*│')


def _unreverse(raw: list[str]) -> list[str]:
    """A log copied newest line first (log viewers such as Datadog or Kibana) in the order it was written.

    Told by its tracebacks: upside down, a traceback's header has its frames above it, never below."""
    forward = backward = 0
    for i in [i for i, r in enumerate(raw) if _TB_HEADER in r]:
        r = raw[i]
        # Another stream's line may sit between a header and its frames.
        below = [x for x in raw[i + 1:i + 5] if x.strip()][:2]
        above = [x for x in raw[max(0, i - 5):i] if x.strip()][-3:]
        if any(_FRAME_ISH.search(x) for x in [r.split(_TB_HEADER, 1)[1], *below]):
            forward += 1
        elif any(_FRAME_ISH.search(x) for x in above):
            backward += 1
    if not backward or forward:
        return raw
    end = len(raw)
    while end and not raw[end - 1].strip():
        end -= 1
    return raw[:end][::-1] + raw[end:]


_GUTTER = re.compile(r"^(\d{1,7})(?=\D|$)")


def _ungutter(raw: list[str]) -> list[str]:
    """A log copied from a viewer with its line-number gutter (`337test_x ... ok`, `341` for a blank line): the
    numbers removed. A gutter numbers (nearly) every line consecutively and glues to the text or stands alone,
    which a step table's first column does not."""
    nums = [(i, int(m.group(1)), m.end()) for i, r in enumerate(raw) if (m := _GUTTER.match(r))]
    if len(nums) < 5 or len(nums) < 0.8 * sum(1 for r in raw if r.strip()):
        return raw
    consecutive = sum(b[1] == a[1] + 1 and b[0] == a[0] + 1 for a, b in pairwise(nums))
    glued = sum(raw[i][end:end + 1].isalpha() or not raw[i][end:].strip() for i, _, end in nums)
    if consecutive < 0.9 * (len(nums) - 1) or glued < 0.2 * len(nums):
        return raw
    out = list(raw)
    for i, _, end in nums:
        out[i] = raw[i][end:]
    return out


def raw_lines(text: str) -> list[str]:
    """The text's lines as the program wrote them, with what a paste or a collector did undone: HTML entities,
    JSON log records, ANSI codes, line ends, an indented, quoted or double-spaced paste, per-write stamps, a log
    listed newest line first, a hard wrap."""
    text = _unescape_html(text)
    if '{"' in text and ('"log"' in text or '"message"' in text or '"msg"' in text):
        text = _decode_json_lines(text)
    raw = _unchunk(_undouble(_dedent(_unquote(_dedent(_ungutter(clean(text).split("\n")))))))
    if _TB_HEADER in text:
        raw = _unreverse(raw)
    return _rejoin_frames(_unwrap_width(raw))


def _unfold(split: list[tuple[str, Parsed]]) -> list[tuple[str, Parsed]]:
    """Tracebacks flattened onto one line unfolded, the unfolded lines keeping the line's rank and worker."""
    out: list[tuple[str, Parsed]] = []
    i = 0
    while i < len(split):
        text, parsed = split[i]
        if "Traceback" in text and _FLAT_TB.search(text):
            # A flattened traceback is one logical line: a break between two letters is a paste's wrap.
            text = text.rstrip()
            while i + 1 < len(split) and text[-1:].isalnum() and split[i + 1][0][:1].isalnum() and \
                    (split[i + 1][1].rank, split[i + 1][1].worker) in ((parsed.rank, parsed.worker), (None, None)):
                text += split[i + 1][0].rstrip()
                i += 1
            # The unfolded lines continue the line's record: they start none.
            rest = Parsed(parsed.rank, parsed.worker, parsed.level)
            out.extend((part, parsed if not n else rest) for n, part in enumerate(unflatten(text)))
        else:
            out.append(split[i])
        i += 1
    return out


def split_lines(text: str) -> list[Line]:
    """Every line of a text, normalised, with the model detected from the text itself."""
    raw = raw_lines(text)
    model = LineModel.detect(raw[:20_000])
    split = [model.split(r) for r in raw]
    if "Traceback (most recent call last)" in text and any("Traceback" in t and _FLAT_TB.search(t) for t, _ in split):
        split = _unfold(split)
    return demux([model.make(i, t, parsed) for i, (t, parsed) in enumerate(split)])


def iter_lines(path: Path, sample: int = 2_000, encoding: str = "utf-8") -> Iterator[Line]:
    """A file's lines, streaming: the model is detected on its first `sample` lines."""
    with open(path, encoding=encoding, errors="replace", newline="") as fh:
        head: list[str] = []
        for raw in fh:
            head.extend(clean(raw).rstrip("\n").split("\n"))
            if len(head) >= sample:
                break
        model = LineModel.detect(head)
        index = 0
        for raw in head:
            yield model.line(index, raw)
            index += 1
        for chunk in fh:
            for raw in clean(chunk).rstrip("\n").split("\n"):
                yield model.line(index, raw)
                index += 1


# Interleaved tracebacks without prefixes (several processes writing one stderr): told apart by structure.
_TB_HEAD = re.compile(r"Traceback \(most recent call last\)")
_EXC = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure|Timeout)(?::|$)")
_CARET = re.compile(r"^\s*[\^~]+\s*$")


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
        if _TB_HEAD.search(ln.text):
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
        if _TB_HEAD.search(text):
            count += 1
            target = _Open(f"tb{count}", "frame")
            active.append(target)
            closed = None
        elif not active:
            continue
        elif _FRAME.match(text):
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
