"""Which node each rank of a multi-node log ran on, from the launchers' own prefixes.

`node-3: [rank5]: ...` (pdsh, clush), `node-3 [stderr] [rank5]: ...` (a collector naming the host and
stream), srun's task labels (`1: [rank5]: ...`) joined with srun's `srun: error: node-3: task 1: ...`
and `slurmstepd-node-3: ` lines naming a task's node. The line model peels these prefixes; this reads
the raw text once more for the host they named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HOST_RANK = re.compile(r"^(?P<node>[A-Za-z][\w.\-]*)(?::| \[std(?:out|err)\])\s*"
                        r"\[(?:rank|Rank|RANK)\s?(?P<rank>\d+)\]:")
_TASK_RANK = re.compile(r"^\s{0,3}(?P<task>\d{1,4}): \[(?:rank|Rank|RANK)\s?(?P<rank>\d+)\]:")
_SRUN_TASKS = re.compile(r"^(?:\s{0,3}\d{1,4}: )?srun: error: (?P<node>[\w.\-]+): tasks? (?P<tasks>[\d,\-]+): ")
_STEPD = re.compile(r"^\s{0,3}(?P<task>\d{1,4}): slurmstepd-(?P<node>[\w.\-]+): ")
_MAX_LINES = 200_000


def _task_ids(spec: str) -> list[int]:
    ids: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            ids.extend(range(int(low), min(int(high) if high.isdigit() else int(low), int(low) + 4096) + 1))
    return ids


@dataclass
class Placement:
    nodes: dict[int, str] = field(default_factory=dict)
    """rank -> node."""
    task_ranks: dict[int, list[int]] = field(default_factory=dict)
    """srun task -> the ranks whose lines it tagged (torchrun under srun: one task per node, several ranks);
    empty when the tags do not tell (srun launching each rank: task id = rank)."""


def rank_nodes(text: str) -> dict[int, str]:
    """rank -> node, as far as the log's prefixes tell."""
    return placement(text).nodes


def placement(text: str) -> Placement:
    """Where each rank ran, as far as the log's prefixes tell."""
    nodes: dict[int, str] = {}
    task_of: dict[int, int] = {}
    task_node: dict[int, str] = {}
    for n, raw in enumerate(text.splitlines()):
        if n >= _MAX_LINES:
            break
        m = _HOST_RANK.match(raw)
        if m:
            nodes.setdefault(int(m.group("rank")), m.group("node"))
            continue
        m = _TASK_RANK.match(raw)
        if m:
            task_of.setdefault(int(m.group("rank")), int(m.group("task")))
            continue
        m = _SRUN_TASKS.match(raw)
        if m:
            for task in _task_ids(m.group("tasks")):
                task_node.setdefault(task, m.group("node"))
            continue
        m = _STEPD.match(raw)
        if m:
            task_node.setdefault(int(m.group("task")), m.group("node"))
    tasks: dict[int, list[int]] = {}
    for rank, task in task_of.items():
        tasks.setdefault(task, []).append(rank)
        if rank not in nodes and task in task_node:
            nodes[rank] = task_node[task]
    if all(ranks == [task] for task, ranks in tasks.items()):
        tasks = {}
    return Placement(nodes, {task: sorted(ranks) for task, ranks in tasks.items()})
