"""Errors that arrive without a Python traceback, as a table of line templates (data/templates.yaml).

NCCL watchdog and heartbeat timeouts, gloo timeouts, the OOM killer, fatal signals, C++
`terminate called ... what():`, NaN lines of a training log. Each template names its
category and an identity used in the signature in place of an exception type, e.g.
`nccl-watchdog-timeout ALLREDUCE`: the same collective timing out on another rank,
machine or sequence number gives the same identity.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import re2
import yaml
from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.models import Frame
from rootcause.tools.observe.diagnosis.text import Line
from rootcause.tools.observe.diagnosis.tracebacks import message_lines, unmarked
from rootcause.tools.observe.logs.metric_formats import parse_json, parse_pydict
from rootcause.tools.observe.logs.traceback_lines import exception_line


@dataclass(frozen=True)
class Template:
    name: str
    pattern: re.Pattern[str]
    category: str | None
    identity: Callable[[re.Match[str]], str]
    """The signature identity of a match (None: let the rules decide)."""
    typed: bool = False
    """When the line is an exception line (`Type: message`), identify it as that exception: the same
    error pasted without its traceback then keeps the signature it has with one."""
    precursor: bool = False
    """A C++ log line that a Python exception usually repeats (with frames) right after: that one wins ties."""
    canonical: bool = False
    """Its identity is the signature of any exception whose message it matches: the Python type wrapping that
    C++ error changes between versions (RuntimeError, then DistBackendError) and a garbled paste loses it."""
    canonical_whole: bool = False
    """`canonical: whole`: searched in the whole message, not only its first sentence, and tried first (NCCL's
    "Last error: Cuda failure 'out of memory'" lines name which CUDA failure an "unhandled cuda error" was)."""
    keep_message: bool = False
    """Its group keeps the words it matched (`CUDA out of memory`, `CUDA error: out of memory`): the identity
    alone does not tell two failures of its kind apart."""
    site: Callable[[re.Match[str]], str] | None = None
    """For a line with no frames (a training log's metric line): what stands in for the call site, e.g. the
    series named (`koleo_loss`, `loss`), the same for the same code on any machine."""
    site_from: str | None = None
    """`site_from: <template>`: the site is every series that template's pattern finds non-finite on the line,
    joined (`grad_norm+loss`): which series a line shows non-finite tells two such failures apart."""
    canonical_line: bool = False
    """`canonical: line`: searched in the message's first line (a wrapper's "NCCL communicator was aborted on
    rank 0.  Original reason for failure was: [Rank 0] Watchdog caught ..."), not in the lines after it, whose
    share of the message depends on how the log was collected."""


_RANK_IN_TEXT = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|\brank[: ]\s?(\d+)\b", re.IGNORECASE)
DATA = Path(__file__).parent / "data" / "templates.yaml"
_FIELD = re.compile(r"\{(\d+|any)(?::(\w+))?\}")
_CASES: dict[str, Callable[[str], str]] = {
    "upper": str.upper,
    "lower": str.lower,
    "snake": lambda v: v.lower().replace(" ", "_"),
    "slug": lambda v: re.sub(r"\d+", "<n>", v).lower().replace(" ", "-"),
    "metric": lambda v: "loss" if v.lower() == "loss" else "grad_norm",
}


def _identity(spec: str, drop: str | None) -> Callable[[re.Match[str]], str]:
    """A template's identity format (`nccl-watchdog-timeout {1:upper}`) as a function of its match."""
    dropped = re.compile(drop) if drop else None

    def identity(m: re.Match[str]) -> str:
        def field(f: re.Match[str]) -> str:
            value = next((g for g in m.groups() if g), "") if f.group(1) == "any" else m.group(int(f.group(1)))
            value = dropped.sub("", value or "") if dropped else (value or "")
            return _CASES[f.group(2)](value) if f.group(2) else value
        return _FIELD.sub(field, spec)
    return identity


def load_templates(path: Path = DATA) -> tuple[Template, ...]:
    """The template table of a YAML file (data/templates.yaml), in the order they are tried."""
    templates = []
    for entry in yaml.safe_load(path.read_text(encoding="utf-8")):
        pattern = entry["pattern"]
        flags = re.IGNORECASE if entry.get("ignore_case") else 0
        category = entry.get("category")
        templates.append(Template(
            entry["name"], re.compile("|".join(pattern) if isinstance(pattern, list) else pattern, flags),
            None if category in (None, "none") else category, _identity(entry["identity"], entry.get("drop")),
            bool(entry.get("typed")), bool(entry.get("precursor")), bool(entry.get("canonical")),
            entry.get("canonical") == "whole", bool(entry.get("keep_message")),
            _identity(entry["site"], None) if entry.get("site") else None,
            site_from=entry.get("site_from"), canonical_line=entry.get("canonical") == "line"))
    return tuple(templates)


TEMPLATES: tuple[Template, ...] = load_templates()


PRECURSORS = frozenset(t.name for t in TEMPLATES if t.precursor)
_BY_NAME = {t.name: t for t in TEMPLATES}


def kept_words(name: str, message: str) -> str:
    """The words a keep_message template matched in a message ('' for any other template)."""
    template = _BY_NAME.get(name)
    m = template.pattern.search(message) if template is not None and template.keep_message else None
    return m.group(0) if m else ""
_CANONICAL = tuple(t for t in TEMPLATES if t.canonical and not t.canonical_whole and not t.canonical_line)
_CANONICAL_LINE = tuple(t for t in TEMPLATES if t.canonical_line)
_CANONICAL_WHOLE = tuple(t for t in TEMPLATES if t.canonical_whole)


def canonical_identity(sentence: str, message: str = "") -> tuple[str, str] | None:
    """The identity of a C++ error named in an exception's first sentence (or anywhere in its message), and
    the words its group keeps (keep_message; else '')."""
    found = canonical_match(sentence, message)
    return (found[0].identity(found[1]), found[1].group(0) if found[0].keep_message else "") if found else None


def canonical_match(sentence: str, message: str = "") -> tuple[Template, re.Match[str]] | None:
    """The template of a C++ error named in an exception's first sentence (or anywhere in its message)."""
    for templates, text in ((_CANONICAL_WHOLE, message[:4000]), (_CANONICAL_LINE, message.split("\n", 1)[0]),
                            (_CANONICAL, sentence)):
        for template in templates:
            m = template.pattern.search(text)
            if m:
                return template, m
    return None
# One search per line tells whether any template can match it (most lines of a big log match none): an RE2
# automaton (one pass per line) unless a template needs what RE2 lacks (lookaround).
_LOOKAROUND = re.compile(r"\(\?<?[=!]")


def _without_lookaround(pattern: str) -> str:
    """The pattern with its lookaround groups removed: it matches wherever the original does (a pre-filter may
    match more, never less), and RE2 compiles it."""
    out, i = [], 0
    while i < len(pattern):
        m = _LOOKAROUND.match(pattern, i)
        if not m or (i and pattern[i - 1] == "\\"):
            out.append(pattern[i])
            i += 1
            continue
        depth, j, in_class = 0, i, False
        while j < len(pattern):
            c = pattern[j]
            if c == "\\":
                j += 2
                continue
            if in_class:
                in_class = c != "]"
            elif c == "[":
                in_class = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if not depth:
                    break
            j += 1
        i = j + 1
    return "".join(out)


_ANY_PATTERN = "|".join(f"(?{'i' if t.pattern.flags & re.IGNORECASE else ''}:{_without_lookaround(t.pattern.pattern)})"
                        for t in TEMPLATES)
_ANY = re2.compile(_ANY_PATTERN) if not _LOOKAROUND.search(_ANY_PATTERN) else re.compile(_ANY_PATTERN)


# Words that turn what follows into a guess: Ray's "There are some potential root causes. (1) ... OOM killer
# ... (3) ... SIGSEGV", a hint's "this may be caused by".
_HEDGE = re.compile(r"\b(?:potential|possible|probable) (?:root )?causes?\b|"
                    r"\b(?:may|might|could|can) be (?:caused by|due to)\b", re.IGNORECASE)
_SOURCE_LINE = re.compile(r"\braise\s+[\w.]+\(")
_WARNING = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*Warning):\s")


def rank_in(text: str) -> int | None:
    m = _RANK_IN_TEXT.search(text)
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def _dump_frames(following: list[Line]) -> list[Frame]:
    """The current thread's frames of the faulthandler dump that follows a fatal error line."""
    from rootcause.tools.observe.diagnosis.stacks import threads

    found = threads("\n".join(ln.text for ln in following))
    current = next((fr for label, fr in found if label.startswith("Current thread")), None)
    return current or (found[0][1] if found else [])


MAX_SITE_KEYS = 12


def _record_site(name: str, text: str) -> str:
    """A series' name, and for a logger's dict record (HF Trainer's `{'loss': 0.0, 'grad_norm': nan, ...}`) the keys
    it logs besides: which trainer and configuration wrote it (GRPO's rewards, SFT's epoch), the same on any machine."""
    found = parse_json(text) or parse_pydict(text)
    if not found or len(found) < 2:
        return name
    keys = sorted(k.replace("|", "/").replace(">", "") for k in found)
    more = f",+{len(keys) - MAX_SITE_KEYS}" if len(keys) > MAX_SITE_KEYS else ""
    return f"{name} in {{{','.join(keys[:MAX_SITE_KEYS])}{more}}}"


def _site_name(template: Template, m: re.Match[str], text: str) -> str:
    source = next((t for t in TEMPLATES if t.name == template.site_from), None) if template.site_from else None
    if source is None or source.site is None:
        return template.site(m) if template.site else ""
    return "+".join(sorted({source.site(x) for x in source.pattern.finditer(text)} | {template.site(m)}))


def find_templates(lines: list[Line], consumed: set[int]) -> Iterator[FoundError]:
    """Template errors on lines no traceback already accounted for; one per (template, rank, identity)."""
    seen: set[tuple[str, int | None, str]] = set()
    for pos, line in enumerate(lines):
        if line.index in consumed or not _ANY.search(line.text):
            continue
        for template in TEMPLATES:
            m = template.pattern.search(line.text)
            if not m or _SOURCE_LINE.search(line.text, 0, m.start()):
                continue  # a traceback's source line (`raise RuntimeError('Error(s) in ...'`) is code, not an error
            if _HEDGE.search(line.text, 0, m.start()):
                continue  # a list of what might have happened ("potential root causes: ... SIGSEGV") is no evidence
            rank = line.rank if line.rank is not None else rank_in(line.text)
            identity = template.identity(m)
            key = (template.name, rank, identity)
            if key in seen:
                break
            seen.add(key)
            message = line.text[m.start():].strip() if template.name not in ("OOMKiller", "ShellKilled") \
                else line.text.strip()
            if template.name == "CppTerminate":
                what = next((ln.text.split("what():", 1)[1].strip() for ln in lines[pos + 1:pos + 4]
                             if "what():" in ln.text), "")
                message = what or message
                yield FoundError(type=m.group(1), message=message, line=line.index, rank=rank, source="template",
                                 template=None, category=None, start=line.index, end=line.index + 2)
                break
            warned = _WARNING.search(line.text, 0, m.start() + 1)
            if warned:
                # A warning that reports a failure (`UserWarning: Caught CUDA out of memory ... retrying`) is the
                # root only when nothing raised: the engine ranks warnings last.
                yield FoundError(type=warned.group(1), message=line.text[warned.end():].strip()[:2000],
                                 line=line.index, rank=rank, source="bare", category=template.category,
                                 start=line.index, end=line.index)
                break
            typed = exception_line(unmarked(line.text)) if template.typed else None
            if typed:
                same_rank = [ln for ln in lines[pos:pos + 40] if ln.rank == line.rank]
                message, end, _ = message_lines(same_rank, 1, typed[1])
                yield FoundError(type=typed[0], message=message[:2000], line=line.index, rank=rank, source="bare",
                                 category=template.category, start=line.index, end=same_rank[end - 1].index)
                break
            frames = _dump_frames(lines[pos + 1:pos + 200]) if template.name == "FatalPythonError" else []
            yield FoundError(type=template.name, message=message[:2000], line=line.index, rank=rank,
                             frames=frames, source="template", template=identity, category=template.category,
                             start=max(0, line.index - 2), end=line.index + 3,
                             site=_record_site(_site_name(template, m, line.text), line.text) if template.site
                             else None)
            break
