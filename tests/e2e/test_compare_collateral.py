"""compare_setups and check_collateral end to end: `rootcause serve` over stdio, real git, runs and uv venvs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import RunSpec, run_captured, run_process
from rootcause.tools.run.interpreters import uv_binary

from tests.conftest import error_text, git, stdio_client, structured
from tests.test_collateral import CLEAN_FIX, COLLATERAL_FIX, PYTEST, build_calc_repo, tree_state
from tests.test_compare import build_compare_repo

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def make_venv(ws: Workspace, path: Path, requirement: str) -> Path:
    env = {"UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
    record, output = await run_captured([uv_binary(), "venv", "-q", "--python", sys.executable, str(path)], ws,
                                        env=env, label="uv venv")
    assert record.outcome == "pass", output
    python = path / "bin" / "python"
    record, output = await run_captured([uv_binary(), "pip", "install", "-q", "--python", str(python), requirement],
                                        ws, env=env, timeout_s=180, label="uv pip install")
    assert record.outcome == "pass", output
    return python


async def test_compare_setups_over_stdio(repo: Path, tmp_path: Path) -> None:
    build_compare_repo(repo)
    ws = Workspace(repo)
    venv_good = await make_venv(ws, tmp_path / "venv-good", "six==1.16.0")
    venv_bad = await make_venv(ws, tmp_path / "venv-bad", "six==1.17.0")
    runs = []
    for env in ({"NCCL_DEBUG": "INFO", "TORCH_NCCL_BLOCKING_WAIT": "1"}, {"NCCL_DEBUG": "WARN"}):
        record = await run_process(RunSpec(argv=[sys.executable, "src/train.py", "--config", "configs/train.yaml"],
                                           cwd=repo, env=env), ws)
        runs.append(record.run_id)
    async with stdio_client(repo) as client:
        session = structured(await client.call_tool(
            "start_session", {"symptom": "loss diverges on 4 GPUs, NCCL warnings; lr changed?"}))["session_id"]
        result = await client.call_tool("compare_setups", {
            "good": {"ref": "HEAD~1", "run_id": runs[0], "python": str(venv_good)},
            "bad": {"ref": "HEAD", "run_id": runs[1], "python": str(venv_bad)},
            "session_id": session})
        data = structured(result)
        diffs = {d["key"]: d for d in data["differences"]}
        assert diffs["six"] | {"suspect": False, "why": None} == {
            "kind": "package", "key": "six", "good": "1.16.0", "bad": "1.17.0", "suspect": False, "why": None,
            "file": None}
        assert [k for k, d in diffs.items() if d["kind"] == "package" and d["file"] is None] == ["six"]
        assert (diffs["NCCL_DEBUG"]["good"], diffs["NCCL_DEBUG"]["bad"]) == ("INFO", "WARN")
        assert diffs["NCCL_DEBUG"]["suspect"] and diffs["TORCH_NCCL_BLOCKING_WAIT"]["bad"] is None
        assert (diffs["launch.sh:nproc_per_node"]["good"], diffs["launch.sh:nproc_per_node"]["bad"]) == ("8", "4")
        assert diffs["configs/train.yaml:trainer.optimizer.lr"]["suspect"]
        assert diffs["configs/train.yaml:trainer.layers[2]"]["bad"] == "32"
        assert diffs["uv.lock:six"]["bad"] == "1.17.0"
        assert data["summary"]["env"] == 2 and data["summary"]["code"] == 4
        text = result.content[0].text
        assert text.startswith("compare_setups: ")
        assert "SUSPECT [config] configs/train.yaml:trainer.optimizer.lr" in text
        report = (await client.read_resource(f"rootcause://sessions/{session}")).contents[0].text
        assert "compare_setups" in report and "[x] Phase 1" in report and "[~] Phase 2" in report
        assert "outside the root" in error_text(await client.call_tool(
            "compare_setups", {"good": {"ref": "HEAD~1", "files": ["/etc/passwd"]}}))


async def test_check_collateral_over_stdio(repo: Path, no_leftover_processes) -> None:
    build_calc_repo(repo)
    async with stdio_client(repo) as client:
        session = structured(await client.call_tool(
            "start_session", {"symptom": "AssertionError: assert 5 == 4 in test_add"}))["session_id"]
        (repo / "calc.py").write_text(COLLATERAL_FIX)
        before = tree_state(repo)
        broken = await client.call_tool("check_collateral", {"command": PYTEST, "session_id": session})
        data = structured(broken)
        assert data["verdict"] == "collateral"
        assert data["new_failures"] == ["tests/test_calc.py::TestMore::test_zero", "tests/test_calc.py::test_mul"]
        assert data["fixed"] == ["tests/test_calc.py::test_add"]
        assert tree_state(repo) == before
        (repo / "calc.py").write_text(CLEAN_FIX)
        before = tree_state(repo)
        clean = structured(await client.call_tool("check_collateral", {"command": PYTEST, "session_id": session}))
        assert clean["verdict"] == "clean" and clean["new_failures"] == [] and clean["still_failing"] == []
        assert tree_state(repo) == before and git(repo, "log", "--oneline").count("\n") == 1
        report = (await client.read_resource(f"rootcause://sessions/{session}")).contents[0].text
        assert "**collateral**" in report and "**clean**" in report and "[~] Phase 4" in report
        names = {t.name for t in (await client.list_tools()).tools}
        if "record_fix_attempt" in names:
            fix = structured(await client.call_tool("record_fix_attempt", {
                "session_id": session, "description": "drop the +1 in add", "command": PYTEST}))
            assert fix["collateral_checked"] and "collateral checked" in fix["next"]
