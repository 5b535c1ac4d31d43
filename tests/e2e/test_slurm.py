"""reproduce with launcher='slurm' through `rootcause serve` over stdio, on a real two-node Slurm cluster.

The cluster is tests/slurm/cluster.sh's (slurmctld + slurmd n1 and n2 on this machine); the
`slurm_cluster` fixture puts its SLURM_CONF into the environment the server inherits.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tests.conftest import FIXTURES, error_text, git, stdio_client, structured
from tests.slurm.fixtures import jobs_of_repo, slurm_cluster, wait_nothing_left

__all__ = ["slurm_cluster"]  # the fixture, imported for pytest
pytestmark = [pytest.mark.anyio, pytest.mark.slow]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not importable: .venv/bin/pip install torch==2.13.0")

HANG_DIST = (FIXTURES / "scripts" / "hang_dist.py").read_text()  # rank 1 never joins the all_reduce

SHARD_CHECK = """\
import os

import torch.distributed as dist


def check_shard(rank):
    if rank == 1:
        raise ValueError(f"shard {rank} has 3 rows, expected 4")


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} on {os.environ['SLURMD_NODENAME']}", flush=True)
    check_shard(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

SBATCH_SCRIPT = """\
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000)) WORLD_SIZE=$SLURM_NTASKS
srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec python shard_check.py'
"""


def _commit(repo: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "scripts")


def _record(repo: Path, run_id: str) -> dict:
    return json.loads((repo / ".rootcause" / "runs" / run_id / "record.json").read_text())


@needs_torch
async def test_two_node_gloo_hang_is_dumped_on_both_nodes_and_cancelled(repo: Path, slurm_cluster: str) -> None:
    _commit(repo, {"hang_dist.py": HANG_DIST})
    async with stdio_client(repo) as client:
        result = await client.call_tool("reproduce", {
            "command": "python hang_dist.py", "runs": 1, "timeout_s": 300, "idle_timeout_s": 10,
            "launcher": "slurm", "slurm": {"nodes": 2, "ntasks_per_node": 1}})
        data = structured(result)
    run = data["runs"][0]
    assert run["outcome"] == "hang" and run["timed_out"] == "idle" and run["launcher"] == "slurm" and run["job_id"]
    d = data["diagnosis"]
    assert d["category"] == "hang" and "all_reduce" in d["signature"]
    by_rank = {s["rank"]: s for s in d["stacks"]}
    assert by_rank[0]["node"] == "n1" and by_rank[0]["collective"] == "all_reduce"
    assert by_rank[1]["node"] == "n2" and "wait_forever" in by_rank[1]["frames"][-1]
    assert d["ranks"]["0"] == {**d["ranks"]["0"], "outcome": "waiting", "node": "n1"}
    assert d["ranks"]["1"] == {**d["ranks"]["1"], "outcome": "culprit", "node": "n2"}  # never reached the all_reduce
    text = result.content[0].text
    assert "rank 0 on n1: waits in all_reduce" in text and "rank 1 on n2" in text
    record = _record(repo, run["run_id"])
    assert record["job_state"] == "CANCELLED" and record["nodes"] == ["n1", "n2"]
    assert record["timings"]["timeout_to_job_gone"] < 30  # the bound: within idle_timeout_s + 30 s
    jobs, procs = wait_nothing_left(slurm_cluster, run["job_id"])
    assert not jobs and not procs, (jobs, procs)


@needs_torch
async def test_rank_that_raises_on_n2_fails_with_its_node(repo: Path, slurm_cluster: str) -> None:
    _commit(repo, {"shard_check.py": SHARD_CHECK})
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("reproduce", {
            "command": "python shard_check.py", "runs": 1, "timeout_s": 300, "idle_timeout_s": 60,
            "launcher": "slurm", "slurm": {"nodes": 2}}))
    run = data["runs"][0]
    assert data["status"] == "reproduced" and run["outcome"] == "fail" and run["exit_code"] == 1
    d = data["diagnosis"]
    assert d["exception_type"] == "ValueError" and d["location"].startswith("shard_check.py:")
    assert d["ranks"]["1"]["outcome"] == "fail" and d["ranks"]["1"]["node"] == "n2"
    assert d["ranks"]["0"]["outcome"] == "ok" and d["ranks"]["0"]["node"] == "n1"
    assert _record(repo, run["run_id"])["job_state"] == "FAILED"
    assert wait_nothing_left(slurm_cluster, run["job_id"]) == ([], [])


@needs_torch
async def test_the_same_failure_through_an_sbatch_script(repo: Path, slurm_cluster: str) -> None:
    _commit(repo, {"shard_check.py": SHARD_CHECK, "job.sbatch": SBATCH_SCRIPT})
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("reproduce", {
            "command": "sbatch job.sbatch", "runs": 2, "timeout_s": 300, "idle_timeout_s": 60,
            "launcher": "slurm"}))
    assert data["status"] == "reproduced" and data["consistent"]
    d = data["diagnosis"]
    assert d["exception_type"] == "ValueError" and "shard <n> has <n> rows" in d["signature"]
    assert d["ranks"]["1"] == {**d["ranks"]["1"], "outcome": "fail", "node": "n2"}
    for run in data["runs"]:
        assert run["job_id"] and _record(repo, run["run_id"])["nodes"] == ["n1", "n2"]
        assert wait_nothing_left(slurm_cluster, run["job_id"]) == ([], [])


async def test_slurm_time_limit_is_a_hang_in_reproduce_and_diagnose_log(repo: Path, slurm_cluster: str) -> None:
    """Slurm's own time limit (the shortest it has: one minute) kills a job for real; its real lines say hang."""
    _commit(repo, {"slow.py": "import time\nprint('step 1', flush=True)\ntime.sleep(600)\n"})
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("reproduce", {
            "command": "python slow.py", "runs": 1, "timeout_s": 240, "launcher": "slurm",
            "slurm": {"nodes": 2, "time_limit": "1"}}))
        run = data["runs"][0]
        log = (repo / run["log_path"]).read_text()
        assert "DUE TO TIME LIMIT ***" in log and _record(repo, run["run_id"])["job_state"] == "TIMEOUT"
        assert run["outcome"] == "hang" and data["diagnosis"]["category"] == "hang"
        again = structured(await client.call_tool("diagnose_log", {"path": run["log_path"]}))
    assert again["diagnosis"]["category"] == "hang" and "TIME LIMIT" in again["diagnosis"]["message"]
    assert wait_nothing_left(slurm_cluster, run["job_id"]) == ([], [])


async def test_slurm_oom_kill_line_is_host_oom_on_its_node(repo: Path) -> None:
    """No cgroup memory limit here, so Slurm cannot OOM-kill for real: the lines are the ones slurmstepd writes
    (rewritten job numbers) as a job's output labels them under srun -l."""
    log = ("Submitted batch job 812\n0: step 10 loss 2.31\n1: step 10 loss 2.29\n"
           "1: slurmstepd-n2: error: Detected 1 oom-kill event(s) in StepId=812.0. Some of your processes may have "
           "been killed by the cgroup out-of-memory handler.\n"
           "srun: error: n2: task 1: Out Of Memory\n"
           "0: slurmstepd-n1: error: *** STEP 812.0 ON n1 CANCELLED AT 2026-11-30T23:01:07 ***\n"
           "srun: error: n1: task 0: Terminated\n")
    (repo / "job-812.out").write_text(log)
    async with stdio_client(repo) as client:
        d = structured(await client.call_tool("diagnose_log", {"path": "job-812.out"}))["diagnosis"]
    assert d["category"] == "host_oom"
    assert d["ranks"]["1"]["node"] == "n2" and d["ranks"]["1"]["outcome"] != "ok"


async def test_without_slurm_it_is_a_clear_error_and_the_server_stays_up(repo: Path) -> None:
    env_path = os.environ.get("PATH", "")
    _commit(repo, {"ok.py": "print('fine')\n"})
    async with stdio_client(repo) as client:
        message = error_text(await client.call_tool("reproduce", {
            "command": "python ok.py", "runs": 1, "launcher": "slurm", "env": {"PATH": "/usr/local/nowhere"}}))
        assert "needs the Slurm clients" in message and "srun" in message and "not on PATH" in message
        dead = repo / "dead.conf"
        dead.write_text("ClusterName=x\nSlurmctldHost=localhost\nSlurmctldPort=1\n")
        started = time.monotonic()
        message = error_text(await client.call_tool("reproduce", {
            "command": "python ok.py", "runs": 1, "launcher": "slurm",
            "env": {"SLURM_CONF": str(dead), "PATH": env_path}}))
        if "not on PATH" not in message:  # Slurm's clients are installed: the controller is what is missing
            assert "the Slurm controller does not answer" in message and time.monotonic() - started < 60
        data = structured(await client.call_tool("reproduce", {"command": "python ok.py", "runs": 1}))
        assert data["runs"][0]["outcome"] == "pass"


def _job_of_only_run(repo: Path) -> str | None:
    runs = [p for p in (repo / ".rootcause" / "runs").glob("*/slurm.json")]
    assert len(runs) == 1, runs
    return json.loads(runs[0].read_text()).get("job_id")


async def _wait_job_running(repo: Path, within_s: float = 30) -> str:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        logs = list((repo / ".rootcause" / "runs").glob("*/log.txt")) if (repo / ".rootcause").exists() else []
        if any("sleeping" in log.read_text() for log in logs):
            return _job_of_only_run(repo) or ""
        await anyio.sleep(0.2)
    raise AssertionError("the job did not start")


async def test_client_cancellation_cancels_the_job(repo: Path, slurm_cluster: str) -> None:
    _commit(repo, {"sleeper.py": "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n"})
    async with stdio_client(repo) as client:
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def call() -> None:
                with scope:
                    await client.call_tool("reproduce", {"command": "python sleeper.py", "runs": 1,
                                                         "launcher": "slurm", "slurm": {"nodes": 2}})

            group.start_soon(call)
            job_id = await _wait_job_running(repo)
            scope.cancel()
        assert job_id
        jobs, procs = wait_nothing_left(slurm_cluster, job_id, within_s=30)
        assert not jobs and not procs, (jobs, procs)
        data = structured(await client.call_tool("diagnose_log", {"text": "ValueError: still serving"}))
        assert data["diagnosis"]["exception_type"] == "ValueError"


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
async def test_server_killed_mid_run_leaves_no_job(repo: Path, slurm_cluster: str, how: str) -> None:
    _commit(repo, {"sleeper.py": "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n"})
    me = psutil.Process()
    job_id = ""
    with pytest.raises(BaseException):  # noqa: B017 - the connection dies with the server, however it is reported
        async with stdio_client(repo) as client, anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "reproduce", {"command": "python sleeper.py", "runs": 1,
                                                             "launcher": "slurm", "slurm": {"nodes": 2}})
            job_id = await _wait_job_running(repo)
            server = next(p for p in me.children(recursive=True) if "serve" in " ".join(p.cmdline()))
            server.send_signal(getattr(signal, how))
            await anyio.sleep(30)  # the call never completes; the task group ends with the broken connection
    assert job_id
    jobs, procs = wait_nothing_left(slurm_cluster, job_id, within_s=30)
    assert not jobs and not procs, (jobs, procs)


@needs_torch
async def test_the_launcher_reaches_verify_hypothesis_and_check_collateral(repo: Path, slurm_cluster: str) -> None:
    _commit(repo, {"shard_check.py": SHARD_CHECK, "calc.py": "def mul(a, b):\n    return a * b\n",
                   "test_calc.py": "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n\n\n"
                                   "def test_sum():\n    assert sum([1, 1]) == 2\n"})
    async with stdio_client(repo) as client:
        sid = structured(await client.call_tool("start_session", {
            "symptom": "ValueError: shard 1 has 3 rows on rank 1 of a 2-node job"}))["session_id"]
        verdict = structured(await client.call_tool("verify_hypothesis", {
            "session_id": sid, "hypothesis": "check_shard raises on rank 1 because its shard has 3 rows",
            "prediction": "a 2-node run fails with ValueError on rank 1 only", "command": "python shard_check.py",
            "expect": "ValueError: shard 1 has 3 rows", "changed": "nothing: the same script on 2 nodes",
            "disproof": "rank 0 fails too, or no ValueError at all",
            "alternatives": ["the loader drops a row on every rank"], "launcher": "slurm", "slurm": {"nodes": 2}}))
        assert verdict["result"] == "supported"
        assert all(r["launcher"] == "slurm" and r["job_id"] for r in verdict["runs"])
        (repo / "calc.py").write_text("def mul(a, b):\n    return a * b + 1\n")
        collateral = structured(await client.call_tool("check_collateral", {
            "command": "python -m pytest -q test_calc.py", "launcher": "slurm", "session_id": sid}))
    assert collateral["verdict"] == "collateral" and collateral["new_failures"] == ["test_calc.py::test_mul"]
    assert not jobs_of_repo(slurm_cluster, repo)


async def test_client_disconnecting_mid_run_leaves_no_job(repo: Path, slurm_cluster: str) -> None:
    _commit(repo, {"sleeper.py": "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n"})
    job_id = ""
    async with stdio_client(repo) as client, anyio.create_task_group() as group:
        group.start_soon(client.call_tool, "reproduce", {"command": "python sleeper.py", "runs": 1,
                                                         "launcher": "slurm", "slurm": {"nodes": 2}})
        job_id = await _wait_job_running(repo)
        group.cancel_scope.cancel()  # leaving the client closes the server's stdin: a disconnect
    assert job_id
    jobs, procs = wait_nothing_left(slurm_cluster, job_id, within_s=30)
    assert not jobs and not procs, (jobs, procs)
