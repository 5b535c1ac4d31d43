"""Which differences touch what the session's diagnosis names: its keywords, exception, files and frames."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rootcause.tools.record.store import SessionState
from rootcause.tools.setups.models import Difference

_GENERIC = {"error", "exception", "runtimeerror", "valueerror", "assertionerror", "python", "test", "tests"}


@dataclass
class Focus:
    terms: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.terms or self.paths)


def focus_from(state: SessionState | None, extra: list[str]) -> Focus:
    """Terms (keywords, exception types) and paths (frames, location) of the session and its evidence."""
    focus = Focus()

    def term(value: Any) -> None:
        if not isinstance(value, str) or len(value.strip()) < 2:
            return
        word = value.strip()
        if word.lower() not in _GENERIC and word.lower() not in (t.lower() for t in focus.terms):
            focus.terms.append(word)

    def path(value: Any) -> None:
        if isinstance(value, str) and value:
            file = re.sub(r":\d+$", "", value.strip())
            if file and file not in focus.paths:
                focus.paths.append(file)

    for word in extra:
        term(word)
    if state is not None:
        for word in state.keywords:
            term(word)
        for evidence in state.evidence:
            _walk(evidence.data, term, path, depth=0)
    return focus


def _walk(data: Any, term: Any, path: Any, depth: int) -> None:
    if depth > 6:
        return
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "keywords" and isinstance(value, list):
                for word in value:
                    term(word)
            elif key == "exception_type":
                term(value)
            elif key == "location":
                path(value)
            elif key == "frames" and isinstance(value, list):
                for frame in value:
                    if isinstance(frame, dict) and frame.get("in_project", True):
                        path(frame.get("file"))
            elif key in {"paths", "constraint_paths"} and isinstance(value, list):
                for item in value:
                    path(item)
            else:
                _walk(value, term, path, depth + 1)
    elif isinstance(data, list):
        for item in data[:200]:
            _walk(item, term, path, depth + 1)


def mark(differences: list[Difference], focus: Focus) -> None:
    """Flag a difference whose key or values mention a term, or whose file is one the diagnosis names."""
    if not focus:
        return
    patterns = [(t, re.compile(rf"(?<![A-Za-z0-9]){re.escape(t)}(?![A-Za-z0-9])", re.IGNORECASE))
                for t in focus.terms]
    for diff in differences:
        file = diff.file or ""
        for wanted in focus.paths:
            if file and (file == wanted or file.endswith("/" + wanted) or wanted.endswith("/" + file)):
                diff.suspect, diff.why = True, f"touches {file}, named by the diagnosis"
                break
        if diff.suspect:
            continue
        text = "\n".join(v for v in (diff.key, diff.good, diff.bad) if v)
        for name, pattern in patterns:
            if pattern.search(text):
                diff.suspect, diff.why = True, f"mentions {name!r}"
                break
