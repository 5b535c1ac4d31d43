"""Floor 3: running things. The one process runner: every tool that runs a command runs it through `run_process`.

command: a tool's command arguments -> argv, env, cwd. process: run one command with timeouts,
output to a log file. stacks: Python stacks of a hung tree. reaper: find and kill a run's processes.
"""

from rootcause.tools.run.command import (
    PreparedCommand,
    new_run_id,
    parse_command,
    prepare_command,
    run_dir,
    valid_env_name,
)
from rootcause.tools.run.process import (
    HEAD_BYTES,
    TAIL_BYTES,
    Outcome,
    RunRecord,
    RunSpec,
    read_output,
    run_captured,
    run_process,
)
from rootcause.tools.run.reaper import RUN_MARKER, kill_tree, process_tree
from rootcause.tools.run.stacks import ProcessStack, capture_stacks

__all__ = [
    "HEAD_BYTES", "RUN_MARKER", "TAIL_BYTES", "Outcome", "PreparedCommand", "ProcessStack", "RunRecord", "RunSpec",
    "capture_stacks", "kill_tree", "new_run_id", "parse_command", "prepare_command", "process_tree", "read_output",
    "run_captured", "run_dir", "run_process", "valid_env_name",
]
