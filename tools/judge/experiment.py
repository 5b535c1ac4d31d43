"""Run an experiment or a verification command the way reproduce runs a reproducer.

Shared by verify_hypothesis and record_fix_attempt: the command is declared, run and observed
by the one evidence layer (rootcause.tools.observe.evidence); each observation comes with the run's output for
verdicts that search it (a regex, a quoted disproof). The full log stays under `.rootcause/runs/`.
"""

from __future__ import annotations

from rootcause.tools.core.context import ToolContext
from rootcause.tools.observe.evidence import Observation, RunFields, Yardstick, declare, full_output, run_observed


async def run_command(fields: RunFields, ctx: ToolContext, *, runs: int = 1, label: str = "experiment",
                      yardstick: Yardstick | None = None) -> list[tuple[Observation, str]]:
    """Run the command `runs` times; each observation comes with the run's full output (bounded)."""
    decl = declare(fields, ctx.workspace, label=label)
    observations = await run_observed(decl, ctx, runs=runs, yardstick=yardstick)
    return [(obs, full_output(obs, ctx.root)) for obs in observations]
