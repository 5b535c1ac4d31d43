"""close_session (and the session report the CLI shows): the final report, refused until Phase 5 is done."""

from __future__ import annotations

from pydantic import BaseModel, Field
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult, bounded
from rootcause.tools.record.report import render_report
from rootcause.tools.record.store import Phase, SessionStore


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

