"""Signature v3 through the real `rootcause serve` over stdio: a reproduction and a pasted copy of its log from
another machine share group and signature (DESIGN, "Signature (v3: two levels)"), and reproduce says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import git, stdio_client, structured

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MODEL = """\
def project(x, width):
    return [sum(row[i] * w for i, w in enumerate(width)) for row in x]


def forward(batch, weights):
    if len(batch[0]) != len(weights):
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({len(batch)}x{len(batch[0])} and "
                           f"{len(weights)}x1)")
    return project(batch, weights)
"""
ENGINE = """\
from proj.model import forward


def run_epoch(batches, weights):
    return [forward(b, weights) for b in batches]
"""
TRAIN = """\
from proj.engine import run_epoch


def main():
    print("step 1 loss 2.30", flush=True)
    run_epoch([[[1.0, 2.0, 3.0]]], [0.5, 0.5])


if __name__ == "__main__":
    main()
"""


async def test_a_pasted_copy_of_a_reproduced_log_from_another_machine_has_its_group_and_signature(repo: Path) -> None:
    (repo / "proj").mkdir()
    (repo / "proj" / "__init__.py").write_text("")
    (repo / "proj" / "model.py").write_text(MODEL)
    (repo / "proj" / "engine.py").write_text(ENGINE)
    (repo / "train.py").write_text(TRAIN)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a shape bug")
    async with stdio_client(repo) as client:
        local = structured(await client.call_tool("reproduce", {"command": f"{sys.executable} train.py", "runs": 1}))
        log = (repo / local["runs"][0]["log_path"]).read_text()
        assert str(repo) in log  # the traceback names this checkout's files
        pasted_log = log.replace(str(repo), "/home/other/proj")
        sid = structured(await client.call_tool("start_session", {"symptom": "training stops at step 1"}))[
            "session_id"]
        pasted = structured(await client.call_tool("diagnose_log", {"text": pasted_log, "session_id": sid}))
        again = await client.call_tool("reproduce", {"command": f"{sys.executable} train.py", "runs": 1,
                                                     "session_id": sid})
    mine, theirs = local["diagnosis"], pasted["diagnosis"]
    assert mine["category"] == theirs["category"] == "shape_mismatch"
    assert mine["group"] == theirs["group"] == "v3|RuntimeError|mat1 and mat2 shapes cannot be multiplied " \
                                               "(<shape> and <shape>)"
    assert mine["signature"] == theirs["signature"] == f"{mine['group']}|train:main>engine:run_epoch>model:forward"
    assert mine["evidence"] == theirs["evidence"] == ["exception"]
    # The session's yardstick is the pasted log: the reproduction shows it, at the same call site.
    data = structured(again)
    assert data["status"] == "reproduced" and data["matches_symptom"] is True
    assert data["runs"][0]["match_reason"] == "the diagnosed log's failure (same group, the same call site)"
    assert "the same call site" in again.content[0].text
