"""start_session's triage on the one symptom vocabulary: category, Full-Protocol reasons, checklists."""

from __future__ import annotations

import pytest
from rootcause.tools.ecosystem.demo.driver import SYMPTOM as DEMO_SYMPTOM
from rootcause.tools.judge.classify import classify_text
from rootcause.tools.judge.triage import triage
from rootcause.tools.knowledge.checklists import selected_checklists
from rootcause.tools.vocabulary.words import symptom_hits

NUMERICAL = "numerical symptom"


@pytest.mark.parametrize("symptom", [DEMO_SYMPTOM, "test_padding fails: masked_mse returns 1.6667 instead of 2.5"])
def test_failing_test_symptoms_are_test_failures_without_a_numerical_reason(symptom: str) -> None:
    result = triage(symptom)
    assert result.category == "test_failure"
    assert not any(NUMERICAL in r for r in result.reasons), result.reasons
    assert result.path == "quick"


@pytest.mark.parametrize("symptom", ["loss becomes NaN after 1200 steps", "loss is inf at step 3",
                                     "training diverges after warm-up", "the loss spikes at step 900"])
def test_numerical_reason_only_for_nan_inf_divergence_or_spikes(symptom: str) -> None:
    result = triage(symptom)
    assert any(NUMERICAL in r for r in result.reasons) and result.path == "full"
    assert "numerical_checklist" in result.checklists


def test_triage_checklists_are_check_constraints_selection() -> None:
    for symptom in ("FSDP loss differs between 1 and 8 GPUs", "training hangs at the barrier", "loss NaN",
                    DEMO_SYMPTOM):
        category = classify_text(symptom)[0]
        assert triage(symptom).checklists == list(selected_checklists(symptom_hits(symptom), category))


def test_failed_fixes_and_unclear_signals() -> None:
    assert "two or more fix attempts have already failed" in triage("KeyError: 'labels', tried two fixes").reasons
    assert "the cause is unclear or the failure is intermittent" in triage("ValueError: bad value, flaky").reasons
    assert triage("ValueError: bad value").path == "quick"


def test_held_out_triage_set() -> None:
    """Symptoms triage was not written against: the category, and 'numerical' only for NaN/Inf/divergence/spikes."""
    import json

    from tests.conftest import FIXTURES

    rows = json.loads((FIXTURES / "knowledge" / "triage_queries_heldout.json").read_text(encoding="utf-8"))["queries"]
    categories = numerical = 0
    misses = []
    for q in rows:
        result = triage(q["symptom"])
        named = any(NUMERICAL in r for r in result.reasons)
        categories += result.category == q["category"]
        numerical += named == q["numerical"]
        if result.category != q["category"]:
            misses.append(f"{q['symptom']!r}: {result.category}, labelled {q['category']}")
    n = len(rows)
    print(f"\nheld-out triage ({n}): category {categories}/{n}, numerical reason {numerical}/{n}")
    assert numerical == len(rows)
    assert categories / len(rows) >= 0.85, misses


def test_keywords_skip_prose_words_of_a_wrong_value_symptom() -> None:
    from rootcause.tools.vocabulary.keywords import extract_keywords

    assert extract_keywords("masked_mse returns 1.6667 instead of 2.5") == ["masked_mse"]
    assert extract_keywords("test_padding fails: masked_mse returns 1.6667 instead of 2.5") == [
        "test_padding", "masked_mse"]
