"""Categorisation of a root error, by a table of rules tried in order (first match wins).

The table is data (data/rules.yaml). Each rule looks at the exception type, the message, or
the function names on the error's frames. Order is precedence: a specific root cause (GPU
memory, a missing module, a checkpoint that does not load) wins over the generic symptoms
that often surround it (NCCL errors, test failures). The categories are DESIGN.md's taxonomy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.signature import first_sentence
from rootcause.tools.observe.diagnosis.templates import canonical_match

_I = re.IGNORECASE


@dataclass(frozen=True)
class DiagRule:
    category: str
    type: re.Pattern[str] | None = None
    message: re.Pattern[str] | None = None
    function: re.Pattern[str] | None = None
    """Matches a function or file on the error's frames (e.g. a state-dict loader)."""
    type_and_function: bool = False
    """Both type and function must match (otherwise any one given field matching is enough)."""


DATA = Path(__file__).parent / "data" / "rules.yaml"


def _pattern(value: str | list[str] | None, flags: int) -> re.Pattern[str] | None:
    if not value:
        return None
    return re.compile("|".join(value) if isinstance(value, list) else value, flags)


def load_rules(path: Path = DATA) -> tuple[DiagRule, ...]:
    """The rule table of a YAML file (data/rules.yaml): one entry per rule, in precedence order."""
    rules = []
    for entry in yaml.safe_load(path.read_text(encoding="utf-8")):
        flags = 0 if entry.get("case_sensitive") else _I
        rules.append(DiagRule(entry["category"], _pattern(entry.get("type"), 0), _pattern(entry.get("message"), flags),
                              _pattern(entry.get("function"), 0), bool(entry.get("both"))))
    return tuple(rules)


RULES: tuple[DiagRule, ...] = load_rules()

GENERIC = frozenset({"python_exception", "test_failure"})


def _matches(rule: DiagRule, error: FoundError) -> bool:
    type_hit = bool(rule.type and rule.type.search(error.type))
    func_hit = bool(rule.function and any(
        rule.function.search(f.function or "") or rule.function.search(f.file) for f in error.frames))
    if rule.type_and_function:
        return type_hit and func_hit
    if type_hit or func_hit:
        return True
    return bool(rule.message and rule.message.search(without_counters(error.message[:4000])))


# A training log's counters (Megatron's `number of nan iterations: 0`, `skipped iterations: 0`) count events: at
# zero they say none happened, never that a value is NaN.
_ZERO_COUNTER = re.compile(r"\b(?:number of )?(?:nan|inf|skipped|overflow(?:ed)?|non-?finite)\s+"
                           r"(?:iterations?|iters?|steps?|batches|updates?|grads?|losses|values?|samples?)"
                           r"(?:\s+count)?\s*[:=]\s*0+(?![\d.])", re.IGNORECASE)


def without_counters(text: str) -> str:
    return _ZERO_COUNTER.sub(" ", text) if "0" in text else text


def categorise(error: FoundError, in_test: bool) -> str:
    """The category of one error; AssertionError only counts as test_failure inside a test."""
    if error.category:
        return error.category
    for rule in RULES:
        if _matches(rule, error):
            if rule.category == "test_failure" and not in_test:
                return "python_exception"
            if rule.category in GENERIC:
                return _canonical_category(error) or rule.category
            return rule.category
    return _canonical_category(error) or "python_exception"


def _canonical_category(error: FoundError) -> str | None:
    """The category of a C++ error the message names (its template knows it, whatever Python type wraps it)."""
    found = canonical_match(first_sentence(error.message), error.message) if error.message else None
    return found[0].category if found else None
