"""Every tool's outputSchema describes its structuredContent completely: real calls of every tool through the
official stdio client, each result validated (jsonschema, Draft 2020-12) against the tool's own outputSchema
closed up, so that a field the schema does not name fails as surely as a field of the wrong type."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from rootcause.server.catalog import TOOLS

from tests.conftest import FIXTURES, stdio_client, structured
from tests.protocol_project import REPRODUCER, ROOT_FIX, SYMPTOM, VERIFY, edit, make_project
from tests.test_bisect import make_click_repo, make_history
from tests.test_hypothesis import GOOD
from tests.test_numerics_checkpoint import torch_available, write_checkpoints

pytestmark = pytest.mark.anyio

PROTOCOL_TOOLS = {"start_session", "reproduce", "check_constraints", "verify_hypothesis", "record_fix_attempt",
                  "check_collateral", "capture_knowledge", "close_session", "compare_setups", "bisect_commits"}
NUMERICS_TOOLS = {"diagnose_log", "analyze_training_log", "inspect_checkpoint"}
ENVIRONMENT_TOOLS = {"bisect_env", "bisect_versions"}


def test_the_calls_below_cover_every_tool() -> None:
    assert {spec.name for spec in TOOLS} == PROTOCOL_TOOLS | NUMERICS_TOOLS | ENVIRONMENT_TOOLS


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every object that lists its properties closed: each of them present, no other.

    Output schemas leave `required` out because a result always carries every field of its model; this
    checks that claim as well as the types.
    """
    schema = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict) and "additionalProperties" not in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


class Checked:
    """Calls tools and validates each result against the outputSchema the server listed for it."""

    def __init__(self, client: Any, schemas: dict[str, dict[str, Any]]) -> None:
        self.client = client
        self.validators = {name: Draft202012Validator(closed(schema)) for name, schema in schemas.items()}
        self.validated: set[str] = set()

    @classmethod
    async def open(cls, client: Any) -> Checked:
        tools = (await client.list_tools()).tools
        for tool in tools:
            Draft202012Validator.check_schema(tool.output_schema)
        return cls(client, {tool.name: tool.output_schema for tool in tools})

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        data = structured(await self.client.call_tool(name, arguments))
        errors = sorted(self.validators[name].iter_errors(data), key=lambda e: list(e.absolute_path))
        assert not errors, f"{name}: " + "; ".join(
            f"at /{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:5])
        self.validated.add(name)
        return data


async def test_protocol_tools_return_what_their_output_schemas_say(repo: Path, tmp_path: Path) -> None:
    project = make_project(repo)
    knowledge = project / ".agents" / "knowledge"
    knowledge.mkdir(parents=True)
    shutil.copy(FIXTURES / "knowledge" / "bullets.md", knowledge / "constraints.md")
    (project / "build" / "autogen").mkdir(parents=True)
    (project / "build" / "autogen" / "stubs.py").write_text("# hand-edited generated file\n")
    async with stdio_client(project) as client:
        checked = await Checked.open(client)
        sid = (await checked.call("start_session", {"symptom": SYMPTOM}))["session_id"]
        reproduced = await checked.call("reproduce", {"command": REPRODUCER, "runs": 2, "session_id": sid})
        assert reproduced["diagnosis"]["exception_type"] == "ZeroDivisionError" and reproduced["runs"][0]["signature"]
        constraints = await checked.call("check_constraints", {"session_id": sid})
        assert constraints["guard_violations"]
        hypothesis = await checked.call("verify_hypothesis", {**GOOD, "session_id": sid})
        assert hypothesis["gate"]["checks"]
        edit(project, *ROOT_FIX)
        assert (await checked.call("record_fix_attempt", {
            "session_id": sid, "command": VERIFY, "description": "default THRESHOLD to 0"}))["fixed"]
        await checked.call("check_collateral", {"command": VERIFY, "session_id": sid})
        await checked.call("compare_setups", {"good": {"ref": "HEAD"}, "bad": {"files": ["stats.py"]},
                                              "session_id": sid})
        written = await checked.call("capture_knowledge", {
            "kind": "constraint", "session_id": sid, "title": "THRESHOLD defaults to 0",
            "body": "stats.load() drops values at or below THRESHOLD; a default above the data empties the list."})
        assert written["written"]
        await checked.call("close_session", {"session_id": sid})

    history = tmp_path / "history"
    shas = make_history(history, commits=5, bug_at=3, skip_at=None)
    async with stdio_client(history) as client:
        checked_history = await Checked.open(client)
        found = await checked_history.call("bisect_commits", {"good": shas[0], "bad": "HEAD",
                                                              "command": "python check.py"})
        assert found["first_bad_commit"]["sha"] == shas[2]
    assert checked.validated | checked_history.validated == PROTOCOL_TOOLS


async def test_log_and_checkpoint_tools_return_what_their_output_schemas_say(tmp_path: Path) -> None:
    if not torch_available():
        pytest.skip("torch is not importable in the test interpreter (CI installs torch==2.13.0)")
    root = write_checkpoints(tmp_path / "project")
    for name in ("hang_faulthandler_timeout_dump.log", "cuda_oom_fsdp_rank1.log"):
        shutil.copy(FIXTURES / "logs" / name, root / name)
    for name in ("run_1gpu.log", "run_8gpu.log", "hf_trainer_nan.log"):
        shutil.copy(FIXTURES / "training_logs" / name, root / name)
    async with stdio_client(root) as client:
        checked = await Checked.open(client)
        hang = await checked.call("diagnose_log", {"path": "hang_faulthandler_timeout_dump.log"})
        assert hang["diagnosis"]["stacks"]
        oom = await checked.call("diagnose_log", {"path": "cuda_oom_fsdp_rank1.log"})
        assert oom["diagnosis"]["ranks"] and oom["diagnosis"]["frames"]
        diverged = await checked.call("analyze_training_log", {"path": "run_8gpu.log", "compare_to": "run_1gpu.log"})
        assert diverged["divergence"]
        assert (await checked.call("analyze_training_log", {"path": "hf_trainer_nan.log"}))["first_nonfinite"]
        compared = await checked.call("inspect_checkpoint", {"path": "dcp_bad", "compare_to": "model.safetensors"})
        assert compared["likely_renames"] and compared["nonfinite"]
    assert checked.validated == NUMERICS_TOOLS


@pytest.mark.slow
async def test_environment_bisects_return_what_their_output_schemas_say(tmp_path: Path) -> None:
    root = make_click_repo(tmp_path / "project")
    async with stdio_client(root) as client:
        checked = await Checked.open(client)
        env = await checked.call("bisect_env", {"package": "click", "version": "8.2.0", "command": "python repro.py",
                                                "timeout_s": 120})
        assert env["verdict"] == "version_flips_outcome" and env["freeze_diff"]
        versions = await checked.call("bisect_versions", {"package": "click", "good": "8.1.0", "bad": "8.3.0",
                                                          "command": "python repro.py"})
        assert versions["first_bad"] == "8.2.0" and versions["tested"]
    assert checked.validated == ENVIRONMENT_TOOLS
