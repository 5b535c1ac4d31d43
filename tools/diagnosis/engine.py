"""Entry points of the diagnosis engine.

PLACEHOLDER IMPLEMENTATION: the real parser (chained tracebacks, ranks, pytest, NCCL,
stacks) is the reproduce issue's work; this version only finds the last exception line.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.diagnosis.models import SIGNATURE_VERSION, Diagnosis
from tools.keywords import extract_keywords
from tools.results import bounded
from tools.runner import RunRecord
from tools.taxonomy import classify_text

_EXC_LINE = re.compile(r"^(?:\w+\.)*([A-Z]\w*(?:Error|Exception|Interrupt|Exit))(?::\s*(.*))?$", re.MULTILINE)


def _parameterise(message: str) -> str:
    return re.sub(r"0x[0-9a-fA-F]+|\d+", "<n>", message)


def diagnose_text(text: str, root: Path, *, timed_out: str | None = None) -> Diagnosis:
    matches = list(_EXC_LINE.finditer(text))
    exc_type = message = None
    if matches:
        exc_type, message = matches[-1].group(1), (matches[-1].group(2) or "").strip()
    category, _ = classify_text(f"{exc_type}: {message}" if exc_type else text[-4000:])
    if timed_out:
        category = "hang"
    signature = f"{SIGNATURE_VERSION}|{exc_type or category}|{_parameterise(message or '')}"
    return Diagnosis(category=category, exception_type=exc_type, message=message or "",
                     keywords=extract_keywords(f"{exc_type or ''} {message or ''}"), signature=signature,
                     excerpt=bounded(text[-6000:], 4000))


def diagnose_run(record: RunRecord, root: Path) -> Diagnosis:
    return diagnose_text(record.output, root, timed_out=record.timed_out)


def diagnose_file(path: Path, root: Path) -> Diagnosis:
    return diagnose_text(path.read_text(encoding="utf-8", errors="replace"), root)
