"""The category of free text such as a symptom a user typed: the diagnosis rules first, then the prose
vocabulary (the `prose` rules of tools/vocabulary/data/symptoms.yaml; order is precedence).

Words in the scope of a negation ("no OOM, it just hangs", "nothing crashes") take no part in the category,
and a report that names no failure class says so (basis "none") instead of guessing one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.rules import categorise
from rootcause.tools.observe.logs.traceback_lines import exception_named
from rootcause.tools.vocabulary.negation import named_outside_negations
from rootcause.tools.vocabulary.symptoms import vocabulary

_ERROR_HEAD = exception_named("space", "message", warnings=False)  # a warning a text quotes is not its error
Basis = Literal["error_rules", "prose", "none"]


@dataclass(frozen=True)
class Classified:
    category: str
    why: str
    basis: Basis
    negated: list[str] = field(default_factory=list)
    """The words the text says did not happen ("OOM", "crashes"), in order."""
    named: frozenset[str] = frozenset()
    """The concepts and signals the text names outside negations (plus the signals read from the whole text)."""


def classify(text: str) -> Classified:
    """The category of free text with its basis: the diagnosis rules, the prose vocabulary, or none."""
    head = _ERROR_HEAD.search(text)
    protect = (head.start("type"), text.find("\n", head.start("type")) % (len(text) + 1) or len(text)) if head \
        else None
    plain, negated, named = named_outside_negations(text, protect)

    # The message is the rest of the text after the type's colon (a symptom's lines after it say more).
    error = FoundError(type=head.group("type") if head else "", message=text[head.start("message"):] if head else plain,
                       line=0)
    category = categorise(error, in_test=bool(re.search(r"\btest", plain, re.IGNORECASE)))
    prose = next((rule for rule in vocabulary().prose if rule.matches(set(named))), None)
    if not head and prose is not None and prose.category in vocabulary().prose_over_rules.get(category, ()):
        return Classified(prose.category, prose.why, "prose", negated, named)
    if category not in ("python_exception", "test_failure"):
        return Classified(category, "recognised by the diagnosis engine's error rules", "error_rules", negated,
                          named)
    if prose is not None:
        return Classified(prose.category, prose.why, "prose", negated, named)
    if category == "test_failure":
        return Classified(category, "a test assertion failed", "error_rules", negated, named)
    if head or "clearerror" in named:
        return Classified("python_exception", "an exception no more specific rule matches", "error_rules",
                          negated, named)
    return Classified("python_exception", "the symptom names no failure class (no error, no known failure words)",
                      "none", negated, named)


def classify_text(text: str) -> tuple[str, str]:
    """(category, why) for free text: the diagnosis rules first, then the prose vocabulary."""
    found = classify(text)
    return found.category, found.why
