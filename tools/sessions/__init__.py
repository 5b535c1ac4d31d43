"""Debugging sessions: triage at start (triage), the event log and state (store), the report (report),
and the session tools (tools)."""

from tools.sessions.report import render_report
from tools.sessions.store import (
    CLOCK_OFFSET_ENV,
    PHASE_NAMES,
    SESSION_ID,
    Evidence,
    Phase,
    PhaseStatus,
    SessionState,
    SessionStore,
    now,
    require_open,
)
from tools.sessions.tools import (
    REPORT_LIMIT,
    CloseSessionInput,
    CloseSessionResult,
    SessionIdInput,
    SessionReport,
    StartSessionInput,
    StartSessionResult,
    close_session,
    session_report,
    start_session,
)
from tools.sessions.triage import QUICK_PATH_MINUTES, Triage, triage

__all__ = [
    "CLOCK_OFFSET_ENV", "PHASE_NAMES", "QUICK_PATH_MINUTES", "REPORT_LIMIT", "SESSION_ID", "CloseSessionInput",
    "CloseSessionResult", "Evidence", "Phase", "PhaseStatus", "SessionIdInput", "SessionReport", "SessionState",
    "SessionStore", "StartSessionInput", "StartSessionResult", "Triage", "close_session", "now", "render_report",
    "require_open", "session_report", "start_session", "triage",
]
