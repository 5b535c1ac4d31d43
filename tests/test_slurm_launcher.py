"""tools/runner/slurm.py against a real two-node Slurm cluster (tests/slurm/cluster.sh), no MCP."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import RunSpec
from rootcause.tools.run.slurm import SlurmOptions, capture_job_stacks, run_slurm

from tests.conftest import FIXTURES
from tests.slurm.fixtures import jobs_of_repo, slurm_cluster, squeue_jobs, wait_nothing_left

__all__ = ["slurm_cluster"]  # the fixture, imported for pytest
pytestmark = pytest.mark.anyio
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not importable: .venv/bin/pip install torch==2.13.0")
PYTHON = sys.executable

SHOW_ENV = """\
import os

names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
         "SLURMD_NODENAME", "ROOTCAUSE_RUN_ID"]
print({name: os.environ.get(name) for name in names}, flush=True)
"""

HANG_DIST = (FIXTURES / "scripts" / "hang_dist.py").read_text()  # rank 1 never joins the all_reduce

RAISE_ON_RANK1 = """\
import os


def check_shard(rank):
    if rank == 1:
        raise ValueError(f"shard {rank} has 3 rows, expected 4")


rank = int(os.environ["RANK"])
print(f"rank {rank} on {os.environ['SLURMD_NODENAME']}", flush=True)
check_shard(rank)
"""


def _spec(root: Path, argv: list[str], conf: str, **kw) -> RunSpec:
    return RunSpec(argv=argv, cwd=root, env={"SLURM_CONF": conf}, **kw)


def _log(root: Path, record) -> str:
    return (root / record.log_path).read_text()


def test_options_are_validated() -> None:
    assert SlurmOptions().nodes == 1 and SlurmOptions(time_limit="1-02:00:00").time_limit == "1-02:00:00"
    bad = [{"nodes": 0}, {"ntasks_per_node": 0}, {"nodes": 5000}, {"partition": "-x"}, {"partition": "a b"},
           {"time_limit": "--wrap=x"}, {"time_limit": "soon"}, {"extra_args": ["--mem", "4G"]},
           {"extra_args": ["--output=/tmp/x"]}, {"extra_args": ["-o/tmp/x"]}, {"extra_args": ["--job-name=x"]},
           {"extra_args": ["--wrap=rm -rf /"]}, {"extra_args": ["x"]}]
    for fields in bad:
        with pytest.raises(ValidationError):
            SlurmOptions(**fields)
    assert SlurmOptions(extra_args=["--mem=4G", "--gres=gpu:8", "-c2"]).extra_args[0] == "--mem=4G"


async def test_each_rank_sees_torch_env_on_its_node(repo: Path, slurm_cluster: str) -> None:
    (repo / "show_env.py").write_text(SHOW_ENV)
    record = await run_slurm(_spec(repo, [PYTHON, "show_env.py"], slurm_cluster, timeout_s=120),
                             SlurmOptions(nodes=2), Workspace(repo))
    assert record.outcome == "pass" and record.job_state == "COMPLETED" and record.job_id, _log(repo, record)
    assert record.nodes == ["n1", "n2"] and record.rank_nodes == {"0": "n1", "1": "n2"}
    seen = {}
    for line in _log(repo, record).splitlines():
        label, _, payload = line.partition(": ")
        if payload.startswith("{"):
            seen[int(label)] = ast.literal_eval(payload)
    assert set(seen) == {0, 1}
    for rank, env in seen.items():
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2" and env["LOCAL_RANK"] == "0"
        assert env["LOCAL_WORLD_SIZE"] == "1" and env["NODE_RANK"] == str(rank)
        assert env["MASTER_ADDR"] == "n1" and env["SLURMD_NODENAME"] == f"n{rank + 1}"
        assert env["ROOTCAUSE_RUN_ID"] is None  # the job is Slurm's to end, never the local reaper's
    assert seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"] and int(seen[0]["MASTER_PORT"]) > 0
    assert not squeue_jobs(slurm_cluster, f"rootcause-{record.run_id}")


async def test_rank_failure_is_labelled_with_its_task(repo: Path, slurm_cluster: str) -> None:
    (repo / "raise_rank1.py").write_text(RAISE_ON_RANK1)
    record = await run_slurm(_spec(repo, [PYTHON, "raise_rank1.py"], slurm_cluster, timeout_s=120),
                             SlurmOptions(nodes=2), Workspace(repo))
    log = _log(repo, record)
    assert record.outcome == "fail" and record.exit_code == 1 and record.job_state == "FAILED"
    assert "1: ValueError: shard 1 has 3 rows, expected 4" in log
    assert "srun: error: n2: task 1: Exited with exit code 1" in log
    assert record.rank_nodes == {"0": "n1", "1": "n2"}


async def test_sbatch_script_is_submitted_and_followed(repo: Path, slurm_cluster: str) -> None:
    (repo / "raise_rank1.py").write_text(RAISE_ON_RANK1)
    (repo / "job.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
        f"srun bash -c 'RANK=$SLURM_PROCID exec {PYTHON} raise_rank1.py'\n")
    record = await run_slurm(_spec(repo, ["sbatch", "job.sbatch"], slurm_cluster, timeout_s=120),
                             SlurmOptions(), Workspace(repo))
    log = _log(repo, record)
    assert record.outcome == "fail" and record.job_state == "FAILED" and record.nodes == ["n1", "n2"]
    assert f"Submitted batch job {record.job_id}" in log
    assert "1: ValueError: shard 1 has 3 rows" in log  # the script's srun labels its tasks (SLURM_LABELIO)
    assert "srun: error: n2: task 1: Exited with exit code 1" in log


@needs_torch
async def test_gloo_hang_dumps_every_rank_on_every_node_then_cancels(repo: Path, slurm_cluster: str) -> None:
    (repo / "hang_dist.py").write_text(HANG_DIST)
    record = await run_slurm(_spec(repo, [PYTHON, "hang_dist.py"], slurm_cluster, timeout_s=300, idle_timeout_s=10),
                             SlurmOptions(nodes=2), Workspace(repo))
    assert record.outcome == "hang" and record.timed_out == "idle" and record.job_state == "CANCELLED"
    by_rank = {s.rank: s for s in record.stacks}
    assert set(by_rank) == {0, 1}
    assert by_rank[0].node == "n1" and by_rank[1].node == "n2"
    assert "all_reduce" in by_rank[0].text and "wait_forever" in by_rank[1].text
    assert by_rank[0].method in ("py-spy", "faulthandler")
    # Detected at the idle timeout, the stacks taken and the job gone well within idle_timeout_s + 30 s.
    assert record.timings["timeout_to_job_gone"] < 30
    jobs, procs = wait_nothing_left(slurm_cluster, record.job_id)
    assert not jobs and not procs, (jobs, procs)
    assert "rank 0 on n1" in (repo / ".rootcause" / "runs" / record.run_id / "stacks.txt").read_text()


async def test_cancelled_call_cancels_the_job(repo: Path, slurm_cluster: str) -> None:
    (repo / "sleeper.py").write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n")
    with anyio.move_on_after(8):
        await run_slurm(_spec(repo, [PYTHON, "sleeper.py"], slurm_cluster, timeout_s=300),
                        SlurmOptions(nodes=2), Workspace(repo))
    runs = list((repo / ".rootcause" / "runs").iterdir())
    assert len(runs) == 1
    job_id = json.loads((runs[0] / "slurm.json").read_text())["job_id"]
    assert "sleeping" in (runs[0] / "log.txt").read_text(), "the job should have been running when cancelled"
    jobs, procs = wait_nothing_left(slurm_cluster, job_id)
    assert not jobs and not procs, (jobs, procs)


async def test_without_slurm_clients_it_is_a_usage_error(repo: Path) -> None:
    spec = RunSpec(argv=[PYTHON, "-V"], cwd=repo, env={"PATH": "/nonexistent"}, timeout_s=30)
    with pytest.raises(UsageError, match=r"needs the Slurm clients, and sbatch, srun, squeue, scancel, scontrol are "
                                         r"not on PATH"):
        await run_slurm(spec, SlurmOptions(), Workspace(repo))


async def test_a_controller_that_does_not_answer_is_a_usage_error(repo: Path, slurm_cluster: str,
                                                                  tmp_path: Path) -> None:
    dead = tmp_path / "dead.conf"
    dead.write_text("\n".join("SlurmctldPort=1" if line.startswith("SlurmctldPort=") else line
                              for line in Path(slurm_cluster).read_text().splitlines()) + "\n")
    with pytest.raises(UsageError, match="the Slurm controller does not answer"):
        await run_slurm(_spec(repo, [PYTHON, "-V"], str(dead)), SlurmOptions(), Workspace(repo))
    with pytest.raises(UsageError, match="is not a file"):
        await run_slurm(_spec(repo, [PYTHON, "-V"], str(tmp_path / "missing.conf")), SlurmOptions(), Workspace(repo))


async def test_bad_commands_and_refused_jobs_are_usage_errors(repo: Path, slurm_cluster: str) -> None:
    (repo / "job.sbatch").write_text("#!/bin/bash\necho hi\n")
    ws = Workspace(repo)
    with pytest.raises(UsageError, match="sets --output, which rootcause controls"):
        await run_slurm(_spec(repo, ["sbatch", "--output=x.log", "job.sbatch"], slurm_cluster), SlurmOptions(), ws)
    with pytest.raises(UsageError, match="would run sbatch inside every task"):
        await run_slurm(_spec(repo, ["/bin/sh", "-c", "sbatch job.sbatch"], slurm_cluster), SlurmOptions(), ws)
    with pytest.raises(UsageError, match="command not found: no-such-program-xyz"):
        await run_slurm(_spec(repo, ["no-such-program-xyz"], slurm_cluster), SlurmOptions(), ws)
    with pytest.raises(UsageError, match=r"sbatch refused the job: .*[Ii]nvalid partition"):
        await run_slurm(_spec(repo, ["sbatch", "job.sbatch"], slurm_cluster), SlurmOptions(partition="nosuch"), ws)
    assert not jobs_of_repo(slurm_cluster, repo)


@needs_torch
async def test_without_py_spy_faulthandler_dumps_every_rank(repo: Path, slurm_cluster: str) -> None:
    """The fallback where the nodes have no py-spy: SIGABRT into faulthandler, read back from the job's output."""
    (repo / "hang_dist.py").write_text(HANG_DIST)
    spec = _spec(repo, [PYTHON, "hang_dist.py"], slurm_cluster, timeout_s=300, idle_timeout_s=240)
    async with anyio.create_task_group() as group:
        group.start_soon(run_slurm, spec, SlurmOptions(nodes=2), Workspace(repo))
        runs = repo / ".rootcause" / "runs"
        for _ in range(300):
            logs = list(runs.glob("*/log.txt")) if runs.is_dir() else []
            if logs and logs[0].read_text().count(" ready") == 2:
                break
            await anyio.sleep(0.1)
        log = logs[0]
        await anyio.sleep(0.5)  # rank 0 reaches its all_reduce
        job_id = json.loads((log.parent / "slurm.json").read_text())["job_id"]
        stacks = await capture_job_stacks(job_id, 2, {**os.environ, "SLURM_CONF": slurm_cluster}, log,
                                          log.stat().st_size, py_spy="")
        group.cancel_scope.cancel()
    by_rank = {s.rank: s for s in stacks}
    assert {r: (s.node, s.method) for r, s in by_rank.items()} == {0: ("n1", "faulthandler"), 1: ("n2", "faulthandler")}
    assert "all_reduce" in by_rank[0].text and "wait_forever" in by_rank[1].text
    jobs, procs = wait_nothing_left(slurm_cluster, job_id)
    assert not jobs and not procs, (jobs, procs)


async def test_wall_timeout_dumps_then_cancels(repo: Path, slurm_cluster: str) -> None:
    (repo / "spin.py").write_text("import time\n\n\ndef spin():\n    while True:\n        print('tick', flush=True)\n"
                                  "        time.sleep(0.5)\n\n\nspin()\n")
    record = await run_slurm(_spec(repo, [PYTHON, "spin.py"], slurm_cluster, timeout_s=8, idle_timeout_s=60),
                             SlurmOptions(nodes=2), Workspace(repo))
    assert record.outcome == "hang" and record.timed_out == "wall" and record.job_state == "CANCELLED"
    assert {(s.rank, s.node) for s in record.stacks} == {(0, "n1"), (1, "n2")}
    assert all("spin" in s.text for s in record.stacks)
    jobs, procs = wait_nothing_left(slurm_cluster, record.job_id)
    assert not jobs and not procs, (jobs, procs)
