"""A run as every tool declares it: the command fields a tool takes, validated once, resolved to a runnable spec.

A tool's input inherits `RunFields` (command, cwd, env, shell, python, timeouts, launcher,
slurm, and the metric yardstick: metric, reference); `declare()` checks them (timeouts finite,
> 0, bounded; the command split and its program's folder inside the root; the metric condition
and the reference log: metric_yardstick.py), applies the one interpreter rule (the `python` argument,
else `<root>/.venv/bin/python`, else rootcause's own, said so) and returns a `RunDeclaration`
that `rootcause.tools.observe.evidence.run_observed` runs and observes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field
from rootcause.tools.core.errors import UsageError
from rootcause.tools.observe.evidence.metric_yardstick import MetricYardstick, Reference, metric_yardstick
from rootcause.tools.run import RunSpec, prepare_command
from rootcause.tools.run.interpreters import Interpreter, activation_env, choose_interpreter
from rootcause.tools.run.slurm import SlurmOptions

if TYPE_CHECKING:
    from rootcause.tools.core.workspace import Workspace

MAX_TIMEOUT_S = 7 * 24 * 3600.0
Launcher = Literal["local", "slurm"]

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
                "resolve to it. Default: <root>/.venv/bin/python, else rootcause's own (the result says so).")]
LauncherField = Annotated[Launcher, Field(
    description="local: run here. slurm: a command starting with `sbatch` submits that script, any other runs "
                "as one srun task per rank (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set).")]
SlurmField = Annotated[SlurmOptions | None, Field(description="Slurm options when launcher='slurm'.")]
MetricField = Annotated[str | None, Field(
    description="A condition on a printed metric that makes the run bad: `<name> <op> <number>` (op < <= > >= "
                "==), at its last value unless `at step N` follows, e.g. \"val_acc < 0.85\". A run whose output "
                "lacks it is inconclusive.")]
ReferenceField = Annotated[Reference | None, Field(
    description="{log, metric, rtol}: the run is bad from the first step where its metric leaves the reference "
                "log's by more than rtol (relative).")]


class RunFields(BaseModel):
    """The command fields of every tool that runs a command (inherit it; never redeclare them)."""

    command: Command
    timeout_s: TimeoutS = 900.0
    idle_timeout_s: IdleTimeoutS = None
    cwd: Cwd = "."
    env: Env = Field(default_factory=dict)
    shell: Shell = False
    python: Python = None
    launcher: LauncherField = "local"
    slurm: SlurmField = None
    metric: MetricField = None
    reference: ReferenceField = None

    def describe(self) -> str:
        """The command as the user wrote it, with its env overrides and folder."""
        text = self.command if isinstance(self.command, str) else " ".join(self.command)
        if self.env:
            text = " ".join(f"{k}={v}" for k, v in self.env.items()) + " " + text
        if self.cwd not in (".", ""):
            text += f"  (cwd {self.cwd})"
        return text


class RunDeclaration(BaseModel):
    """One run, validated and resolved: the runner's spec plus what the observation needs to read it."""

    spec: RunSpec
    shell: bool = False
    interpreter: Interpreter | None = None
    launcher: Launcher = "local"
    slurm: SlurmOptions | None = None
    metric: MetricYardstick | None = None
    """The metric yardstick (metric / reference arguments): observe() judges every run's numbers by it."""

    @property
    def argv(self) -> list[str]:
        return self.spec.argv

    @property
    def cwd(self) -> Path:
        return self.spec.cwd

    @property
    def env(self) -> dict[str, str]:
        return self.spec.env

    @property
    def timeout_s(self) -> float:
        return self.spec.timeout_s

    @property
    def label(self) -> str:
        return self.spec.label

    def with_spec(self, **changes: Any) -> RunDeclaration:
        """The same run with spec fields changed (argv, cwd, env, label): another tree, extra arguments."""
        return self.model_copy(update={"spec": self.spec.model_copy(update=changes)})


def check_timeouts(timeout_s: float, idle_timeout_s: float | None) -> None:
    """The one timeout rule: finite, > 0 and at most a week."""
    for name, value, hint in (("timeout_s", timeout_s, "e.g. timeout_s=900"),
                              ("idle_timeout_s", idle_timeout_s,
                               "omit it, or e.g. idle_timeout_s=120 to stop a run silent for 2 minutes")):
        if value is None and name == "idle_timeout_s":
            continue
        if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise UsageError(f"{name} must be > 0 seconds and finite, got {value}.", hint)
        if value > MAX_TIMEOUT_S:
            raise UsageError(f"{name} is {value:g} s, over the {MAX_TIMEOUT_S:g} s (7 days) limit.", hint)


def declare(fields: RunFields, workspace: Workspace, *, label: str, tree: Path | None = None,
            python: Path | None = None, extra_env: dict[str, str] | None = None) -> RunDeclaration:
    """Validate a tool's command fields once and resolve them to a run.

    tree: run in another tree (a worktree, a copy) at the same relative folder as `cwd`.
    python: an interpreter chosen by the tool (a bisect's environment) instead of the rule.
    extra_env: the tool's own variables (PYTHONPATH of a worktree), applied after activation and
    before the caller's env.
    """
    check_timeouts(fields.timeout_s, fields.idle_timeout_s)
    metric = metric_yardstick(fields.metric, fields.reference, workspace)
    if fields.launcher == "slurm" and fields.slurm is None:
        fields = fields.model_copy(update={"slurm": SlurmOptions()})
    if fields.launcher != "slurm" and fields.slurm is not None:
        raise UsageError("slurm options were given but launcher is 'local'.", "pass launcher='slurm' with them")
    cmd = prepare_command(fields.command, fields.shell, fields.env, fields.cwd, workspace)
    interpreter = (Interpreter.explicit(python) if python is not None
                   else choose_interpreter(workspace, fields.python))
    cwd = cmd.cwd
    if tree is not None:
        mapped = (tree / cmd.cwd_rel).resolve()
        cwd = mapped if mapped.is_dir() else tree
    env = {**activation_env(interpreter.path), **(extra_env or {}), **cmd.env}
    spec = RunSpec(argv=cmd.argv, cwd=cwd, env=env, timeout_s=fields.timeout_s,
                   idle_timeout_s=fields.idle_timeout_s, label=label)
    return RunDeclaration(spec=spec, shell=fields.shell, interpreter=interpreter, launcher=fields.launcher,
                          slurm=fields.slurm, metric=metric)
