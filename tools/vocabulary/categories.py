"""The error taxonomy (DESIGN's `category`): one name per class of failure.

The category of a root error comes from the diagnosis rules (tools/observe/diagnosis/rules.py); the category
of free text from judge/classify.py. metric_regression is a run that exits 0 with numbers worse than expected
(a report's own numbers, or a `metric` / `reference` yardstick)."""

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
    "metric_regression",
    "python_exception",
]

CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]
