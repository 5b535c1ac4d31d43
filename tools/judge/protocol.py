"""The stop rules and path switches the session enforces, shared by the Phase 3 and Phase 4 tools.

Counters live in the session facts (replayed from the event log), so they survive a
server restart and every client sees the same state.
"""

from __future__ import annotations

from rootcause.tools.core.errors import UsageError
from rootcause.tools.judge.triage import QUICK_PATH_MINUTES
from rootcause.tools.record.protocol_facts import (
    ATTEMPTS,
    CONSECUTIVE,
    FAILED_TOTAL,
    FIXED,
    HYPOTHESES,
    STOP_AFTER,
    STOP_MESSAGE,
)
from rootcause.tools.record.store import SessionState, SessionStore, now

__all__ = ["ATTEMPTS", "CONSECUTIVE", "FAILED_TOTAL", "FIXED", "HYPOTHESES", "STOP_AFTER", "STOP_MESSAGE"]

PHASE5_REMINDER = (
    "Phase 5 (mandatory): capture what was learned with capture_knowledge — a constraint, an architecture "
    "insight, a regression guard in a CI-enumerated test, or docs — or kind 'none' with the reason; "
    "then close_session."
)


def refuse_if_stopped(state: SessionState) -> None:
    if state.status == "stopped":
        raise UsageError(
            f"session {state.session_id!r} is stopped after {STOP_AFTER} consecutive failed fix attempts; "
            "no more fix attempts until the approach is reconsidered.",
            "report your analysis to the user, then form a new hypothesis and run verify_hypothesis; "
            "a supported result re-opens the session",
        )


def quick_path_overdue(state: SessionState) -> str | None:
    """The reason to leave the Quick Path because of time, or None."""
    if state.path != "quick" or state.facts.get(FIXED):
        return None
    minutes = (now() - state.created_ts) / 60
    if minutes <= QUICK_PATH_MINUTES:
        return None
    return (f"Quick Path not resolved after {minutes:.0f} minutes (limit {QUICK_PATH_MINUTES}): switched to the "
            "Full Protocol")


def switch_to_full(store: SessionStore, state: SessionState, reason: str) -> SessionState:
    return store.set_path(state.session_id, "full", reason)


def reopen(store: SessionStore, state: SessionState, why: str) -> SessionState:
    """A supported hypothesis lifts the stop: the count restarts for the new approach."""
    store.set_facts(state.session_id, **{CONSECUTIVE: 0, "reopened_because": why})
    return store.set_status(state.session_id, "open")
