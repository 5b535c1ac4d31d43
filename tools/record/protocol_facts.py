"""The session facts the protocol keeps (fix counters, hypotheses) and the stop rule's numbers and words."""

from __future__ import annotations

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
