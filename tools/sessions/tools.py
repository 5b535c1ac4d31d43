"""The session tools: start_session, the session report, close_session."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tools.context import ToolContext
from tools.errors import UsageError
from tools.results import ToolResult, bounded
from tools.sessions.report import render_report
from tools.sessions.store import Phase, SessionStore
from tools.sessions.triage import Triage, triage


class StartSessionInput(BaseModel):
    """Start a debugging session: triage the symptom into the Quick Path or the Full Protocol."""

    symptom: str = Field(description="The failure in the user's words or the key error line.")
    path_hint: Literal["quick", "full"] | None = Field(
        None, description="Ask for a path; 'quick' is overridden when the symptom requires the Full Protocol."
    )


class StartSessionResult(ToolResult, Triage):
    """The new session's id and phases plus its triage (the same fields the session state keeps)."""

    session_id: str
    phases: list[Phase]
    head: str | None = None
    next: str

    def summary(self) -> str:
        phases = ", ".join(f"{p.number} {p.name}: {p.status}" for p in self.phases)
        return (
            f"Session {self.session_id} — {self.path.upper()} path ({self.category}).\n"
            f"Why: {'; '.join(self.reasons)}\nKeywords: {', '.join(self.keywords)}\n"
            f"Checklists: {', '.join(self.checklists) or 'none'}\nPhases: {phases}\nNext: {self.next}"
        )


def start_session(inp: StartSessionInput, ctx: ToolContext) -> StartSessionResult:
    symptom = inp.symptom.strip()
    if not symptom:
        raise UsageError("symptom is empty.", "describe the failure, e.g. 'loss is NaN after step 1200 on 8 GPUs'")
    if len(symptom) > 20_000:
        raise UsageError(f"symptom is {len(symptom)} characters long.",
                         "give the key error lines (under 20,000 characters); pass whole logs to diagnose_log")
    result = triage(symptom, inp.path_hint)
    state = SessionStore(ctx.workspace).create(symptom, result)
    nxt = ("reproduce the failure (reproduce) or diagnose an existing log (diagnose_log), "
           "then check_constraints")
    return StartSessionResult(
        session_id=state.session_id, phases=state.phases, head=state.head, next=nxt, **result.model_dump()
    )


class SessionIdInput(BaseModel):
    session_id: str = Field(description="The id returned by start_session.")


class SessionReport(ToolResult):
    session_id: str
    status: str
    path: str
    phases: list[Phase]
    report: str

    def summary(self) -> str:
        return self.report


def session_report(inp: SessionIdInput, ctx: ToolContext) -> SessionReport:
    state = SessionStore(ctx.workspace).load(inp.session_id)
    return SessionReport(session_id=state.session_id, status=state.status, path=state.path,
                         phases=state.phases, report=render_report(state))


class CloseSessionInput(SessionIdInput):
    """Close a debugging session and return its final report; refused until Phase 5 is done.

    The report lists the symptom, the path, the phases, the hypotheses in order with their results,
    the fix attempts and every piece of evidence. Phase 5 (knowledge capture) must be done first:
    call capture_knowledge, with kind 'none' and the reason when there is nothing to capture.
    """


REPORT_LIMIT = 20_000


class CloseSessionResult(SessionReport):
    closed: bool = True
    report_path: str = Field(description="The full report, written beside the session's event log.")
    hypotheses: int = 0
    fix_attempts: int = 0
    fixed: bool = False


def close_session(inp: SessionIdInput, ctx: ToolContext) -> CloseSessionResult:
    store = SessionStore(ctx.workspace)
    state = store.load(inp.session_id)
    if state.phase(5).status != "done":
        raise UsageError(
            f"session {inp.session_id!r} cannot close: Phase 5 (knowledge capture) is {state.phase(5).status}.",
            "call capture_knowledge with kind constraint/architecture/regression_guard/docs, "
            "or kind 'none' with the reason there is nothing to capture",
        )
    if state.status != "closed":
        state = store.set_status(inp.session_id, "closed")
    report = render_report(state)
    path = ctx.workspace.state_dir("sessions", state.session_id) / "report.md"
    path.write_text(report, encoding="utf-8")
    if len(report) > REPORT_LIMIT:
        marker = f"\n… [truncated: the whole report is {ctx.workspace.relative(path)}] …\n"
        report = bounded(report, REPORT_LIMIT, marker)
    tools_used = [e.tool for e in state.evidence]
    return CloseSessionResult(session_id=state.session_id, status=state.status, path=state.path,
                              phases=state.phases, report=report, report_path=ctx.workspace.relative(path),
                              hypotheses=tools_used.count("verify_hypothesis"),
                              fix_attempts=tools_used.count("record_fix_attempt"),
                              fixed=bool(state.facts.get("fixed")))

