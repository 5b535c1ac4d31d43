"""What the three bisect tools share: the reproducer's arguments, running it in an env, progress, sessions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tools.context import ToolContext
from tools.diagnosis import diagnose_run
from tools.interpreters import activation_env
from tools.runner import RunRecord, RunSpec, prepare_command, run_process
from tools.sessions import SessionStore, require_open

Outcome = Literal["pass", "fail", "hang", "crash", "skip", "not_run"]


class ReproducerFields(BaseModel):
    command: str | list[str] = Field(
        description="The reproducer: exits 0 when the behaviour is good, non-zero when bad. A string is split "
                    "like a shell would (leading NAME=value pairs become env), a list is argv as is.")
    shell: bool = Field(False, description="Run the command through /bin/sh -c (pipes, &&, globs).")
    cwd: str = Field(".", description="Folder to run the reproducer in, relative to the root "
                                      "(mapped into each worktree when worktrees are used).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the reproducer.")
    timeout_s: float = Field(900.0, gt=0, description="Wall-clock limit of one reproducer run, in seconds.")
    idle_timeout_s: float | None = Field(None, gt=0, description="Stop a reproducer run after this long without "
                                                                 "output (a hang).")
    setup_timeout_s: float = Field(600.0, gt=0, description="Limit for one environment-building step (uv, git, "
                                                            "codegen), in seconds.")
    session_id: str | None = Field(None, description="Session to record the result in (advances Phase 2).")


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str]
    cwd_rel: str


def prepare(inp: ReproducerFields, ctx: ToolContext) -> Command:
    """Validate the reproducer and the session before any expensive work."""
    if inp.session_id is not None:
        require_open(SessionStore(ctx.workspace), inp.session_id)
    cmd = prepare_command(inp.command, inp.shell, inp.env, inp.cwd, ctx.workspace)
    return Command(cmd.argv, cmd.env, cmd.cwd_rel)


class Progress:
    """Numbered progress messages: every step of a bisect reports one."""

    def __init__(self, ctx: ToolContext, total: float | None = None) -> None:
        self.ctx, self.done, self.total = ctx, 0, total

    async def step(self, message: str) -> None:
        self.done += 1
        total = self.total if self.total is not None and self.total >= self.done else None
        await self.ctx.progress(self.done, total, message)


class RunOutcome(BaseModel):
    outcome: Outcome
    exit_code: int | None = None
    signature: str | None = None
    one_line: str | None = None
    run_id: str | None = None
    log_path: str | None = None
    duration_s: float | None = None


async def run_reproducer(ctx: ToolContext, cmd: Command, inp: ReproducerFields, *, source: Path,
                         python: Path | None, label: str, pythonpath: bool) -> tuple[RunOutcome, RunRecord]:
    """The reproducer in `source` (the root or a worktree) with `python`'s environment activated."""
    env = dict(cmd.env)
    if python is not None:
        env.update(activation_env(python))
    if pythonpath:
        from tools.bisect.uvenv import site_path

        env["PYTHONPATH"] = site_path(source)
    cwd = (source / cmd.cwd_rel).resolve()
    if not cwd.is_dir():
        cwd = source
    record = await run_process(RunSpec(argv=cmd.argv, cwd=cwd, env=env, timeout_s=inp.timeout_s,
                                       idle_timeout_s=inp.idle_timeout_s, label=label), ctx.workspace, ctx.progress)
    result = RunOutcome(outcome=record.outcome, exit_code=record.exit_code, run_id=record.run_id,
                        log_path=record.log_path, duration_s=record.duration_s)
    if record.outcome != "pass":
        diagnosis = diagnose_run(record, ctx.root)
        result.signature, result.one_line = diagnosis.signature, _one_line(diagnosis)
    return result, record


def _one_line(diagnosis: object) -> str:
    one_line = getattr(diagnosis, "one_line", None)
    if callable(one_line):
        return str(one_line())[:300]
    return f"{getattr(diagnosis, 'exception_type', '')}: {getattr(diagnosis, 'message', '')}"[:300]


def record_evidence(ctx: ToolContext, session_id: str | None, tool: str, summary: str, data: dict) -> None:
    if session_id is not None:
        SessionStore(ctx.workspace).record(session_id, tool, summary, data, phase=2)
