"""Issue 25 points 3-4 through a real `rootcause serve`: a negated symptom is triaged by what it says happened,
and a real 2-rank gloo job on CPU never gets NCCL's or CUDA's pitfalls."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import stdio_client, structured

pytestmark = pytest.mark.anyio

GLOO_JOB = '''
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def work(rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank {rank}: all_reduce gave {t.tolist()}", flush=True)
    if rank == 1:
        raise ValueError("rank 1 saw a batch of 3 rows, the other ranks 4")
    dist.barrier()

if __name__ == "__main__":
    mp.spawn(work, nprocs=2)
'''


async def test_negated_symptom_is_a_metric_regression(repo: Path) -> None:
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("start_session", {
            "symptom": "Training finishes and nothing crashes, but the probe's val_acc is 0.744 where it was 0.88"}))
    assert data["category"] == "metric_regression" and data["category_basis"] == "prose"
    assert data["path"] == "full"
    assert "nothing crashes" in data["negated"]
    assert not any("crash" in r and "process crashed" in r for r in data["reasons"])


async def test_vague_symptom_says_it_names_no_failure_class(repo: Path) -> None:
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("start_session", {
            "symptom": "something is off with my run since last week"}))
    assert data["category_basis"] == "none"
    assert any("names no failure class" in r for r in data["reasons"])


@pytest.mark.torch
async def test_a_gloo_job_on_cpu_gets_no_nccl_or_cuda_pitfall(repo: Path) -> None:
    pytest.importorskip("torch", reason="torch is not installed in the test interpreter")
    import socket

    (repo / "job.py").write_text(GLOO_JOB)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with stdio_client(repo) as client:
        sid = structured(await client.call_tool("start_session", {
            "symptom": "2-rank job dies after the first all_reduce"}))["session_id"]
        rep = structured(await client.call_tool("reproduce", {
            "command": f"{sys.executable} job.py {port}", "runs": 1, "timeout_s": 120, "session_id": sid}))
        assert rep["runs"][0]["outcome"] == "fail", rep["runs"]
        data = structured(await client.call_tool("check_constraints", {
            "session_id": sid, "symptom": "2-rank job hangs or dies in a collective, connection closed by peer"}))
        by_args = structured(await client.call_tool("check_constraints", {
            "symptom": "multi-node job times out at init, the nodes cannot connect",
            "facts": {"backend": "gloo", "device": "cpu", "distributed": True}}))
    facts = data["facts"]
    assert facts["backend"] == "gloo" and facts["device"] == "cpu" and facts["exit"] == "nonzero", facts
    assert "the session's reproduced run" in data["facts_source"]
    names = {p["name"] for p in data["pitfalls"]} | {p["name"] for p in by_args["pitfalls"]}
    assert not names & {"nccl_network_interface", "nccl_infiniband", "allocator_fragmentation",
                        "async_cuda_errors", "tf32_matmul_precision", "fp16_overflow_gradscaler"}, names
    assert by_args["facts_source"] == ["the arguments"] or by_args["facts_source"][0] == "the arguments"
