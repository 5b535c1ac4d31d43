"""What the three bisects share: the reproducer's fields, one rule for good / bad / skip, progress, sessions.

Every reproducer run goes through the evidence layer (rootcause.tools.observe.evidence): declared once, run by the
runner with the same timeouts, observed into an Observation. `judge` turns an observation into a
bisect step: good (it passes), bad (it fails with the expected failure, a hang included) or skip
with the reason (it never reached the code under test, or it fails with another failure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field
from rootcause.tools.bisect.causes import Scope, not_the_package
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.core.validate import regex_field
from rootcause.tools.observe.evidence import (
    EXPECT_TEXT,
    MAX_TIMEOUT_S,
    MetricReading,
    MetricYardstick,
    Observation,
    RunDeclaration,
    RunFields,
    Yardstick,
    declare,
    full_output,
    run_observed,
)
from rootcause.tools.observe.evidence import yardstick as make_yardstick
from rootcause.tools.observe.evidence.expect import EXPECT_FLAGS
from rootcause.tools.record.store import SessionStore, require_open

Outcome = Literal["pass", "fail", "hang", "crash", "skip", "not_run"]
Verdict = Literal["good", "bad", "skip"]


class ReproducerFields(RunFields):
    """RunFields (command, cwd, env, shell, python, timeout_s, idle_timeout_s) plus what a bisect adds."""

    expect: str | None = Field(
        None, description=f"{EXPECT_TEXT} It counts as bad; a run failing otherwise is skipped. Default with a "
                          "session: the session's symptom; else any failure (a hang included) is bad.")
    setup_timeout_s: float = Field(600.0, gt=0, description="Limit for one environment-building step (uv, git, "
                                                            "codegen), in seconds.")
    session_id: str | None = Field(None, description="Session to record the result in (advances Phase 2).")
    check_expect = regex_field("expect", EXPECT_FLAGS)


@dataclass
class Prepared:
    """The checks done once before any expensive work: the yardstick of 'bad'."""

    yardstick: Yardstick | None
    metric: MetricYardstick | None = None
    """The metric / reference yardstick (every run's declaration carries it; kept here for the reasons)."""


def prepare(inp: ReproducerFields, ctx: ToolContext) -> Prepared:
    """Validate the reproducer (command, timeouts, expect) and the session before any expensive work."""
    state = require_open(SessionStore(ctx.workspace), inp.session_id) if inp.session_id is not None else None
    if inp.launcher != "local":
        raise UsageError("the bisects run the reproducer locally, in their own environments and worktrees.",
                         "omit launcher (bisect on a login node, or reproduce on Slurm with reproduce)")
    decl = declare(inp, ctx.workspace, label="bisect")  # the one validation (command, timeouts, metric, ...)
    if not math.isfinite(inp.setup_timeout_s) or inp.setup_timeout_s > MAX_TIMEOUT_S:
        raise UsageError(f"setup_timeout_s must be finite and at most {MAX_TIMEOUT_S:g} s, got {inp.setup_timeout_s}.",
                         "e.g. setup_timeout_s=600")
    return Prepared(make_yardstick(inp.expect, state), decl.metric)


class Progress:
    """Numbered progress messages: every step of a bisect reports one."""

    def __init__(self, ctx: ToolContext, total: float | None = None) -> None:
        self.ctx, self.done, self.total = ctx, 0, total

    async def step(self, message: str) -> None:
        self.done += 1
        total = self.total if self.total is not None and self.total >= self.done else None
        await self.ctx.progress(self.done, total, message)


@dataclass
class Judged:
    """One reproducer run as a bisect step."""

    verdict: Verdict
    outcome: Outcome
    reason: str
    """The observation's outcome_reason, or why the step is skipped."""
    error: str | None = None
    signature: str | None = None
    exit_code: int | None = None
    matches_expected: bool | None = None
    run_id: str | None = None
    log_path: str | None = None
    observation: Observation | None = None
    output: str = ""
    yardstick: MetricReading | None = None
    """The metric yardstick's reading of the run (value, step, log line), when one was given."""
    group: str | None = None

    def not_the_package(self, scopes: tuple[Scope, ...]) -> str | None:
        if self.outcome in ("pass", "skip", "not_run") or self.observation is None:
            return None
        return not_the_package(self.output, self.exit_code, scopes)


def declaration(ctx: ToolContext, inp: ReproducerFields, *, source: Path, python: Path | None,
                label: str) -> RunDeclaration:
    """The reproducer in `source` (the root or a worktree), `python`'s environment activated, `source` first on
    PYTHONPATH (ahead of any installed copy of the project)."""
    from rootcause.tools.bisect.uvenv import site_path

    return declare(inp, ctx.workspace, label=label, tree=None if source == ctx.root else source, python=python,
                   extra_env={"PYTHONPATH": site_path(source)})


async def run_reproducer(ctx: ToolContext, inp: ReproducerFields, prepared: Prepared, *, source: Path,
                         python: Path | None, label: str) -> Judged:
    decl = declaration(ctx, inp, source=source, python=python, label=label)
    try:
        [observation] = await run_observed(decl, ctx, yardstick=prepared.yardstick)
    except UsageError as exc:
        text = str(exc)
        if not text.startswith(("command not found", "the shell could not run the command", "cannot start")):
            raise
        # The program does not exist in this environment: no run, no verdict on this side.
        shown = text.split(" Hint:")[0].rstrip(".")
        return Judged("skip", "not_run", f"the command was not found in the environment ({shown})")
    return judge(observation, full_output(observation, ctx.root), prepared.yardstick, prepared.metric)


def judge(observation: Observation, output: str, stick: Yardstick | None,
          metric: MetricYardstick | None = None) -> Judged:
    """good / bad / skip of one observed run, with the reason.

    A run the metric yardstick cannot judge (its output lacks the metric) is skipped with that reason."""
    judged = Judged("good", "skip" if observation.outcome == "inconclusive" else observation.outcome,
                    observation.outcome_reason, observation.error, observation.signature, observation.exit_code,
                    observation.matches_expected, observation.run_id, observation.log_path, observation, output,
                    observation.yardstick, observation.group)
    if observation.outcome == "inconclusive":
        judged.verdict, judged.reason = "skip", observation.problem or observation.outcome_reason
        return judged
    if not observation.failed:
        return judged
    if observation.problem:
        judged.verdict, judged.outcome, judged.reason = "skip", "skip", observation.problem
        return judged
    cause = judged.not_the_package(("run",))
    if cause is not None:
        judged.verdict, judged.reason = "skip", cause
        return judged
    if (stick is not None or metric is not None) and observation.matches_expected is False:
        expected = " or ".join(x.describe() for x in (stick, metric) if x is not None)
        judged.verdict = "skip"
        judged.reason = (f"{observation.outcome}s, but not with the expected failure ({expected}): "
                         f"{observation.error or observation.outcome_reason} — {observation.match_reason}")
        return judged
    judged.verdict = "bad"
    return judged


def value_read(reading: MetricReading | None) -> str:
    """' (val_acc 0.744 at step 30)' for a summary line: the metric yardstick's value, when one was read."""
    return f" ({reading.brief()})" if reading is not None and reading.value is not None else ""


def describe_run(judged: Judged) -> str:
    """'passes', 'fails (exit code 1): KeyError ...', 'hangs (idle timeout after 5s)', or the skip reason."""
    read = judged.yardstick
    if judged.outcome == "pass":
        return "passes" + (f" ({read.reason})" if read is not None else "")
    if judged.verdict == "skip":
        return f"cannot decide: {judged.reason}"
    text = f"{judged.outcome}s ({judged.reason})"
    shown = judged.error and judged.outcome != "hang" and not (read is not None and read.holds)
    return text + (f": {judged.error}" if shown else "")


SearchStatus = Literal["found", "good_not_good", "bad_not_bad", "setup_failed", "inconclusive"]


@dataclass
class Stop:
    """Why a search stops at its endpoints: the status, the detail line and the reason."""

    status: SearchStatus
    detail: str
    reason: str | None = None


def check_endpoint(want: Literal["good", "bad"], name: str, got: Verdict, run: Judged | None,
                   why: str | None = None, subject: str = "the change") -> Stop | None:
    """None when the endpoint is what the user said it is; else why the search cannot start.

    run is None when the endpoint could not be set up (`why` says what failed)."""
    if got == want:
        return None
    if run is None:
        return Stop("setup_failed", f"the {want} endpoint {name} could not be tested ({why}); nothing was bisected.",
                    why)
    cause = run.not_the_package(("both",)) if want == "good" and got == "bad" else None
    if cause is not None:
        reason = f"the good endpoint {name} fails before {subject} matters: {cause}"
        return Stop("inconclusive", reason + "; fix that first, then bisect again.", reason)
    if got == "skip":
        reason = f"at the {want} endpoint {name}: {run.reason}"
        return Stop("inconclusive", f"the reproducer decides nothing {reason}; nothing was bisected.", reason)
    return Stop("good_not_good" if want == "good" else "bad_not_bad",
                f"{want} {name} is not {want}: the reproducer {describe_run(run)} there; nothing was bisected. "
                "Check the command and the endpoints.")


def record_evidence(ctx: ToolContext, session_id: str | None, tool: str, result: ToolResult) -> None:
    """Record a bisect's result in the session as its tool's typed evidence (Phase 2)."""
    if session_id is None:
        return
    from rootcause.tools.record.findings import dump
    from rootcause.tools.record.registry import evidence_of

    evidence = evidence_of(tool, result.model_dump(mode="json", by_alias=True))
    if evidence is None:
        raise ValueError(f"{tool} has no evidence model")
    SessionStore(ctx.workspace).record(session_id, tool, evidence.render(), dump(evidence), phase=2)
