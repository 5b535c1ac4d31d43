"""record_fix_attempt: counting, the stop rule, re-opening, the Quick Path switches, closing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.close_session import SessionIdInput, close_session
from rootcause.tools.engines.record_fix_attempt import RecordFixAttemptInput, record_fix_attempt
from rootcause.tools.engines.start_session import StartSessionInput, start_session
from rootcause.tools.engines.verify_hypothesis import VerifyHypothesisInput, verify_hypothesis
from rootcause.tools.record.report import render_report
from rootcause.tools.record.store import CLOCK_OFFSET_ENV, SessionStore

from tests.protocol_project import (
    ROOT_FIX,
    SYMPTOM,
    SYMPTOM_FIX,
    VERIFY,
    edit,
    make_project,
    record_baseline,
)
from tests.test_hypothesis import GOOD

pytestmark = pytest.mark.anyio


@pytest.fixture
def project(repo: Path) -> Path:
    return make_project(repo)


async def _start(root: Path, path_hint: str | None = None, baseline: bool = True) -> str:
    sid = start_session(StartSessionInput(symptom=SYMPTOM, path_hint=path_hint), ToolContext.for_root(root)).session_id
    if baseline:
        await record_baseline(root, sid)
    return sid


@pytest.fixture
def sid(project: Path) -> str:
    """Created before no_leftover_processes snapshots (gitpython keeps a `git cat-file` child per repo)."""
    return anyio.run(_start, project, "full")


async def _fix(root: Path, sid: str, description: str = "guard the division in mean()", **extra: Any):
    return await record_fix_attempt(
        RecordFixAttemptInput(session_id=sid, description=description, command=extra.pop("command", VERIFY),
                              **extra), ToolContext.for_root(root))


async def test_three_failures_stop_then_a_supported_hypothesis_reopens(
        project: Path, sid: str, no_leftover_processes: None) -> None:
    edit(project, *SYMPTOM_FIX)
    results = [await _fix(project, sid) for _ in range(3)]
    assert [r.consecutive_failures for r in results] == [1, 2, 3]
    assert [r.stop for r in results] == [False, False, True]
    assert not any(r.fixed for r in results)
    assert "AssertionError" in (results[0].run.error or "") and results[0].signature_gone is True
    assert "STOP" in results[2].next and "report this analysis to the user" in results[2].next.lower()
    store = SessionStore(ToolContext.for_root(project).workspace)
    assert store.load(sid).status == "stopped"
    with pytest.raises(UsageError, match="is stopped") as refused:
        await _fix(project, sid)
    assert "verify_hypothesis" in str(refused.value)
    assert store.load(sid).facts["fix_attempts"] == 3  # the refused call ran nothing and recorded nothing

    edit(project, SYMPTOM_FIX[1], SYMPTOM_FIX[0])  # back to the original code, then a new hypothesis
    refuted = await verify_hypothesis(VerifyHypothesisInput(
        session_id=sid, **{**GOOD, "command": "python stats.py sample.json", "changed": "the input file"}),
        ToolContext.for_root(project))
    assert refuted.result == "refuted" and refuted.session_status == "stopped"
    assert store.load(sid).status == "stopped"  # only a supported hypothesis lifts the stop
    reopened = await verify_hypothesis(VerifyHypothesisInput(session_id=sid, **GOOD), ToolContext.for_root(project))
    assert reopened.result == "supported" and reopened.session_status == "open"
    assert "re-opened" in reopened.next
    assert store.load(sid).status == "open"

    edit(project, *ROOT_FIX)
    fixed = await _fix(project, sid, description="default THRESHOLD to 0 so load() keeps the data")
    assert fixed.fixed and fixed.consecutive_failures == 0 and not fixed.stop
    assert fixed.signature_gone is True
    assert (fixed.original_signature or "").startswith("v3|ZeroDivisionError|division by zero")
    assert fixed.next.startswith("collateral not checked: run check_collateral.") and "Phase 5" in fixed.next
    state = store.load(sid)
    assert state.phase(4).status == "done" and state.facts["fix_consecutive_failures"] == 0
    report = render_report(state)
    assert "## Fix attempts" in report and "3. **STOP**" in report and "4. **fixed**" in report


async def test_success_after_collateral_says_so(project: Path, sid: str) -> None:
    store = SessionStore(ToolContext.for_root(project).workspace)
    store.record(sid, "check_collateral", "clean", {"verdict": "clean"}, phase=4)
    edit(project, *ROOT_FIX)
    fixed = await _fix(project, sid, description="default THRESHOLD to 0")
    assert fixed.fixed and fixed.collateral_checked and fixed.next.startswith("collateral checked.")


async def test_passing_output_that_still_shows_the_error_is_not_fixed(project: Path, sid: str) -> None:
    command = ("python -c \"import traceback\ntry:\n    1/0\nexcept ZeroDivisionError:\n"
               "    traceback.print_exc()\nprint('done')\"")
    result = await _fix(project, sid, description="catch the error", command=command)
    # Exit 0 after a printed traceback is a failure the output shows (the evidence layer's rule).
    assert result.run.exit_code == 0 and result.run.outcome == "fail" and not result.fixed
    assert result.run.outcome_reason.startswith("exit 0, but a traceback ends the output")
    assert "ZeroDivisionError" in result.reason
    assert result.consecutive_failures == 1


async def test_quick_path_second_failure_switches_to_full(project: Path) -> None:
    sid = await _start(project)
    store = SessionStore(ToolContext.for_root(project).workspace)
    assert store.load(sid).path == "quick"
    edit(project, *SYMPTOM_FIX)
    first = await _fix(project, sid)
    assert first.path == "quick" and first.path_switched is None
    second = await _fix(project, sid)
    assert second.path == "full" and "second on the Quick Path" in (second.path_switched or "")
    state = store.load(sid)
    assert state.path == "full" and "second on the Quick Path" in state.path_changes[-1]
    assert "Path change:" in render_report(state)


async def test_quick_path_switches_after_fifteen_minutes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = await _start(project)
    monkeypatch.setenv(CLOCK_OFFSET_ENV, str(16 * 60))
    edit(project, *ROOT_FIX)
    result = await _fix(project, sid, description="default THRESHOLD to 0")
    assert result.fixed  # the switch happens on the call, whatever its outcome
    assert result.path == "full" and "after 16 minutes" in (result.path_switched or "")
    assert SessionStore(ToolContext.for_root(project).workspace).load(sid).path == "full"


async def test_quick_path_within_fifteen_minutes_stays(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = await _start(project)
    monkeypatch.setenv(CLOCK_OFFSET_ENV, str(14 * 60))
    result = await _fix(project, sid, description="try it")
    assert result.path == "quick" and result.path_switched is None and result.consecutive_failures == 1


async def test_without_baseline_only_the_exit_status_counts(project: Path) -> None:
    sid = await _start(project, path_hint="full", baseline=False)
    edit(project, *ROOT_FIX)
    result = await _fix(project, sid, description="default THRESHOLD to 0")
    assert result.fixed and result.signature_gone is None and "only the exit" in result.reason


async def test_bad_input_and_close(project: Path, sid: str) -> None:
    with pytest.raises(UsageError, match="unknown session"):
        await _fix(project, "20200101-000000-abcdef")
    with pytest.raises(UsageError, match="description is empty"):
        await _fix(project, sid, description="  ")
    with pytest.raises(UsageError, match="command is empty"):
        await _fix(project, sid, command="")
    with pytest.raises(UsageError, match="cwd"):
        await _fix(project, sid, cwd="../elsewhere")
    ctx = ToolContext.for_root(project)
    with pytest.raises(UsageError, match="Phase 5"):
        close_session(SessionIdInput(session_id=sid), ctx)
    SessionStore(ctx.workspace).record(sid, "capture_knowledge", "no new knowledge", phase=5, phase_status="done")
    closed = close_session(SessionIdInput(session_id=sid), ctx)
    assert closed.status == "closed" and closed.report.startswith(f"# rootcause session {sid}")
    assert (project / closed.report_path).read_text() == closed.report
    assert (closed.hypotheses, closed.fix_attempts, closed.fixed) == (0, 0, False)
    with pytest.raises(UsageError, match="is closed"):
        await _fix(project, sid)


async def test_close_bounds_a_long_report(project: Path) -> None:
    sid = await _start(project, path_hint="full", baseline=False)
    ctx = ToolContext.for_root(project)
    store = SessionStore(ctx.workspace)
    for index in range(30):
        store.record(sid, "diagnose_log", f"log {index}\n" + "x" * 1_000, phase=1)
    store.record(sid, "capture_knowledge", "none", phase=5, phase_status="done")
    closed = close_session(SessionIdInput(session_id=sid), ctx)
    full = (project / closed.report_path).read_text()
    assert len(full) > 30_000 and len(closed.report) <= 20_000
    assert "truncated: the whole report is .rootcause/sessions/" in closed.report
