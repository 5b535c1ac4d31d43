"""torchrun / torch.distributed.elastic failure reports (ChildFailedError) and error files.

The report lists `Failures:` and a `Root Cause (first observed failure):` entry, each with
rank, exitcode and a traceback field that is either a real traceback (when the worker
used @record), `Signal N (SIGxxx) received by PID`, or a pointer to the docs.

An error file (`error_file: /tmp/torchelastic_.../error.json`, often cat into the log) is JSON:
`{"message": {"message": "Type: msg", "extraInfo": {"py_callstack": "Traceback ...\\n ...", ...}}}`,
the traceback one escaped string; expand_error_files puts it back as lines wherever it appears.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from rootcause.tools.observe.diagnosis.text import Line

_ROOT = re.compile(r"Root Cause \(first observed failure\):")
_FAILURES = re.compile(r"^\s*Failures:\s*$")
_ENTRY = re.compile(r"^\s*\[\d+\]:\s*$")
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
_RANK = re.compile(r"(\d+)")


@dataclass
class ElasticFailure:
    rank: int | None
    exitcode: int | None
    traceback: str
    line: int
    root: bool = False


@dataclass
class ElasticReport:
    failures: list[ElasticFailure] = field(default_factory=list)

    @property
    def root(self) -> ElasticFailure | None:
        return next((f for f in self.failures if f.root), None)


def parse_elastic(lines: list[Line]) -> ElasticReport:
    report = ElasticReport()
    in_root = False
    current: ElasticFailure | None = None
    for line in lines:
        text = line.text
        if _ROOT.search(text):
            in_root = True
            continue
        if _FAILURES.match(text):
            in_root = False
            continue
        if _ENTRY.match(text):
            current = ElasticFailure(rank=None, exitcode=None, traceback="", line=line.index, root=in_root)
            report.failures.append(current)
            continue
        if current is None:
            continue
        m = _FIELD.match(text)
        if m:
            name, value = m.group(1), m.group(2).strip()
            if name == "rank":
                r = _RANK.search(value)
                current.rank = int(r.group(1)) if r else None
            elif name == "exitcode":
                r = re.match(r"(-?\d+)", value)
                current.exitcode = int(r.group(1)) if r else None
            elif name == "traceback":
                current.traceback = value
        elif text.startswith(("=====", "-----")):
            current = None
        elif current.traceback and text.strip():
            current.traceback += "\n" + text.strip()
    return report


_CALLSTACK = re.compile(r'"py_callstack"\s*:\s*"((?:[^"\\]|\\.)*)"')
_MESSAGE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _unescape(value: str) -> str:
    try:
        return json.loads(f'"{value}"')
    except ValueError:
        return value.replace("\\n", "\n").replace('\\"', '"')


def expand_error_files(text: str) -> str:
    """The log with each error file's escaped py_callstack written out as the traceback it is (prefixed as the
    JSON's line was, a blank line after it), its message on the exception line when the callstack's lacks one."""
    if '"py_callstack"' not in text:
        return text
    lines = text.split("\n")
    out: list[str] = []
    for pos, line in enumerate(lines):
        m = _CALLSTACK.search(line)
        if not m:
            out.append(line)
            continue
        start = line.find("{")
        prefix = line[:start] if 0 <= start < m.start() else ""
        stack = _unescape(m.group(1)).rstrip("\n").split("\n")
        said = next((_unescape(g) for ln in [line, *reversed(lines[max(0, pos - 5):pos])]
                     for g in _MESSAGE.findall(ln)[:1]), "")
        kind, _, message = said.partition(": ")
        if stack and message.strip() and stack[-1].strip().rsplit(".", 1)[-1] == kind.strip():
            stack[-1] = f"{stack[-1].rstrip()}: {message.strip()}"
        out.extend(prefix + s for s in stack)
        # A blank line ends the traceback; a type raised without a message takes a second one, or the next
        # paragraph would be read as its message.
        out.extend([prefix.rstrip()] * (1 if ": " in stack[-1] else 2))
    return "\n".join(out)
