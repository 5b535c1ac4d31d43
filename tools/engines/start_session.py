"""start_session: open a debugging session with its triage (Quick Path or Full Protocol)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.judge.triage import triage
from rootcause.tools.record.store import Phase, SessionStore, Triage


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
