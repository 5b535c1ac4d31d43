"""Times of a Slurm run on the test cluster: submit to first output, hang detection to job gone.

    .venv/bin/python tests/slurm/measure.py [ROUNDS]

Runs a 2-node gloo hang (rank 1 sleeps, rank 0 waits in all_reduce) through rootcause.tools.run.slurm with
idle_timeout_s=10, ROUNDS times (default 5), and prints each round's timings, the medians and the
machine's load average (torch's import alone takes 1.5 s idle, over 5 s at a load of 10 on 2 cores). The
cluster must be up (tests/slurm/cluster.sh start); SLURM_CONF is taken from its default place.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import RunSpec
from rootcause.tools.run.slurm import SlurmOptions, run_slurm

# The 2-rank gloo hang the tests run (rank 1 never reaches the all_reduce).
HANG = (Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "hang_dist.py").read_text()
CONF = "/tmp/rootcause-slurm/slurm.conf"


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "hang.py").write_text(HANG)
        rows = []
        for n in range(rounds):
            spec = RunSpec(argv=[sys.executable, "hang.py"], cwd=root, env={"SLURM_CONF": CONF}, timeout_s=120,
                           idle_timeout_s=10)
            record = await run_slurm(spec, SlurmOptions(nodes=2), Workspace(root))
            t = record.timings
            rows.append(t)
            stacks = [(s.rank, s.node, s.method) for s in record.stacks]
            print(f"round {n + 1}: outcome {record.outcome}, stacks {stacks}, duration {record.duration_s:.2f}s, {t}")
        print(f"load average: {os.getloadavg()}")
        for key in ("submit_to_start", "submit_to_first_output", "timeout_to_stacks", "timeout_to_job_gone"):
            values = [r[key] for r in rows if key in r]
            if values:
                print(f"median {key}: {statistics.median(values):.3f}s (min {min(values):.3f}, max {max(values):.3f})")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
