"""reproduce: Phase 1's "reproduce consistently".

reproduce runs a command several times through the one runner, diagnoses every failing
run (rootcause.tools.observe.diagnosis), and says whether the failure reproduces with one signature. It adds
the recent commits and the facts of the interpreter the command runs under. diagnose_log
applies the same diagnosis to a log produced elsewhere, read streaming.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field
from rootcause.tools.core import gitrepo
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import MAX_RESULT_CHARS, ToolResult, bounded
from rootcause.tools.core.validate import regex_field
from rootcause.tools.observe.diagnosis import Diagnosis
from rootcause.tools.observe.evidence import (
    EXPECT_TEXT,
    MetricYardstick,
    Observation,
    RunFields,
    Yardstick,
    declare,
    diagnosis_line,
    run_observed,
    yardstick,
)
from rootcause.tools.observe.evidence.expect import EXPECT_FLAGS
from rootcause.tools.record.evidence import ReproduceEvidence
from rootcause.tools.record.store import SessionStore, require_open
from rootcause.tools.run.environment import EnvironmentFacts, gather

MAX_RUNS = 20


class ReproduceInput(RunFields):
    """Run a failing command several times (own process group, stdin closed, full logs on disk, wall-clock and
    no-output timeouts, Python stacks captured on a hang) and diagnose it: is the failure reproducible with one
    signature, or flaky? Returns each run's outcome and signature, the diagnosis of the first failing run
    (category, root error, location, ranks, hang stacks, failed tests), the last 10 commits and the
    interpreter's facts (Python, torch/transformers versions, CUDA, relevant env vars). A run that exits 0 but
    prints NaN losses or a swallowed traceback fails (outcome_reason says why). With expect (or a session's
    symptom), runs failing otherwise are a different_failure, not a reproduction. With metric (or reference), a
    run that exits 0 fails when its numbers hold the condition and is inconclusive when its output lacks them.
    A failing command is a successful call. Phase 1 of the protocol."""

    runs: int = Field(2, ge=1, le=MAX_RUNS, description=f"How many runs, 1..{MAX_RUNS}.")
    expect: str | None = Field(None, description=f"{EXPECT_TEXT} Default with a session: the session's symptom (its "
                                                 "category and keywords) is the yardstick.")
    session_id: str | None = Field(None, description="Session to record the result in (advances Phase 1).")
    check_expect = regex_field("expect", EXPECT_FLAGS)


Status = Literal["reproduced", "flaky", "not_reproduced", "different_failure", "inconclusive"]


class ReproduceResult(ToolResult):
    status: Status
    command: list[str]
    runs: list[Observation]
    diagnosis: Diagnosis | None = Field(None, description="Diagnosis of the first failing run (the first showing "
                                                          "the expected failure, when one does).")
    consistent: bool = Field(description="Every run failed, all with one signature.")
    matches_symptom: bool | None = Field(
        None, description="Whether the failing runs show the expected failure (expect, else the session's symptom);"
                          " null when nothing was expected or no run failed.")
    expected: str | None = Field(None, description="What the failure was expected to show, when anything.")
    interpreter: str = Field(description="The interpreter the command's `python` resolved to, and why.")
    outside_root: list[str] = Field(default_factory=list, description="Files of the project's own packages the "
                                    "tracebacks name outside the root: the run did not test this tree's code.")
    recent_commits: list[str] = Field(default_factory=list, description="git log --oneline -10.")
    environment: EnvironmentFacts
    next: str

    def summary(self) -> str:
        failing = [r for r in self.runs if r.outcome != "pass"]
        outcomes = ", ".join(r.outcome for r in self.runs)
        shown = self.diagnosis and diagnosis_line(self.diagnosis)
        head = {
            "reproduced": f"REPRODUCED — {len(failing)}/{len(self.runs)} runs failed with one signature",
            "flaky": f"FLAKY — {len(failing)}/{len(self.runs)} runs failed"
                     f" ({len({r.signature for r in failing})} signature(s))",
            "not_reproduced": f"NOT REPRODUCED — {self._passed()}",
            "inconclusive": f"INCONCLUSIVE — no run could be judged: {self.runs[0].problem if self.runs else ''}",
            "different_failure": f"DIFFERENT FAILURE — {len(failing)}/{len(self.runs)} runs failed, but not with "
                                 f"the expected failure: expected {self.expected}; got {shown}",
        }[self.status]
        lines = [f"{head} ({outcomes}).", f"Command: {' '.join(self.command)[:300]}"]
        if self.status != "different_failure" and self.expected and self.matches_symptom:
            # "the diagnosed log's failure (same group, the same call site)" when a pasted log is the yardstick
            why = next((r.match_reason for r in self.runs if r.matches_expected and r.match_reason), None)
            lines.append(f"Matches {self.expected}" + (f": {why}." if why else "."))
        if self.outside_root:
            lines.append("WARNING: the tracebacks name the project's own files OUTSIDE the root, so the run did not "
                         f"test this tree's code: {', '.join(self.outside_root[:3])}")
        if self.diagnosis:
            lines += diagnosis_lines(self.diagnosis)
        lines.append("Runs:")
        for r in self.runs:
            extra = f", {r.timed_out} timeout" if r.timed_out else ""
            why = f" — {r.outcome_reason}" if r.outcome_reason.startswith("exit 0, but") else ""
            if r.yardstick is not None and r.yardstick.reason not in why:
                why += f" — {r.yardstick.reason}"
            mark = " [different failure]" if r.matches_expected is False else ""
            job = f"Slurm job {r.job_id}, " if r.job_id else ""
            lines.append(f"  {r.run_id}: {r.outcome} ({job}{r.code()}{extra}, {r.duration_s:.1f}s){why}{mark} "
                         f"log {r.log_path}")
        lines.append(f"Interpreter: {self.interpreter}")
        lines.append(f"Environment: {self.environment.one_line()}" +
                     (f" [{self.environment.error}]" if self.environment.error else ""))
        if self.recent_commits:
            lines.append("Recent commits: " + " | ".join(self.recent_commits[:5]))
        lines.append(f"Next: {self.next}")
        return "\n".join(lines)


    def _passed(self) -> str:
        passed = [r for r in self.runs if r.outcome == "pass"]
        text = f"all {len(self.runs)} runs passed" if len(passed) == len(self.runs) else \
            f"{len(passed)}/{len(self.runs)} runs passed, the others could not be judged"
        read = next((r.yardstick for r in passed if r.yardstick is not None), None)
        return text + (f" ({read.reason})" if read is not None else "")


def diagnosis_lines(d: Diagnosis) -> list[str]:
    lines = [f"Diagnosis: {diagnosis_line(d)}", f"Signature: {d.signature}"]
    if d.keywords:
        lines.append(f"Keywords: {', '.join(d.keywords)}")
    if d.ranks:
        shown = ", ".join(f"{k}: {v.outcome}" + (f" on {v.node}" if v.node else "")
                          for k, v in list(d.ranks.items())[:16])
        lines.append(f"Ranks: {shown}")
    for stack in d.stacks[:8]:
        lines.append(f"  {stack.describe()}")
    if d.failed_tests:
        lines.append(f"Failed tests: {', '.join(d.failed_tests[:10])}")
    if d.excerpt:
        lines.append("Excerpt:\n" + bounded(d.excerpt, 2_500))
    return lines


# ---------------------------------------------------------------- reproduce


def _status(runs: list[Observation], stick: Yardstick | MetricYardstick | None) -> tuple[Status, bool, bool | None]:
    """(status, consistent, matches_symptom): runs failing otherwise than expected do not reproduce it."""
    failing = [r for r in runs if r.failed]
    if not failing:  # runs a metric yardstick cannot judge (the metric missing) never count as passes
        return ("inconclusive" if all(r.outcome == "inconclusive" for r in runs) else "not_reproduced"), False, None
    consistent = len(failing) == len(runs) and len({r.signature for r in failing}) == 1
    if stick is None:
        return ("reproduced" if consistent else "flaky"), consistent, None
    matching = [r for r in failing if r.matches_expected]
    if not matching and all(r.matches_expected is None for r in failing):
        return ("reproduced" if consistent else "flaky"), consistent, None  # the symptom was too vague to judge
    if not matching:
        return "different_failure", consistent, False
    if len(matching) == len(runs) and len({r.signature for r in matching}) == 1:
        return "reproduced", True, True
    return "flaky", False, True


def next_step(status: str, diagnosis: Diagnosis | None) -> str:
    if status == "inconclusive":
        return ("the runs exited 0 without printing the metric the yardstick judges: check its name against the "
                "metrics read (the reason lists them), print it, or judge a step the run reaches")
    if status == "not_reproduced":
        return ("the failure did not reproduce: check the environment against the failing one (compare_setups), "
                "raise runs for an intermittent failure, or diagnose the original log (diagnose_log)")
    if status == "different_failure":
        return ("the command fails, but not with the expected failure: fix what stops it first (the environment, "
                "the network, the command) or correct expect; this run is not a reproduction")
    if status == "flaky":
        return ("intermittent: raise runs to measure the rate; compare the signatures of the failing runs; "
                "suspect races, seeds, data order, or ranks that differ; then check_constraints")
    hint = f" with keywords {', '.join(diagnosis.keywords)}" if diagnosis and diagnosis.keywords else ""
    if diagnosis is not None and diagnosis.category == "metric_regression":
        return ("reproducible by its numbers (the run exits 0): find the change that moved them with bisect_commits "
                f"or bisect_versions and the same metric / reference, or compare_setups against a good run; "
                f"check_constraints{hint}")
    return f"reproducible: check_constraints{hint}, then read the location and trace the data flow backward"


def _shrink(result: ReproduceResult) -> ReproduceResult:
    """Keep the structured result under the size limit: cut the bulkiest parts first."""
    if len(result.model_dump_json()) <= MAX_RESULT_CHARS - 1_000 or result.diagnosis is None:
        return result
    d = result.diagnosis
    d.excerpt = bounded(d.excerpt, 1_500)
    d.frames = d.frames[-10:]
    d.failed_tests = d.failed_tests[:20]
    d.stacks = d.stacks[:8]
    for stack in d.stacks:
        stack.frames = stack.frames[-6:]
    d.ranks = dict(list(d.ranks.items())[:32])
    d.message = bounded(d.message, 800)
    return result


async def reproduce(inp: ReproduceInput, ctx: ToolContext) -> ReproduceResult:
    store = SessionStore(ctx.workspace)
    state = require_open(store, inp.session_id) if inp.session_id else None
    if not 1 <= inp.runs <= MAX_RUNS:
        raise UsageError(f"runs must be between 1 and {MAX_RUNS}, got {inp.runs}.",
                         "use runs=2 for a quick check, up to 20 for a flaky failure")
    decl = declare(inp, ctx.workspace, label="reproduce")
    stick = yardstick(inp.expect, state)
    runs = await run_observed(decl, ctx, runs=inp.runs, yardstick=stick)
    expected = " or ".join(x.describe() for x in (stick, decl.metric) if x is not None) or None
    await ctx.progress(inp.runs, inp.runs, "all runs done; gathering the environment")
    status, consistent, matched = _status(runs, stick or decl.metric)
    assert decl.interpreter is not None
    environment = await gather(ctx.workspace, decl.interpreter.path, {**os.environ, **decl.env})
    failing = [r for r in runs if r.failed]
    shown = next((r for r in failing if r.matches_expected), failing[0] if failing else None)
    outside = list(dict.fromkeys(f for r in runs for f in r.outside_root))
    result = ReproduceResult(
        status=status, command=decl.argv, consistent=consistent, diagnosis=shown.diagnosis if shown else None,
        runs=runs, matches_symptom=matched, expected=expected,
        interpreter=decl.interpreter.describe(), outside_root=outside,
        recent_commits=gitrepo.recent_commits(ctx.root, 10), environment=environment,
        next=next_step(status, shown.diagnosis if shown else None),
    )
    if outside:
        result.next = ("the run imported the project's code from outside the root "
                       f"({outside[0]}): fix the interpreter or PYTHONPATH first (pass python=). ") + result.next
    result = _shrink(result)
    if inp.session_id:
        data = result.model_dump(mode="json")
        if data.get("diagnosis"):
            data["diagnosis"]["excerpt"] = bounded(data["diagnosis"]["excerpt"], 1_500)
        store.record(inp.session_id, "reproduce", ReproduceEvidence.model_validate(data).render(), data, phase=1)
    return result
