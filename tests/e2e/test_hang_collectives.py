"""The injected hangs of tests/fixtures/scripts/hangs/ through `rootcause serve` over stdio: reproduce runs
each under torchrun (gloo, CPU), every rank dumps its flight recorder before the kill, the dumps hold what
the script constructed, the diagnosis names the collective and the culprit ranks, and nothing is left."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tests.conftest import git, stdio_client, structured
from tests.test_flight_recorder_capture import HANGS, assert_dumps_as_constructed, expected, needs_torch

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
LOCAL = ["skip_collective.py", "mismatched_sizes.py", "rank_conditional_barrier.py", "stalled_loader.py",
         "rank_dies.py", "uneven_batches.py"]


def _left(token: str) -> list[str]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if token in " ".join(proc.cmdline()) or proc.environ().get("ROOTCAUSE_RUN_ID") == token:
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


async def none_left(token: str, within_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + within_s
    while (left := _left(token)) and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    return left


def assert_mismatch(diagnosis: dict, want: dict) -> None:
    """diagnosis.mismatch against the script's EXPECTED (op names compared without the backend prefix)."""
    mismatch = diagnosis["mismatch"]
    assert mismatch, diagnosis.get("collectives")
    assert mismatch["seq"] == want["seq"] and sorted(mismatch["culprit_ranks"]) == want["culprit_ranks"], mismatch
    assert sorted(mismatch["missing_ranks"]) == want["missing_ranks"], mismatch
    ops = {rank: op.split(":")[-1] for rank, op in mismatch["ops"].items()}
    for rank, op in want.get("ops", {}).items():
        assert op in ops.get(rank, ""), (rank, mismatch)


@needs_torch
@pytest.mark.parametrize("script", LOCAL)
async def test_injected_hang_names_the_collective_and_the_culprits(repo: Path, script: str) -> None:
    want = expected(script)
    (repo / script).write_text((HANGS / script).read_text())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"add {script}")
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("reproduce", {
            "command": f"python -m torch.distributed.run --standalone --nproc_per_node {want['nproc']} {script}",
            "runs": 1, "timeout_s": 180, "idle_timeout_s": 8}))
    run = data["runs"][0]
    assert run["outcome"] == "hang" and run["timed_out"] == "idle", run
    folder = repo / ".rootcause" / "runs" / run["run_id"]
    record = json.loads((folder / "record.json").read_text())
    assert record["collective_dumps"] == want["nproc"]
    assert_dumps_as_constructed(folder / "flight_recorder", want)
    assert_mismatch(data["diagnosis"], want)
    assert not await none_left(run["run_id"]) and not await none_left(script)
