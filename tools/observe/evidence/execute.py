"""Run a declared command through the one runner (or Slurm) and observe each run."""

from __future__ import annotations

from pathlib import Path

import anyio
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.observe.diagnosis.streaming import SMALL_LOG
from rootcause.tools.observe.evidence.declaration import RunDeclaration
from rootcause.tools.observe.evidence.expect import Yardstick
from rootcause.tools.observe.evidence.observation import Observation, observe
from rootcause.tools.run import RunRecord, run_process

_PYTEST_NAMES = {"pytest", "py.test"}


def pytest_position(argv: list[str]) -> int | None:
    """Index after the pytest word in argv (`pytest`, `py.test`, `python -m pytest`), None if not pytest."""
    for i, word in enumerate(argv):
        if word.rsplit("/", 1)[-1] in _PYTEST_NAMES:
            return i + 1
        if word == "-m" and i + 1 < len(argv) and argv[i + 1] == "pytest":
            return i + 2
    return None


def uses_pytest(decl: RunDeclaration) -> bool:
    if decl.argv[:2] == ["/bin/sh", "-c"]:
        return "pytest" in decl.argv[2] if len(decl.argv) > 2 else False
    return pytest_position(decl.argv) is not None


async def execute(decl: RunDeclaration, ctx: ToolContext, label: str | None = None, progress=None) -> RunRecord:
    """One run of the declaration: the local runner, or Slurm (rootcause.tools.run.slurm) for launcher='slurm'."""
    spec = decl.spec.model_copy(update={"label": label}) if label else decl.spec
    if decl.launcher == "slurm":
        from rootcause.tools.run import slurm  # lazily: only Slurm users need it

        return await slurm.run_slurm(spec, decl.slurm, ctx.workspace, progress or ctx.progress)
    record = await run_process(spec, ctx.workspace, progress or ctx.progress)
    if decl.shell and record.exit_code in (126, 127):
        raise UsageError(f"the shell could not run the command (exit {record.exit_code}): "
                         f"{record.tail.strip()[-300:] or record.head.strip()[-300:]}",
                         "check the program name and its permissions; see the run log " + record.log_path)
    return record


async def observe_record(decl: RunDeclaration, record: RunRecord, root: Path,
                         yardstick: Yardstick | None = None) -> Observation:
    """observe() with the declaration's facts; a big log is read in a worker thread."""
    interpreter = decl.interpreter

    def work() -> Observation:
        return observe(record, root, yardstick=yardstick, pytest=uses_pytest(decl), cwd=decl.cwd,
                       interpreter=str(interpreter.path) if interpreter else None,
                       interpreter_note=interpreter.note if interpreter else None, launcher=decl.launcher,
                       metric=decl.metric)

    if record.log_bytes > SMALL_LOG:
        return await anyio.to_thread.run_sync(work)
    return work()


async def run_observed(decl: RunDeclaration, ctx: ToolContext, *, runs: int = 1,
                       yardstick: Yardstick | None = None) -> list[Observation]:
    """Run the declaration `runs` times; one observation per run, progress reported throughout."""
    observations: list[Observation] = []
    for index in range(runs):
        label = f"{decl.label} run {index + 1}/{runs}" if runs > 1 else decl.label
        await ctx.progress(index, runs, f"{label}: starting {decl.argv[0]}")

        async def progress(elapsed: float, _total: float | None, message: str, index: int = index) -> None:
            await ctx.progress(index + min(elapsed / decl.timeout_s, 0.99), runs,
                               f"{index}/{runs} runs done; {message}")

        record = await execute(decl, ctx, label, progress)
        observations.append(await observe_record(decl, record, ctx.root, yardstick))
    return observations
