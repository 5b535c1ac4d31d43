"""The error taxonomy, and the category of free text such as a symptom a user typed.

There is one table of error rules: tools/diagnosis/rules.py. Free text is first read as
an error message against that table (a leading `SomeError:` counts as the exception
type). Only when that finds nothing specific does the prose vocabulary below apply: the
words people use for a failure that an error message never contains ("training hangs",
"loss spikes", "got OOM-killed"). Order is precedence, first match wins.
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

_PROSE: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (category, re.compile(pattern, re.IGNORECASE), why)
    for category, pattern, why in (
        ("cuda_oom", r"\b(gpu|cuda|device|vram)\b.{0,40}\b(oom|out of memory|memory)\b|"
                     r"\b(oom|out of memory)\b.{0,40}\b(gpu|cuda|device)\b", "GPU memory exhausted"),
        ("host_oom", r"\boom\b|out of memory|oom[- ]?kill|\bkilled\b|ram (usage|exhausted)|memory leak",
         "host memory exhausted or OOM-killed"),
        ("hang", r"\bhang(s|ing)?\b|\bhung\b|\bstuck\b|deadlock|no progress|freez|never (finishes|returns)|"
                 r"\btimes? ?out\b|timed out|watchdog", "no progress: a collective, barrier or process stopped"),
        ("nonfinite", r"\bnan\b|\binf\b|non-?finite", "NaN or Inf values"),
        ("gradient_explosion", r"grad(ient)?[_ ]?norm|explod|blow(s|ing)? up|spik|diverg",
         "gradient norm or loss blowing up with finite values"),
        ("checkpoint_mismatch", r"checkpoint|state[_ ]dict|\bdcp\b|missing keys|unexpected keys|weights? (load|not)",
         "a checkpoint or state dict did not load"),
        ("import_error", r"\bimport\b|module not found", "a module or name could not be imported"),
        ("shape_mismatch", r"\bshapes?\b|\bdimensions?\b", "tensor shapes do not fit"),
        ("dtype_mismatch", r"\bdtypes?\b|bf16|bfloat16|fp16|float16|float32", "incompatible dtypes"),
        ("device_mismatch", r"different devices?|wrong device|\bon (cpu|cuda)\b", "tensors on different devices"),
        ("distributed_error", r"\bnccl\b|\bgloo\b|rendezvous|\branks?\b|torchrun|fsdp|all_?reduce|collective",
         "a communication failure between ranks"),
        ("crash", r"segfault|segmentation|core dump|crash|abort", "the process crashed"),
        ("test_failure", r"\btests?\b.{0,30}\bfail|\bfail\w*\b.{0,30}\btests?\b|assert", "a test assertion failed"),
    )
)
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
    for prose_category, pattern, why in _PROSE:
        if pattern.search(text):
            return prose_category, why
    if category == "test_failure":
        return category, "a test assertion failed"
    return "python_exception", "no more specific pattern matched"
