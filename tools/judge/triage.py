"""Triage of a symptom at session start: Quick Path or Full Protocol, category, keywords, checklists.

Every word list comes from the one symptom vocabulary (tools/vocabulary/data/symptoms.yaml), the same that
check_constraints reads: the category is judge/classify.py's (negations read, "no class named" said), the
checklists are check_constraints' selection, and the reasons for the Full Protocol are the vocabulary's triage
rules ("numerical" only for NaN/Inf, divergence or spikes, never for a wrong value a test reports; a metric
regression has its own reason).
"""

from __future__ import annotations

from typing import Literal

from rootcause.tools.judge.classify import classify
from rootcause.tools.knowledge.checklists import selected_checklists
from rootcause.tools.observe.keywords import extract_keywords
from rootcause.tools.record.store import Triage
from rootcause.tools.vocabulary.symptoms import TriageRule, vocabulary
from rootcause.tools.vocabulary.words import symptom_hits

QUICK_PATH_MINUTES = 15
NO_CLASS = ("the symptom names no failure class: the category is a placeholder until reproduce or diagnose_log "
            "classifies a real failure")


def _fires(rule: TriageRule, named: set[str], category: str) -> bool:
    return bool(set(rule.any) & named) or category in rule.categories


def triage(symptom: str, path_hint: str | None = None) -> Triage:
    found = classify(symptom)
    category, named = found.category, set(found.named)
    rules = vocabulary().triage
    reasons = [rule.reason for rule in (rules.distributed, rules.numerical, rules.regression, rules.failed_fixes,
                                        rules.unclear)
               if _fires(rule, named, category)]
    if found.basis == "none":
        reasons.append(NO_CLASS)
    elif not reasons and not set(rules.clear_error) & named and category == "python_exception":
        reasons.append("no clear error message: the root cause is not evident yet")
    if found.negated:
        reasons.append("the report says these did not happen: " + "; ".join(f"'{n}'" for n in found.negated[:5]))
    decisive = [r for r in reasons if not r.startswith("the report says")]
    if decisive:
        path: Literal["quick", "full"] = "full"
        if path_hint == "quick":
            reasons.append("path_hint 'quick' overridden by the reasons above")
    elif path_hint == "full":
        path = "full"
        reasons.append("path_hint 'full' requested by the caller")
    else:
        path = "quick"
        reasons.append(
            f"clear error ({category}: {found.why}) with no distributed, numerical or repeated-failure "
            f"signal; switch to Full if not fixed in {QUICK_PATH_MINUTES} minutes"
        )
    return Triage(path=path, reasons=reasons, category=category, category_basis=found.basis,
                  negated=found.negated, keywords=extract_keywords(symptom),
                  checklists=list(selected_checklists(symptom_hits(symptom), category)))
