"""record_fix_attempt: Phase 4 — run the verification after a fix, count failures, enforce the stop rule."""

from __future__ import annotations

from pydantic import Field
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.core.validate import regex_field
from rootcause.tools.judge import protocol
from rootcause.tools.judge.baseline import FALLBACK_FACT, Baseline, baseline_of
from rootcause.tools.judge.experiment import run_command
from rootcause.tools.observe.evidence import EXPECT_TEXT, Observation, RunFields, declare, yardstick
from rootcause.tools.observe.evidence.expect import EXPECT_FLAGS
from rootcause.tools.record.evidence import FixAttemptEvidence
from rootcause.tools.record.store import SessionStore, require_open


class RecordFixAttemptInput(RunFields):
    """Phase 4: after one targeted fix, run the verification command (the reproducer, the module's tests).

    fixed is true when the command passes and the session's original failure signature is gone.
    Consecutive failures are counted in the session; at 3, stop is true, the session is stopped and
    further attempts are refused until verify_hypothesis supports a new hypothesis. On the Quick Path
    a second failed attempt, or 15 minutes without a fix, switches the session to the Full Protocol.
    A success resets the count and reminds you of check_collateral and Phase 5 (capture_knowledge).
    """

    session_id: str = Field(description="The id returned by start_session (required).")
    description: str = Field(description="What this fix changes and why, in one or two sentences.")
    expect: str | None = Field(None, description=f"{EXPECT_TEXT} Default: the session's symptom.")
    check_expect = regex_field("expect", EXPECT_FLAGS)


class RecordFixAttemptResult(ToolResult):
    session_id: str
    attempt: int
    fixed: bool
    reason: str
    run: Observation
    judged: bool = Field(True, description="False when the run cannot judge the fix (tests not run, code imported "
                                           "from outside the root): the attempt is not counted.")
    original_signature: str | None
    signature_gone: bool | None = Field(description="Whether the original failure is absent; None without a baseline.")
    consecutive_failures: int
    stop: bool
    path: str
    path_switched: str | None = Field(None, description="Why the session left the Quick Path on this call.")
    collateral_checked: bool
    session_status: str
    next: str

    def summary(self) -> str:
        head = "FIXED" if self.fixed else "STOP" if self.stop else "NOT JUDGED" if not self.judged else "NOT FIXED"
        lines = [f"Fix attempt {self.attempt}: {head} — {self.reason}",
                 f"Run {self.run.run_id}: {self.run.one_line()}",
                 *([f"Interpreter: {self.run.interpreter_note}"] if self.run.interpreter_note else []),
                 f"Consecutive failures: {self.consecutive_failures}/{protocol.STOP_AFTER}; path {self.path}; "
                 f"session {self.session_status}"]
        if self.path_switched:
            lines.append(f"Path switched: {self.path_switched}")
        lines.append(f"Next: {self.next}")
        return "\n".join(lines)


def _signature_gone(run: Observation, output: str, baseline: Baseline | None) -> tuple[bool | None, str]:
    if baseline is None or not baseline.signature:
        return None, "no baseline failure recorded in the session (run reproduce with session_id): only the exit " \
                     "status was checked"
    if run.outcome != "pass":
        same, how = baseline.same_failure(run.signature)
        if same:
            return False, f"the original failure is still there ({how})"
        return True, f"the original signature is gone but the run fails differently: {run.error}"
    error_line = (baseline.error or "").splitlines()[0][:200] if baseline.error else ""
    if len(error_line) >= 10 and error_line in output:
        return False, f"the command passes but its output still shows the original error {error_line!r}"
    return True, "the command passes and the original signature is gone"


async def record_fix_attempt(inp: RecordFixAttemptInput, ctx: ToolContext) -> RecordFixAttemptResult:
    store = SessionStore(ctx.workspace)
    state = require_open(store, inp.session_id)
    protocol.refuse_if_stopped(state)
    if not inp.description.strip():
        raise UsageError("description is empty.", "say what this fix changes and why, in a sentence")
    declare(inp, ctx.workspace, label="record_fix_attempt")  # bad arguments (metric, reference...) before any change
    switched: list[str] = []
    overdue = protocol.quick_path_overdue(state)
    if overdue:
        state = protocol.switch_to_full(store, state, overdue)
        switched.append(overdue)
    baseline = baseline_of(state)
    stick = yardstick(inp.expect, state)
    [(run, output)] = await run_command(inp, ctx, runs=1, label="record_fix_attempt", yardstick=stick)
    gone, why = _signature_gone(run, output, baseline)
    if run.outside_root:
        run.problem = f"imports the project's code from outside the root ({run.outside_root[0]})"
    elif run.interpreter_note and run.failed:
        why += f" (ran with {run.interpreter_note})"
    facts = state.facts
    attempt = int(facts.get(protocol.ATTEMPTS, 0)) + 1
    consecutive = int(facts.get(protocol.CONSECUTIVE, 0))
    failed_total = int(facts.get(protocol.FAILED_TOTAL, 0))
    counted = run.problem is None
    fixed = counted and run.outcome == "pass" and gone is not False
    if not counted:
        why = (f"not judged: the run imported the project's own code from OUTSIDE the root "
               f"({', '.join(run.outside_root[:2])}), so it did not test this tree's fix; check the interpreter (a "
               "copied .venv/bin script whose shebang points elsewhere) or PYTHONPATH; this attempt is not counted"
               if run.outside_root else
               f"the verification cannot judge the fix: {run.problem}; this attempt is not counted"
               if run.outcome == "inconclusive" else
               f"the verification did not run the tests ({run.problem}); this attempt is not counted")
    elif fixed:
        consecutive = 0
    else:
        consecutive += 1
        failed_total += 1
    new_facts: dict[str, object] = {protocol.ATTEMPTS: attempt, protocol.CONSECUTIVE: consecutive,
                                    protocol.FAILED_TOTAL: failed_total}
    if fixed:
        new_facts[protocol.FIXED] = True
    if baseline is None and run.outcome != "pass" and run.signature:
        new_facts[FALLBACK_FACT] = {"status": "fallback", "signature": run.signature, "outcomes": [run.outcome],
                                    "error": run.error}
    store.set_facts(inp.session_id, **new_facts)
    stop = counted and not fixed and consecutive >= protocol.STOP_AFTER
    if counted and not fixed and failed_total >= 2 and state.path == "quick":
        reason = f"fix attempt {attempt} failed, the second on the Quick Path: switched to the Full Protocol"
        state = protocol.switch_to_full(store, state, reason)
        switched.append(reason)
    collateral = any(e.tool == "check_collateral" for e in state.evidence)
    if stop:
        nxt = protocol.STOP_MESSAGE
    elif fixed:
        nxt = ("collateral checked. " if collateral else "collateral not checked: run check_collateral. ") + \
            protocol.PHASE5_REMINDER
    elif not counted:
        nxt = ("run the verification with the project's own interpreter (python=.venv/bin/python) so it imports "
               "this tree, then record the attempt again" if run.outside_root else
               "make the verification print the metric the yardstick judges (or fix its name), then record the "
               "attempt again" if run.outcome == "inconclusive" else
               "fix the verification command so that it runs the tests, then record the attempt again")
    else:
        nxt = (f"not fixed ({consecutive}/{protocol.STOP_AFTER} consecutive failures). Do not pile on another "
               "change: revert this one, go back to the evidence and the supported hypothesis, then make one "
               "targeted fix")
    if switched:
        nxt = f"{' '.join(switched)} (run the Full Protocol phases: compare_setups, verify_hypothesis). {nxt}"
    status = "stopped" if stop else state.status
    evidence = FixAttemptEvidence(
        attempt=attempt, description=inp.description.strip(), command=inp.describe(), fixed=fixed, judged=counted,
        reason=why, run=run, original_signature=baseline.signature if baseline else None, signature_gone=gone,
        consecutive_failures=consecutive, stop=stop, path_switched=switched)
    store.record(inp.session_id, "record_fix_attempt", evidence.render(), evidence.model_dump(mode="json"),
                 phase=4, phase_status="done" if fixed else "in_progress")
    if stop:
        store.set_status(inp.session_id, "stopped")
    return RecordFixAttemptResult(
        session_id=state.session_id, attempt=attempt, fixed=fixed, reason=why, run=run, judged=counted,
        original_signature=baseline.signature if baseline else None, signature_gone=gone,
        consecutive_failures=consecutive, stop=stop, path=state.path,
        path_switched="; ".join(switched) or None, collateral_checked=collateral, session_status=status, next=nxt,
    )
