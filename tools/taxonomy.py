"""The error taxonomy, and the category of free text such as a symptom a user typed.

There is one table of error rules: tools/diagnosis/rules.py. Free text is first read as
an error message against that table (a leading `SomeError:` counts as the exception
type). Only when that finds nothing specific does the prose vocabulary apply: the words
people use for a failure that an error message never contains ("training hangs", "loss
spikes", "got OOM-killed"). Those rules are the `prose` list of the one symptom vocabulary
(tools/knowledge/data/symptoms.yaml, shared with triage and check_constraints); order is
precedence, first match wins.
"""

from __future__ import annotations

import re
from typing import Literal

Category = Literal[
    "cuda_oom",
    "host_oom",
    "nonfinite",
    "gradient_explosion",
    "hang",
    "distributed_error",
    "checkpoint_mismatch",
    "shape_mismatch",
    "dtype_mismatch",
    "device_mismatch",
    "cuda_error",
    "import_error",
    "crash",
    "test_failure",
    "python_exception",
]

CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]

_ERROR_HEAD = re.compile(r"(?:^|\s)((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt))\s*:\s*(.*)",
                         re.DOTALL)


def classify_text(text: str) -> tuple[str, str]:
    """(category, why) for free text: the diagnosis rules first, then the prose vocabulary."""
    from tools.diagnosis.errors import FoundError
    from tools.diagnosis.rules import categorise

    head = _ERROR_HEAD.search(text)
    error = FoundError(type=head.group(1) if head else "", message=head.group(2) if head else text, line=0)
    category = categorise(error, in_test=bool(re.search(r"\btest", text, re.IGNORECASE)))
    if category not in ("python_exception", "test_failure"):
        return category, "recognised by the diagnosis engine's error rules"
    from tools.knowledge.symptoms import vocabulary
    from tools.knowledge.vocabulary import symptom_hits

    named = set(symptom_hits(text))
    for rule in vocabulary().prose:
        if rule.matches(named):
            return rule.category, rule.why
    if category == "test_failure":
        return category, "a test assertion failed"
    return "python_exception", "no more specific pattern matched"
