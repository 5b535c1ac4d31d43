"""A real torch.multiprocessing.spawn hang run through reproduce: the stuck rank's line, not the parent's."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path

import anyio
import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.engines.reproduce import ReproduceInput, reproduce

from tests.conftest import git

NO_TORCH = "torch is not importable: .venv/bin/pip install torch==2.13.0"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason=NO_TORCH)]

SPAWN_HANG = '''\
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    print(f"rank {rank} ready", flush=True)
    if rank == 1:
        while True:
            time.sleep(0.2)
    dist.all_reduce(torch.ones(4))


if __name__ == "__main__":
    mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mp_spawn_hang_is_located_at_the_rank_waiting_in_the_collective(tmp_path: Path) -> None:
    (tmp_path / "spawn_hang.py").write_text(SPAWN_HANG)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "hang")
    inp = ReproduceInput(command=f"python spawn_hang.py {_free_port()}", runs=1, timeout_s=120, idle_timeout_s=20,
                         python=sys.executable)
    result = anyio.run(reproduce, inp, ToolContext.for_root(tmp_path))
    d = result.diagnosis
    assert result.runs[0].outcome == "hang" and d.category == "hang"
    # Every process has rank None under mp.spawn; the parent stands on mp.spawn (line 19), rank 0 in all_reduce.
    assert any(s.user_frame == "spawn_hang.py:19" and s.collective is None for s in d.stacks)
    assert any(s.collective == "all_reduce" and s.user_frame == "spawn_hang.py:15" for s in d.stacks)
    assert d.location == "spawn_hang.py:15"
    # The flight recorder names rank 1 missing at #1; no stack carries a rank, so the stacks' places stand in.
    assert d.group == "v3|hang|collective missing in default_pg: all_reduce(<n>)"
    assert "waits in all_reduce" in d.signature and d.mismatch.culprit_ranks == [1]
