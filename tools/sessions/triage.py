"""Triage of a symptom at session start: Quick Path or Full Protocol, category, keywords, checklists."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from tools.keywords import extract_keywords
from tools.taxonomy import classify_text

QUICK_PATH_MINUTES = 15

_DISTRIBUTED = re.compile(
    r"\b(distributed|multi-?(gpu|node)|rank\s*\d*|ranks|fsdp2?|ddp|nccl|gloo|torchrun|all_?reduce|"
    r"all_?gather|barrier|collective|shard(ed|ing)?|sequence[ -]parallel|\bsp\b|ulysses|moe|expert"
    r"[ -]parallel|world[_ ]size|8[- ]gpu|hangs?|hung|deadlock|stuck)\b",
    re.IGNORECASE,
)
_NUMERICAL = re.compile(
    r"\b(nan|inf|non-?finite|diverg\w*|loss (spike|explod\w*|wrong|differs?|mismatch)|wrong loss|"
    r"grad(ient)?[_ ]norm|gradient explosion|explod\w*|accuracy|numeric\w*|precision|bf16|fp16|"
    r"mismatch between runs|different (loss|numbers|results))\b",
    re.IGNORECASE,
)
_UNCLEAR = re.compile(
    r"\b(sometimes|intermittent\w*|flaky|random(ly)?|unclear|not sure|no idea|no error|silently|"
    r"unexpected(ly)? behaviou?r|weird|mysterious|occasionally|nondeterministic)\b",
    re.IGNORECASE,
)
_FAILED_FIXES = re.compile(
    r"\b(tried\b.{0,40}\b(twice|several times|multiple times|many times|again)|"
    r"(tried|after|made)\s+(2|two|3|three|several|multiple|many)\s+(failed\s+)?(fix|attempt|approach|change)\w*|"
    r"(2|two|3|three|several|multiple)\s+(failed\s+)?(fix|attempt)\w*|"
    r"fix(es)? (did ?n[o']t|didn't|failed to) (work|help)|still (fails|failing|broken))",
    re.IGNORECASE,
)
_CLEAR_ERROR = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback|error:", re.IGNORECASE)
_FULL_CATEGORIES = {"hang", "distributed_error", "nonfinite", "gradient_explosion"}


class Triage(BaseModel):
    path: Literal["quick", "full"]
    reasons: list[str]
    category: str
    keywords: list[str]
    checklists: list[str]


def triage(symptom: str, path_hint: str | None = None) -> Triage:
    category, category_why = classify_text(symptom)
    reasons: list[str] = []
    if _DISTRIBUTED.search(symptom) or category in {"hang", "distributed_error"}:
        reasons.append("distributed symptom (hang, ranks, sharding or collectives): the protocol requires Full")
    if _NUMERICAL.search(symptom) or category in {"nonfinite", "gradient_explosion"}:
        reasons.append("numerical symptom (NaN/Inf, divergence, grad norm): the protocol requires Full")
    if _FAILED_FIXES.search(symptom):
        reasons.append("two or more fix attempts have already failed")
    if _UNCLEAR.search(symptom):
        reasons.append("the cause is unclear or the failure is intermittent")
    if not reasons and not _CLEAR_ERROR.search(symptom) and category == "python_exception":
        reasons.append("no clear error message: the root cause is not evident yet")
    if reasons:
        path: Literal["quick", "full"] = "full"
        if path_hint == "quick":
            reasons.append("path_hint 'quick' overridden by the reasons above")
    elif path_hint == "full":
        path = "full"
        reasons.append("path_hint 'full' requested by the caller")
    else:
        path = "quick"
        reasons.append(
            f"clear error ({category}: {category_why}) with no distributed, numerical or repeated-failure "
            f"signal; switch to Full if not fixed in {QUICK_PATH_MINUTES} minutes"
        )
    checklists: list[str] = []
    if _DISTRIBUTED.search(symptom) or category in {"hang", "distributed_error"}:
        checklists.append("distributed_checklist")
    if _NUMERICAL.search(symptom) or category in {"nonfinite", "gradient_explosion", "checkpoint_mismatch",
                                                   "dtype_mismatch"}:
        checklists.append("numerical_checklist")
    return Triage(path=path, reasons=reasons, category=category, keywords=extract_keywords(symptom),
                  checklists=checklists)

