"""pytest (and unittest) output: failed node ids and the error inside each failing test.

pytest's long and short traceback styles carry no "Traceback" header: entries end with a
location line (`path.py:12: in func` or `path.py:15: RuntimeError`) and the error is in
the `E   ` lines. `--tb=native` output is left to the traceback parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.models import Frame
from rootcause.tools.observe.diagnosis.text import Line
from rootcause.tools.observe.diagnosis.tracebacks import SEPARATOR
from rootcause.tools.observe.logs.traceback_lines import TRACEBACK, TRACEBACK_HEADER, exception_line

_SUMMARY = re.compile(r"^(FAILED|ERROR) (?P<id>\S+?(?:\[.*?\])?)(?: - (?P<msg>.*))?\s*$")
_UNITTEST = re.compile(r"^(FAIL|ERROR): (?P<name>\w+) \((?P<where>[\w.]+)\)")
_HEADER = re.compile(r"^_{3,} (?P<name>.+?) _{3,}$")
_END_SECTIONS = re.compile(r"^={3,} .*(short test summary|warnings summary|passed|failed|error|captured)",
                           re.IGNORECASE)
_CAPTURED = re.compile(r"^-{3,} Captured ")
_E_LINE = re.compile(r"^E\s{1,}(?P<text>.*)$|^E$")
_LOCATION = re.compile(r"^(?P<file>[^\s:]+\.py):(?P<line>\d+): (?:in (?P<func>\S+)|(?P<type>[\w.]+))\s*$")
_DEF = re.compile(r"^\s*(?:>\s*)?(?:async\s+)?def (?P<name>\w+)\(")
PYTEST_MARKERS = re.compile(r"^={3,} (FAILURES|ERRORS|short test summary info) ={3,}$|^collected \d+ items?|"
                            r"^={3,} test session starts ={3,}$", re.MULTILINE)


@dataclass
class PytestResult:
    failed: list[str] = field(default_factory=list)
    errors: list[FoundError] = field(default_factory=list)
    detected: bool = False
    summary_messages: dict[str, str] = field(default_factory=dict)


def _add(items: list[str], value: str) -> None:
    if value not in items:
        items.append(value)


def _section_error(body: list[Line], chain: int) -> list[FoundError]:
    """The E-line errors of one failing test's section, chained when pytest shows a chain."""
    found: list[FoundError] = []
    frames: list[Frame] = []
    last_def: str | None = None
    link = -1
    i = 0
    while i < len(body):
        text = body[i].text
        d = _DEF.match(text)
        if d:
            last_def = d.group("name")
        loc = _LOCATION.match(text)
        if loc:
            frames.append(Frame(file=loc.group("file"), line=int(loc.group("line")),
                                function=loc.group("func") or last_def))
            last_def = None
        if SEPARATOR.match(text) and found:
            frames = []
        e = _E_LINE.match(text)
        if e:
            block = []
            start = i
            while i < len(body) and _E_LINE.match(body[i].text):
                block.append((_E_LINE.match(body[i].text).group("text") or "").rstrip())
                i += 1
            first = block[0].strip()
            parsed = exception_line(first)
            if parsed:
                exc_type, message = parsed[0], "\n".join([parsed[1], *[b.strip() for b in block[1:]]]).strip()
            elif first.startswith("assert") or first.startswith("where"):
                exc_type, message = "AssertionError", "\n".join(b.strip() for b in block)
            else:
                exc_type, message = "Failed", "\n".join(b.strip() for b in block)
            # The location line that follows the E block names the innermost frame.
            while i < len(body) and not body[i].text.strip():
                i += 1
            if i < len(body):
                loc = _LOCATION.match(body[i].text)
                if loc:
                    frames.append(Frame(file=loc.group("file"), line=int(loc.group("line")),
                                        function=loc.group("func") or last_def))
                    i += 1
            link += 1
            found.append(FoundError(type=exc_type, message=message, line=body[start].index, frames=list(frames),
                                    chain=chain, link=link, source="pytest", start=body[0].index,
                                    end=body[min(i, len(body) - 1)].index))
            continue
        i += 1
    return found


def parse_pytest(lines: list[Line], text: str, chain_base: int) -> PytestResult:
    result = PytestResult(detected=bool(PYTEST_MARKERS.search(text)))
    chain = chain_base
    section: list[Line] | None = None
    sections: list[list[Line]] = []
    unittest_fails: list[tuple[int, str]] = []
    for line in lines:
        t = line.text
        s = _SUMMARY.match(t)
        if s and ("::" in s.group("id") or s.group("id").endswith(".py")):
            result.detected = True
            _add(result.failed, s.group("id"))
            if s.group("msg"):
                result.summary_messages[s.group("id")] = s.group("msg")
        u = _UNITTEST.match(t)
        if u:
            result.detected = True  # unittest's report: what failed inside it failed in a test
            _add(result.failed, f"{u.group('where')}")
            if u.group(1) == "FAIL":
                unittest_fails.append((line.index, f"{u.group('where')}.{u.group('name')}"))
        if _HEADER.match(t):
            if section:
                sections.append(section)
            section = []
            continue
        if section is not None:
            if _END_SECTIONS.match(t) or _CAPTURED.match(t):
                sections.append(section)
                section = None
            else:
                section.append(line)
    if section:
        sections.append(section)
    for body in sections:
        if any(TRACEBACK_HEADER.search(b.text) for b in body):
            continue  # --tb=native: the traceback parser reads it
        errors = _section_error(body, chain)
        if errors:
            result.errors.extend(errors)
            chain += 1
    if not result.errors:
        # -q --tb=no / --tb=line: only the summary line carries the error.
        for node, msg in result.summary_messages.items():
            parsed = exception_line(msg)
            exc_type, message = parsed if parsed else ("AssertionError" if msg.startswith("assert") else "Failed",
                                                       msg)
            line = next((ln.index for ln in lines if ln.text.startswith(("FAILED " + node, "ERROR " + node))), 0)
            result.errors.append(FoundError(type=exc_type, message=message, line=line, chain=chain,
                                            source="pytest", start=line, end=line))
            chain += 1
    if not result.errors and TRACEBACK not in text:
        # unittest's FAIL header without the traceback under it: an assertion of the test failed.
        for index, test in unittest_fails:
            result.errors.append(FoundError(type="AssertionError", message=f"{test} failed", line=index, chain=chain,
                                            source="pytest", start=index, end=index))
            chain += 1
    return result
