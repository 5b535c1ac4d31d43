"""2-3 search keywords a human would pick from an error message or a symptom: the exceptions it names first
(by the one definition of an exception's name, tools/observe/logs/traceback_lines.py).

The terms of the field worth searching for whenever they appear are `keywords` in the one
symptom vocabulary (tools/knowledge/data/symptoms.yaml), most telling first.
"""

from __future__ import annotations

import re

from rootcause.tools.observe.logs.traceback_lines import exception_named, short_name
from rootcause.tools.vocabulary.symptoms import vocabulary

_IDENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[a-z0-9]+_[a-z0-9_]+)\b")
_QUOTED = re.compile(r"['\"`]([A-Za-z_][\w.]{2,60})['\"`]")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{3,}")


def extract_keywords(text: str, limit: int = 3) -> list[str]:
    found: list[str] = []

    def add(term: str) -> None:
        if term and term.lower() not in {f.lower() for f in found} and len(found) < limit:
            found.append(term)

    for m in exception_named().finditer(text):
        add(short_name(m.group("type")))
    lowered = text.lower()
    for term in vocabulary().keywords:
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(term.lower())}(?![A-Za-z0-9_])", lowered):
            add(term)
    for m in _QUOTED.finditer(text):
        add(m.group(1))
    for m in _IDENT.finditer(text):
        add(m.group(1))
    if len(found) < 2:
        words = sorted(
            {w for w in _WORD.findall(text) if w.lower() not in vocabulary().keyword_stopwords},
            key=lambda w: (-len(w), w),
        )
        for w in words:
            add(w)
    return found
