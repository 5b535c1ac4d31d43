"""diagnose_log on flight-recorder dumps through the real `rootcause serve` over stdio: a folder of a real gloo
hang's dumps and a tar.gz of public 16-rank NCCL dumps (tests/fixtures/flight_recorder/README.md)."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, stdio_client, structured

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
DUMPS = FIXTURES / "flight_recorder"


async def test_dump_folder_and_archive_name_the_collective_and_the_culprits(repo: Path) -> None:
    shutil.copytree(DUMPS / "skip", repo / "fr")
    with tarfile.open(repo / "nccl.tar.gz", "w:gz") as tar:
        tar.add(DUMPS / "nvrx" / "gpu_error_2nd", arcname="dumps")
    async with stdio_client(repo) as client:
        folder = await client.call_tool("diagnose_log", {"path": "fr"})
        archive = await client.call_tool("diagnose_log", {"path": "nccl.tar.gz"})
    d = structured(folder)["diagnosis"]
    assert d["category"] == "hang"
    assert d["mismatch"] == {"group": "the default group", "seq": 4, "ops": {"0": "all_reduce(4)", "1": "barrier"},
                             "missing_ranks": [], "culprit_ranks": [1], "kind": "op"}
    assert {(c["rank"], c["last_entered"]["op"], c["last_completed"]["seq"]) for c in d["collectives"]} == {
        (0, "all_reduce", 3), (1, "barrier", 3)}
    text = folder.content[0].text
    assert "[hang] ranks disagree at collective #4 of the default group: rank 0 all_reduce(4) — rank 1 barrier" in text
    assert "culprit rank 1" in text
    nccl = structured(archive)["diagnosis"]
    assert nccl["category"] == "hang" and nccl["mismatch"]["culprit_ranks"] == [9, 14]  # the injected GPU errors
    assert "EXPERT_MODEL_PARALLEL_GROUP" in archive.content[0].text


SKIP = """\
from datetime import timedelta

import torch
import torch.distributed as dist


def end_of_epoch():
    dist.barrier()


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    for step in range(4):
        if dist.get_rank() == 1 and step == 3:
            end_of_epoch()
        dist.all_reduce(torch.ones(4))


main()
"""


async def test_a_real_hang_reproduced_names_the_culprit_and_its_function(repo: Path, no_leftover_processes) -> None:
    """A 2-rank gloo torchrun job where rank 1 skips the 4th all_reduce for a barrier: the run's flight recorder
    dumps (captured by reproduce on the hang) give the collective, the culprit and where it stands."""
    import sys

    (repo / "train.py").write_text(SKIP)
    async with stdio_client(repo) as client:
        result = await client.call_tool("reproduce", {
            "command": f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node=2 train.py",
            "runs": 1, "idle_timeout_s": 20})  # torch imports slowly on a loaded machine
    d = structured(result)["diagnosis"]
    assert d["category"] == "hang" and d["mismatch"]["culprit_ranks"] == [1] and d["mismatch"]["seq"] == 4
    assert ("ranks disagree at collective #4 of the default group: rank 0 all_reduce(4) — rank 1 barrier; "
            "rank 1 is in end_of_epoch at train.py:8") in result.content[0].text
