"""The stop rules and path switches the session enforces, shared by the Phase 3 and Phase 4 tools.

Counters live in the session facts (replayed from the event log), so they survive a
server restart and every client sees the same state.
"""

from __future__ import annotations

from tools.errors import UsageError
from tools.sessions import QUICK_PATH_MINUTES, SessionState, SessionStore, now

STOP_AFTER = 3
CONSECUTIVE = "fix_consecutive_failures"
FAILED_TOTAL = "fix_failures_total"
ATTEMPTS = "fix_attempts"
FIXED = "fixed"
HYPOTHESES = "hypotheses"

STOP_MESSAGE = (
    f"STOP: {STOP_AFTER} consecutive fix attempts failed. Stop fixing symptoms. Question the approach: is the "
    "underlying design wrong, are you solving the right problem, what did the failed attempts have in common? "
    "Report this analysis to the user before changing anything else. Fix attempts are refused until "
    "verify_hypothesis supports a new hypothesis."
)
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
