"""Injected hangs on the two-node Slurm cluster (tests/slurm/cluster.sh) through `rootcause serve` over stdio:
every rank on every node dumps its flight recorder into the run's folder before the stacks and the scancel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git, stdio_client, structured
from tests.e2e.test_hang_collectives import assert_mismatch
from tests.slurm.fixtures import slurm_cluster, wait_nothing_left
from tests.test_flight_recorder_capture import HANGS, assert_dumps_as_constructed, expected, needs_torch

__all__ = ["slurm_cluster"]  # the fixture, imported for pytest
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@needs_torch
async def test_node_conditional_branch_dumps_every_rank_on_both_nodes(repo: Path, slurm_cluster: str) -> None:
    script = "node_conditional.py"
    want = expected(script)
    (repo / script).write_text((HANGS / script).read_text())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"add {script}")
    # 4 ranks import torch on 2 cores, silently: under a test suite's load that outlasts 10 s.
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("reproduce", {
            "command": f"python {script}", "runs": 1, "timeout_s": 300, "idle_timeout_s": 20, "launcher": "slurm",
            "slurm": {"nodes": want["nodes"], "ntasks_per_node": want["ntasks_per_node"]}}))
    run = data["runs"][0]
    assert run["outcome"] == "hang" and run["timed_out"] == "idle" and run["job_id"], run
    folder = repo / ".rootcause" / "runs" / run["run_id"]
    record = json.loads((folder / "record.json").read_text())
    world = want["nodes"] * want["ntasks_per_node"]
    assert record["collective_dumps"] == world
    assert_dumps_as_constructed(folder / "flight_recorder", want)
    assert (folder / "fr_hook" / "sitecustomize.py").is_file()  # the tasks' copy, on the shared file system
    env = json.loads((folder / "meta.json").read_text())["env_overrides"]
    assert env["ROOTCAUSE_FR_HOOK"] == str(folder / "fr_hook")
    assert record["rank_nodes"] == {"0": "n1", "1": "n1", "2": "n2", "3": "n2"}
    timings = record["timings"]
    assert timings["timeout_to_dumps"] < 3.5 and timings["timeout_to_job_gone"] < 30, timings
    assert_mismatch(data["diagnosis"], want)
    assert wait_nothing_left(slurm_cluster, run["job_id"]) == ([], [])


@needs_torch
@pytest.mark.parametrize("script", ["mismatched_sizes.py", "rank_conditional_barrier.py", "stalled_loader.py",
                                    "rank_dies.py", "uneven_batches.py"])
async def test_two_rank_injected_hang_on_two_nodes(repo: Path, slurm_cluster: str, script: str) -> None:
    """The local suite's 2-rank hangs, one rank per node: rank 0 on n1, rank 1 on n2."""
    want = expected(script)
    assert want["nproc"] == 2
    (repo / script).write_text((HANGS / script).read_text())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"add {script}")
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("reproduce", {
            "command": f"python {script}", "runs": 1, "timeout_s": 300, "idle_timeout_s": 15, "launcher": "slurm",
            "slurm": {"nodes": 2, "ntasks_per_node": 1}}))
    run = data["runs"][0]
    assert run["outcome"] == "hang" and run["timed_out"] == "idle" and run["job_id"], run
    folder = repo / ".rootcause" / "runs" / run["run_id"]
    record = json.loads((folder / "record.json").read_text())
    assert record["collective_dumps"] == 2 and record["rank_nodes"] == {"0": "n1", "1": "n2"}
    assert_dumps_as_constructed(folder / "flight_recorder", want)
    assert_mismatch(data["diagnosis"], want)
    assert wait_nothing_left(slurm_cluster, run["job_id"]) == ([], [])
