"""The one evidence layer: declare a run, run it, observe it, match it against the expected failure.

Every tool that runs a user's command (reproduce, verify_hypothesis, record_fix_attempt,
check_collateral, the bisects) uses it:

    from rootcause.tools.observe.evidence import RunFields, declare, run_observed, yardstick

    class MyToolInput(RunFields):          # command, cwd, env, shell, python, timeout_s,
        expect: str | None = None          # idle_timeout_s, launcher, slurm: declared once

    decl = declare(inp, ctx.workspace, label="my_tool")        # validated once; UsageError on bad input
    # or in another tree / interpreter: declare(inp, ws, label=..., tree=worktree, python=env_python,
    #                                           extra_env={"PYTHONPATH": ...})
    stick = yardstick(inp.expect, session_state)               # expect, else the session's symptom, else None
    [obs] = await run_observed(decl, ctx, runs=1, yardstick=stick)
    obs.outcome          # pass | fail | hang | crash  (a wall or idle timeout is a hang: count it as bad)
    obs.outcome_reason   # "exit code 1", "idle timeout after 30s", "exit 0, but loss is NaN from step 25"
    obs.signature, obs.category, obs.error          # the diagnosis (error never has an empty message)
    obs.matches_expected                            # True / False / None (passing run, nothing expected)
    obs.outside_root                                # project files imported from outside the root
    obs.interpreter_note                            # set when not the project's own interpreter
    obs.diagnosis, obs.record                       # the full Diagnosis and RunRecord (not serialised)

A run that exited 0 fails when its output shows a failure the diagnosis recognises (non-finite
loss / grad norm, a killed worker, a traceback that ends the output); `outcome_reason` says so.

The metric yardstick (RunFields `metric` / `reference`, metric_yardstick.py) is validated by declare()
and carried by the declaration, so every tool's runs are judged by it: a run that exited 0 fails when
its numbers hold the condition (category metric_regression) and is `inconclusive` (with `problem`)
when its output lacks the metric; `obs.yardstick` (a MetricReading) names the value read, its step
and log line. Either the metric or the text yardstick finding the failure makes `matches_expected` true.
"""

from rootcause.tools.observe.evidence.declaration import (
    MAX_TIMEOUT_S,
    Command,
    Cwd,
    Env,
    IdleTimeoutS,
    Python,
    RunDeclaration,
    RunFields,
    Shell,
    SlurmOptions,
    TimeoutS,
    check_timeouts,
    declare,
)
from rootcause.tools.observe.evidence.execute import (
    execute,
    observe_record,
    pytest_position,
    run_observed,
    uses_pytest,
)
from rootcause.tools.observe.evidence.expect import (
    EXPECT_TEXT,
    Yardstick,
    from_expect,
    from_symptom,
    matches,
    yardstick,
)
from rootcause.tools.observe.evidence.metric_yardstick import (
    MetricReading,
    MetricYardstick,
    Reference,
    metric_yardstick,
    parse_condition,
)
from rootcause.tools.observe.evidence.observation import (
    PYTEST_NOT_RUN,
    Observation,
    RunOutcome,
    diagnosis_line,
    full_output,
    observe,
    outside_root_files,
)

__all__ = [
    "EXPECT_TEXT",
    "MAX_TIMEOUT_S",
    "PYTEST_NOT_RUN",
    "Command",
    "Cwd",
    "Env",
    "IdleTimeoutS",
    "MetricReading",
    "MetricYardstick",
    "Observation",
    "Python",
    "Reference",
    "RunDeclaration",
    "RunFields",
    "RunOutcome",
    "Shell",
    "SlurmOptions",
    "TimeoutS",
    "Yardstick",
    "check_timeouts",
    "declare",
    "diagnosis_line",
    "execute",
    "from_expect",
    "from_symptom",
    "full_output",
    "matches",
    "metric_yardstick",
    "observe",
    "observe_record",
    "outside_root_files",
    "parse_condition",
    "pytest_position",
    "run_observed",
    "uses_pytest",
    "yardstick",
]
