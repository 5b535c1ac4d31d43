"""Typed session evidence: the registry, old sessions that still read, the report's sections, the baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.baseline import baseline_of
from tools.context import ToolContext
from tools.evidence.records import (
    FixAttemptEvidence,
    HypothesisEvidence,
    ReproduceEvidence,
    evidence_of,
    protocol_sections,
)
from tools.reproduce import ReproduceInput, reproduce
from tools.sessions import SessionStore, StartSessionInput, render_report, start_session

pytestmark = pytest.mark.anyio


def test_old_session_data_still_reads() -> None:
    old = {"status": "flaky", "consistent": False,
           "runs": [{"outcome": "fail", "signature": "v1|ZeroDivisionError|division by zero"}, {"outcome": "pass"}],
           "diagnosis": {"signature": "v1|ZeroDivisionError|division by zero", "exception_type": "ZeroDivisionError",
                         "message": "division by zero"}}
    typed = evidence_of("reproduce", old)
    assert isinstance(typed, ReproduceEvidence)
    assert [r.outcome for r in typed.runs] == ["fail", "pass"]
    assert typed.signature() == "v1|ZeroDivisionError|division by zero"
    assert typed.error() == "ZeroDivisionError: division by zero"
    assert evidence_of("no_such_tool", {}) is None
    assert evidence_of("record_fix_attempt", {"run": {"outcome": "pass", "run_id": "r"}}).run.outcome == "pass"


def test_protocol_sections_render_each_tool_model() -> None:
    class Ev:
        def __init__(self, seq: int, tool: str, data: dict) -> None:
            self.seq, self.tool, self.data = seq, tool, data

    hypothesis = HypothesisEvidence(number=1, hypothesis="the cap is missing", result="supported", reason="passed",
                                    expect="pass", confidence=0.9, gate={"passed": True, "checks": []})
    fix = FixAttemptEvidence(attempt=1, description="cap the warm-up", command="python train.py", fixed=False,
                             judged=False, reason="not judged: outside the root", consecutive_failures=0)
    lines = protocol_sections([Ev(2, "verify_hypothesis", hypothesis.model_dump(mode="json")),
                               Ev(3, "record_fix_attempt", fix.model_dump(mode="json")),
                               Ev(4, "capture_knowledge", {})])
    text = "\n".join(lines)
    assert "## Hypotheses" in text and "1. **SUPPORTED** — the cap is missing" in text
    assert "## Fix attempts" in text and "1. **not judged** — cap the warm-up" in text
    assert text.index("## Hypotheses") < text.index("## Fix attempts")
    assert "**Fix attempt 1: not judged**" in fix.render()


async def test_reproduce_evidence_round_trip_and_interpreter_note(repo: Path) -> None:
    (repo / "boom.py").write_text("raise KeyError('missing_key')\n")
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="KeyError: 'missing_key' when loading"), ctx).session_id
    result = await reproduce(ReproduceInput(command="python boom.py", runs=1, session_id=sid), ctx)
    assert result.status == "reproduced" and result.matches_symptom is True
    assert result.interpreter.startswith("rootcause's own interpreter")  # the repo has no .venv
    assert "no .venv in the project; pass python=" in result.summary()
    state = SessionStore(ctx.workspace).load(sid)
    baseline = baseline_of(state)
    assert baseline is not None and baseline.signature == result.diagnosis.signature
    report = render_report(state)
    assert "**reproduced**" in report and "Expected: the session's symptom (KeyError" in report
