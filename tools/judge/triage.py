"""Triage of a symptom at session start: Quick Path or Full Protocol, category, keywords, checklists.

Every word list comes from the one symptom vocabulary (tools/knowledge/data/symptoms.yaml), the
same that check_constraints and the taxonomy's prose fallback read: the category is
tools/taxonomy.py's, the checklists are check_constraints' selection, and the reasons for the
Full Protocol are the vocabulary's triage rules ("numerical" only for NaN/Inf, divergence or
spikes, never for a wrong value a test reports).
"""

from __future__ import annotations

from typing import Literal

from rootcause.tools.judge.classify import classify_text
from rootcause.tools.knowledge.checklists import selected_checklists
from rootcause.tools.record.store import Triage
from rootcause.tools.vocabulary.keywords import extract_keywords
from rootcause.tools.vocabulary.symptoms import TriageRule, vocabulary
from rootcause.tools.vocabulary.words import symptom_hits

QUICK_PATH_MINUTES = 15




def _fires(rule: TriageRule, named: set[str], category: str) -> bool:
    return bool(set(rule.any) & named) or category in rule.categories


def triage(symptom: str, path_hint: str | None = None) -> Triage:
    category, category_why = classify_text(symptom)
    hits = symptom_hits(symptom)
    named = set(hits)
    rules = vocabulary().triage
    reasons = [rule.reason for rule in (rules.distributed, rules.numerical, rules.failed_fixes, rules.unclear)
               if _fires(rule, named, category)]
    if not reasons and not set(rules.clear_error) & named and category == "python_exception":
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
    return Triage(path=path, reasons=reasons, category=category, keywords=extract_keywords(symptom),
                  checklists=list(selected_checklists(hits, category)))
