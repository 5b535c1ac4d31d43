"""reproduce and diagnose_log: Phase 1's "reproduce consistently" and "read the full error".

reproduce runs a command several times through the one runner, diagnoses every failing
run (tools.diagnosis), and says whether the failure reproduces with one signature. It adds
the recent commits and the facts of the interpreter the command runs under. diagnose_log
applies the same diagnosis to a log produced elsewhere, read streaming.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from tools import gitrepo
from tools.context import ToolContext
from tools.diagnosis import Diagnosis, diagnose_file, diagnose_run, diagnose_text
from tools.diagnosis.streaming import SMALL_LOG
from tools.environment import EnvironmentFacts, gather
from tools.errors import UsageError
from tools.experiment import Command, Cwd, Env, IdleTimeoutS, Python, Shell, TimeoutS
from tools.interpreters import activation_env, resolve_python
from tools.results import MAX_RESULT_CHARS, ToolResult, bounded
from tools.runner import Outcome, RunRecord, RunSpec, prepare_command, run_process
from tools.sessions import SessionStore, require_open

MAX_RUNS = 20
MAX_TEXT = 2_000_000


class ReproduceInput(BaseModel):
    """Run a failing command several times (own process group, stdin closed, full logs on disk, wall-clock and
    no-output timeouts, Python stacks captured on a hang) and diagnose it: is the failure reproducible with one
    signature, or flaky? Returns each run's outcome and signature, the diagnosis of the first failing run
    (category, root error, location, ranks, hang stacks, failed tests), the last 10 commits and the
    interpreter's facts (Python, torch/transformers versions, CUDA, relevant env vars). A failing command is a
    successful call. Phase 1 of the protocol."""

    command: Command
    runs: int = Field(2, description=f"How many times to run the command, 1..{MAX_RUNS}.")
    timeout_s: TimeoutS = 900.0
    idle_timeout_s: IdleTimeoutS = None
    cwd: Cwd = "."
    env: Env = Field(default_factory=dict)
    shell: Shell = False
    python: Python = None
    session_id: str | None = Field(None, description="The session to record the evidence in (advances Phase 1).")


class RunSummary(BaseModel):
    run_id: str
    outcome: Outcome
    exit_code: int | None = None
    signal: int | None = None
    duration_s: float
    timed_out: Literal["wall", "idle"] | None = None
    signature: str | None = Field(None, description="The failure's signature; null for a passing run.")
    category: str | None = None
    log_path: str = Field(description="The full log, relative to the root.")
    log_uri: str = Field(description="The full log as an MCP resource.")


class ReproduceResult(ToolResult):
    status: Literal["reproduced", "flaky", "not_reproduced"]
    command: list[str]
    runs: list[RunSummary]
    diagnosis: Diagnosis | None = Field(None, description="Diagnosis of the first failing run.")
    consistent: bool = Field(description="Every run failed, all with one signature.")
    recent_commits: list[str] = Field(default_factory=list, description="git log --oneline -10.")
    environment: EnvironmentFacts
    next: str

    def summary(self) -> str:
        failing = [r for r in self.runs if r.outcome != "pass"]
        outcomes = ", ".join(r.outcome for r in self.runs)
        head = {
            "reproduced": f"REPRODUCED — {len(failing)}/{len(self.runs)} runs failed with one signature",
            "flaky": f"FLAKY — {len(failing)}/{len(self.runs)} runs failed"
                     f" ({len({r.signature for r in failing})} signature(s))",
            "not_reproduced": f"NOT REPRODUCED — all {len(self.runs)} runs passed",
        }[self.status]
        lines = [f"{head} ({outcomes}).", f"Command: {' '.join(self.command)[:300]}"]
        if self.diagnosis:
            lines += _diagnosis_lines(self.diagnosis)
        lines.append("Runs:")
        for r in self.runs:
            code = f"signal {r.signal}" if r.signal else f"exit {r.exit_code}"
            extra = f", {r.timed_out} timeout" if r.timed_out else ""
            lines.append(f"  {r.run_id}: {r.outcome} ({code}{extra}, {r.duration_s:.1f}s) log {r.log_path}")
        lines.append(f"Environment: {self.environment.one_line()}" +
                     (f" [{self.environment.error}]" if self.environment.error else ""))
        if self.recent_commits:
            lines.append("Recent commits: " + " | ".join(self.recent_commits[:5]))
        lines.append(f"Next: {self.next}")
        return "\n".join(lines)


def _diagnosis_lines(d: Diagnosis) -> list[str]:
    lines = [f"Diagnosis: {d.one_line()}", f"Signature: {d.signature}"]
    if d.keywords:
        lines.append(f"Keywords: {', '.join(d.keywords)}")
    if d.ranks:
        shown = ", ".join(f"{k}: {v.outcome}" for k, v in list(d.ranks.items())[:16])
        lines.append(f"Ranks: {shown}")
    for stack in d.stacks[:8]:
        who = f"rank {stack.rank}" if stack.rank is not None else f"pid {stack.pid}"
        where = stack.frames[-1] if stack.frames else "?"
        lines.append(f"  {who}: {'waits in ' + stack.collective + ' — ' if stack.collective else ''}{where}")
    if d.failed_tests:
        lines.append(f"Failed tests: {', '.join(d.failed_tests[:10])}")
    if d.excerpt:
        lines.append("Excerpt:\n" + bounded(d.excerpt, 2_500))
    return lines


class DiagnoseLogInput(BaseModel):
    """Diagnose a log produced elsewhere (a cluster job you cannot rerun): category, root error vs its wrappers,
    signature, location, per-rank outcomes, hang stacks, failed tests. Give exactly one of path (a file inside
    the root, any size: read streaming) or text (a pasted log). Phase 1 of the protocol."""

    path: str | None = Field(None, description="A log file inside the root (relative or absolute); any size.")
    text: str | None = Field(None, description=f"The log text itself (up to {MAX_TEXT} characters).")
    session_id: str | None = Field(None, description="The session to record the evidence in (advances Phase 1).")


class DiagnoseLogResult(ToolResult):
    diagnosis: Diagnosis
    source: str = Field(description="The log's path relative to the root, or 'text'.")
    log_bytes: int
    next: str

    def summary(self) -> str:
        return "\n".join([f"Log {self.source} ({self.log_bytes} bytes).", *_diagnosis_lines(self.diagnosis),
                          f"Next: {self.next}"])


# ---------------------------------------------------------------- reproduce


def _validate(inp: ReproduceInput, ctx: ToolContext) -> tuple[RunSpec, Path]:
    if not 1 <= inp.runs <= MAX_RUNS:
        raise UsageError(f"runs must be between 1 and {MAX_RUNS}, got {inp.runs}.",
                         "use runs=2 for a quick check, up to 20 for a flaky failure")
    if inp.timeout_s <= 0:
        raise UsageError(f"timeout_s must be > 0 seconds, got {inp.timeout_s}.", "e.g. timeout_s=900")
    if inp.idle_timeout_s is not None and inp.idle_timeout_s <= 0:
        raise UsageError(f"idle_timeout_s must be > 0 seconds, got {inp.idle_timeout_s}.",
                         "omit it, or e.g. idle_timeout_s=120 to stop a run silent for 2 minutes")
    cmd = prepare_command(inp.command, inp.shell, inp.env, inp.cwd, ctx.workspace)
    python = resolve_python(ctx.workspace, inp.python)
    spec = RunSpec(argv=cmd.argv, cwd=cmd.cwd, env={**activation_env(python), **cmd.env}, timeout_s=inp.timeout_s,
                   idle_timeout_s=inp.idle_timeout_s, label="reproduce")
    return spec, python


def _status(records: list[RunRecord], signatures: list[str | None]) -> tuple[str, bool]:
    failing = [s for r, s in zip(records, signatures, strict=True) if r.outcome != "pass"]
    if not failing:
        return "not_reproduced", False
    consistent = len(failing) == len(records) and len(set(failing)) == 1
    return ("reproduced" if consistent else "flaky"), consistent


def _next(status: str, diagnosis: Diagnosis | None) -> str:
    if status == "not_reproduced":
        return ("the failure did not reproduce: check the environment against the failing one (compare_setups), "
                "raise runs for an intermittent failure, or diagnose the original log (diagnose_log)")
    if status == "flaky":
        return ("intermittent: raise runs to measure the rate; compare the signatures of the failing runs; "
                "suspect races, seeds, data order, or ranks that differ; then check_constraints")
    hint = f" with keywords {', '.join(diagnosis.keywords)}" if diagnosis and diagnosis.keywords else ""
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
    if inp.session_id:
        require_open(store, inp.session_id)
    spec, python = _validate(inp, ctx)
    records: list[RunRecord] = []
    diagnoses: list[Diagnosis | None] = []
    for index in range(inp.runs):
        label = f"run {index + 1}/{inp.runs}"
        await ctx.progress(index, inp.runs, f"{label}: starting {spec.argv[0]}")

        async def progress(elapsed: float, _total: float | None, message: str, index: int = index) -> None:
            await ctx.progress(index + min(elapsed / spec.timeout_s, 0.99), inp.runs,
                               f"{index}/{inp.runs} runs done; {message}")

        record = await run_process(spec.model_copy(update={"label": label}), ctx.workspace, progress)
        if spec.argv[:2] == ["/bin/sh", "-c"] and record.exit_code in (126, 127):
            raise UsageError(f"the shell could not run the command (exit {record.exit_code}): "
                             f"{record.tail.strip()[-300:]}", "check the program name and its permissions")
        records.append(record)
        if record.outcome == "pass":
            diagnoses.append(None)
        elif record.log_bytes > SMALL_LOG:
            diagnoses.append(await anyio.to_thread.run_sync(diagnose_run, record, ctx.root))
        else:
            diagnoses.append(diagnose_run(record, ctx.root))
    await ctx.progress(inp.runs, inp.runs, "all runs done; gathering the environment")
    signatures = [d.signature if d else None for d in diagnoses]
    status, consistent = _status(records, signatures)
    environment = await gather(ctx.workspace, python, {**os.environ, **spec.env})
    first_failing = next((d for d in diagnoses if d is not None), None)
    result = ReproduceResult(
        status=status, command=spec.argv, consistent=consistent, diagnosis=first_failing,
        runs=[RunSummary(run_id=r.run_id, outcome=r.outcome, exit_code=r.exit_code, signal=r.signal,
                         duration_s=r.duration_s, timed_out=r.timed_out, signature=d.signature if d else None,
                         category=d.category if d else None, log_path=r.log_path,
                         log_uri=f"rootcause://runs/{r.run_id}/log") for r, d in zip(records, diagnoses, strict=True)],
        recent_commits=gitrepo.recent_commits(ctx.root, 10), environment=environment,
        next=_next(status, first_failing),
    )
    result = _shrink(result)
    if inp.session_id:
        data = result.model_dump(mode="json")
        if data.get("diagnosis"):
            data["diagnosis"]["excerpt"] = bounded(data["diagnosis"]["excerpt"], 1_500)
        store.record(inp.session_id, "reproduce", _evidence(result), data, phase=1)
    return result


def _evidence(result: ReproduceResult) -> str:
    lines = [f"**{result.status}** — `{' '.join(result.command)[:200]}`, runs: "
             + ", ".join(f"{r.outcome} ({r.duration_s:.1f}s)" for r in result.runs)]
    if result.diagnosis:
        d = result.diagnosis
        lines += [f"- Diagnosis: {d.one_line()}", f"- Signature: `{d.signature}`"]
        if d.keywords:
            lines.append(f"- Keywords: {', '.join(d.keywords)}")
        not_ok = {k: v.outcome for k, v in d.ranks.items() if v.outcome != "ok"}
        if d.ranks:
            shown = ", ".join(f"{k}:{v}" for k, v in list(not_ok.items())[:8])
            lines.append(f"- Ranks: {len(not_ok)}/{len(d.ranks)} not ok ({shown})")
        for stack in d.stacks[:4]:
            if stack.collective:
                lines.append(f"- {'rank ' + str(stack.rank) if stack.rank is not None else 'pid ' + str(stack.pid)}"
                             f" waits in {stack.collective}")
    lines.append(f"- Environment: {result.environment.one_line()}")
    if result.recent_commits:
        lines.append(f"- Recent commits: {'; '.join(result.recent_commits[:3])}")
    lines.append(f"- Logs: {', '.join(r.log_path for r in result.runs)}")
    return "\n".join(lines)


# ---------------------------------------------------------------- diagnose_log


def diagnose_log(inp: DiagnoseLogInput, ctx: ToolContext) -> DiagnoseLogResult:
    store = SessionStore(ctx.workspace)
    if inp.session_id:
        require_open(store, inp.session_id)
    if (inp.path is None) == (inp.text is None):
        raise UsageError("give exactly one of path or text.",
                         "path for a log file inside the root, text for a pasted log")
    if inp.text is not None:
        if not inp.text.strip():
            raise UsageError("text is empty.", "paste the log, or give its path")
        if len(inp.text) > MAX_TEXT:
            raise UsageError(f"text is {len(inp.text)} characters, over the {MAX_TEXT} limit.",
                             "write the log to a file inside the root and pass path= (read streaming, any size)")
        diagnosis = diagnose_text(inp.text, ctx.root)
        source, size = "text", len(inp.text.encode("utf-8", "replace"))
    else:
        path = ctx.workspace.resolve(inp.path, must_exist=True, what="log path")
        if not path.is_file():
            raise UsageError(f"log path {inp.path!r} is not a file.", "give the path of a log file")
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as exc:
            raise UsageError(f"log path {inp.path!r} cannot be read: {exc.strerror or exc}.",
                             "check the file's permissions") from None
        diagnosis = diagnose_file(path, ctx.root)
        source, size = ctx.workspace.relative(path), path.stat().st_size
    result = DiagnoseLogResult(diagnosis=diagnosis, source=source, log_bytes=size,
                               next=_next("reproduced", diagnosis).replace("reproducible: ", ""))
    if inp.session_id:
        data = result.model_dump(mode="json")
        data["diagnosis"]["excerpt"] = bounded(data["diagnosis"]["excerpt"], 1_500)
        summary = "\n".join([f"Log `{source}` ({size} bytes)", f"- Diagnosis: {diagnosis.one_line()}",
                             f"- Signature: `{diagnosis.signature}`"])
        store.record(inp.session_id, "diagnose_log", summary, data, phase=1)
    return result
