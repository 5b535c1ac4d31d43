"""Run an experiment or a verification command the way reproduce runs a reproducer.

Shared by verify_hypothesis and record_fix_attempt: the command goes through the one
runner (tools.runner), each run is diagnosed (tools.diagnosis) and reduced to a small
observation; the full log stays on disk under `.rootcause/runs/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Protocol

from pydantic import BaseModel, Field

from tools.context import ToolContext
from tools.diagnosis import diagnose_run
from tools.errors import UsageError
from tools.interpreters import activation_env, resolve_python
from tools.runner import Outcome, RunSpec, prepare_command, read_output, run_process

# pytest's own exit codes that mean "the tests did not run", not "a test failed".
_PYTEST_NOT_RUN = {3: "pytest internal error", 4: "pytest usage error", 5: "pytest collected no tests"}


Command = Annotated[str | list[str], Field(
    description="The command: a string split like a shell would (leading NAME=value pairs become env), "
                "or an argv list. Runs without a shell unless shell=true.")]
TimeoutS = Annotated[float, Field(description="Wall-clock limit per run in seconds; a run that hits it is a hang.")]
IdleTimeoutS = Annotated[float | None, Field(
    description="Stop a run that prints nothing for this many seconds (a hang); none by default.")]
Cwd = Annotated[str, Field(description="Working directory, relative to the root (or absolute inside it).")]
Env = Annotated[dict[str, str], Field(description="Extra environment variables for the run.")]
Shell = Annotated[bool, Field(description="Run the command through /bin/sh -c (pipes, globs, &&).")]
Python = Annotated[str | None, Field(
    description="The project's interpreter; its bin/ goes first on PATH so `python`, `pytest` and `torchrun` "
                "resolve to it. Default: <root>/.venv/bin/python, else the server's.")]


class CommandFields(Protocol):
    """The command fields an input model carries, as reproduce takes them (declared with the types above)."""

    command: str | list[str]
    timeout_s: float
    idle_timeout_s: float | None
    cwd: str
    env: dict[str, str]
    shell: bool
    python: str | None


class RunObservation(BaseModel):
    """One run of a command, reduced to what a verdict needs."""

    run_id: str
    outcome: Outcome
    exit_code: int | None = None
    signal: int | None = None
    duration_s: float
    timed_out: str | None = None
    signature: str | None = Field(None, description="Failure signature; none for a passing run.")
    category: str | None = None
    error: str | None = Field(None, description="The diagnosis in one line, for a failing run.")
    log_path: str
    problem: str | None = Field(None, description="Why this run cannot decide anything (tests did not run).")

    def one_line(self) -> str:
        code = f"exit {self.exit_code}" if self.signal is None else f"signal {self.signal}"
        text = f"{self.outcome} ({code}, {self.duration_s:.1f}s)"
        if self.timed_out:
            text += f" — {self.timed_out} timeout"
        if self.problem:
            text += f" — {self.problem}"
        elif self.error:
            text += f" — {self.error[:200]}"
        return text


def _spec(fields: CommandFields, ctx: ToolContext, label: str) -> RunSpec:
    cmd = prepare_command(fields.command, fields.shell, fields.env, fields.cwd, ctx.workspace)
    python = resolve_python(ctx.workspace, fields.python)
    return RunSpec(argv=cmd.argv, cwd=cmd.cwd, env={**activation_env(python), **cmd.env}, timeout_s=fields.timeout_s,
                   idle_timeout_s=fields.idle_timeout_s, label=label)


def _uses_pytest(argv: list[str]) -> bool:
    return any(Path(word).name in {"pytest", "py.test"} or word == "pytest" for word in argv[:4])


async def run_command(
    fields: CommandFields, ctx: ToolContext, *, runs: int = 1, label: str = "experiment"
) -> list[tuple[RunObservation, str]]:
    """Run the command `runs` times; each observation comes with the run's full output (bounded)."""
    spec = _spec(fields, ctx, label)
    results: list[tuple[RunObservation, str]] = []
    for index in range(runs):
        await ctx.progress(index, runs, f"{label}: run {index + 1}/{runs}")
        record = await run_process(spec, ctx.workspace, ctx.progress)
        output = read_output(record, ctx.workspace)
        is_shell = spec.argv[:2] == ["/bin/sh", "-c"]
        if is_shell and record.exit_code in (126, 127):
            raise UsageError(
                f"the shell could not run the command (exit {record.exit_code}): {output.strip()[-300:]}",
                "check the program name and its permissions; see the run log " + record.log_path,
            )
        problem = None
        if _uses_pytest(spec.argv) and record.exit_code in _PYTEST_NOT_RUN:
            problem = f"{_PYTEST_NOT_RUN[record.exit_code]} (exit {record.exit_code})"
        observation = RunObservation(
            run_id=record.run_id, outcome=record.outcome, exit_code=record.exit_code, signal=record.signal,
            duration_s=record.duration_s, timed_out=record.timed_out, log_path=record.log_path, problem=problem,
        )
        if record.outcome != "pass":
            diagnosis = diagnose_run(record, ctx.root)
            observation.signature = diagnosis.signature
            observation.category = diagnosis.category
            observation.error = diagnosis.one_line()
        results.append((observation, output))
    return results


def describe_command(fields: CommandFields) -> str:
    text = fields.command if isinstance(fields.command, str) else " ".join(fields.command)
    if fields.env:
        text = " ".join(f"{k}={v}" for k, v in fields.env.items()) + " " + text
    if fields.cwd not in (".", ""):
        text += f"  (cwd {fields.cwd})"
    return text
