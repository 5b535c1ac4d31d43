"""inspect_checkpoint's load audit (load_into) through the real `rootcause serve` over stdio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import error_text, stdio_client, structured
from tests.test_numerics_checkpoint import needs_torch, write_audit_project

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@needs_torch
async def test_load_audit_over_stdio(tmp_path: Path, no_leftover_processes: None) -> None:
    root = write_audit_project(tmp_path / "project")
    async with stdio_client(root) as client:
        # A strict=False load of the probe state dict into today's model (backbone.layer2 renamed stage2)
        result = await client.call_tool("inspect_checkpoint", {"path": "probe.pt", "load_into": "project_model:build"})
        data = structured(result)
        torch_says = json.loads((root / "strict_false.json").read_text())
        assert data["missing"] == torch_says["missing"] and data["unexpected"] == torch_says["unexpected"]
        assert {(r["from"], r["to"]) for r in data["likely_renames"]} == {
            ("backbone.stage2.weight", "backbone.layer2.weight"), ("backbone.stage2.bias", "backbone.layer2.bias")}
        text = result.content[0].text
        assert text.splitlines()[1].split()[:2] == ["group", "keys"]
        assert "WILL NOT BE RESTORED (model: stored, absent from the target): 2 tensors" in text
        # A DCP resume into a freshly built optimizer: its 18 state tensors are left out without a word
        result = await client.call_tool("inspect_checkpoint", {"path": "dcp_plain",
                                                               "load_into": "project_model:fresh_training_state"})
        data = structured(result)
        groups = {g["group"]: g for g in data["groups"]}
        assert groups["optimizer"]["not_restored_tensors"] == 18 and groups["model"]["not_restored"] == 0
        assert data["load_into"]["semantics"].startswith("dcp.load reads only the target's keys")
        assert "WILL NOT BE RESTORED (optimizer: stored, absent from the target): 18 tensors" in result.content[0].text
        # What does not load is a tool error in our words, not a traceback
        text = error_text(await client.call_tool("inspect_checkpoint", {"path": "probe.pt",
                                                                        "load_into": "project_model:raises"}))
        assert text.startswith("load_into 'project_model:raises': raised FileNotFoundError: conf/train.yaml")
        assert "Traceback" not in text
