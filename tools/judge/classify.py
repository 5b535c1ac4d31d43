"""The category of free text such as a symptom a user typed: the diagnosis rules first, then the prose
vocabulary (the `prose` rules of tools/vocabulary/data/symptoms.yaml; order is precedence)."""

from __future__ import annotations

import re

from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.rules import categorise
from rootcause.tools.vocabulary.symptoms import vocabulary
from rootcause.tools.vocabulary.words import symptom_hits

_ERROR_HEAD = re.compile(r"(?:^|\s)((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt))\s*:\s*(.*)",
                         re.DOTALL)


def classify_text(text: str) -> tuple[str, str]:
    """(category, why) for free text: the diagnosis rules first, then the prose vocabulary."""

    head = _ERROR_HEAD.search(text)
    error = FoundError(type=head.group(1) if head else "", message=head.group(2) if head else text, line=0)
    category = categorise(error, in_test=bool(re.search(r"\btest", text, re.IGNORECASE)))
    if category not in ("python_exception", "test_failure"):
        return category, "recognised by the diagnosis engine's error rules"

    named = set(symptom_hits(text))
    for rule in vocabulary().prose:
        if rule.matches(named):
            return rule.category, rule.why
    if category == "test_failure":
        return category, "a test assertion failed"
    return "python_exception", "no more specific pattern matched"
