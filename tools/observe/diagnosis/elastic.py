"""torchrun / torch.distributed.elastic failure reports (ChildFailedError).

The report lists `Failures:` and a `Root Cause (first observed failure):` entry, each with
rank, exitcode and a traceback field that is either a real traceback (when the worker
used @record), `Signal N (SIGxxx) received by PID`, or a pointer to the docs.
"""

from __future__ import annotations

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
