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
