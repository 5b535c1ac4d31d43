"""The built-in pitfalls and the one symptom vocabulary through a real `rootcause serve` (stdio client)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rootcause.tools.ecosystem.demo.driver import SYMPTOM as DEMO_SYMPTOM

from tests.conftest import stdio_client, structured

pytestmark = pytest.mark.anyio


async def test_pitfalls_and_triage_over_stdio(repo: Path) -> None:
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("check_constraints", {"symptom": "loss NaN"}))
        assert data["files"] == [] and data["matches"] == []
        top = [p["name"] for p in data["pitfalls"]]
        assert {"lr_too_high", "fp16_overflow_gradscaler", "log_of_underflowing_probability"} <= set(top), top
        assert all(p["source"].startswith("https://") and p["check"] for p in data["pitfalls"])
        assert [c["name"] for c in data["checklists"]] == ["numerical_checklist"]

        hang = structured(await client.call_tool("check_constraints", {
            "symptom": "training hangs at dist.barrier, only rank 0 runs the evaluation"}))
        assert hang["category"] == "hang" and hang["pitfalls"][0]["name"] == "collective_on_some_ranks"

        for symptom in (DEMO_SYMPTOM, "test_padding fails: masked_mse returns 1.6667 instead of 2.5"):
            session = structured(await client.call_tool("start_session", {"symptom": symptom}))
            assert session["category"] == "test_failure", session
            assert not any("numerical symptom" in r for r in session["reasons"]), session["reasons"]

        prompt = await client.get_prompt("numerical_checklist")
        assert "Learning rate too high" in prompt.messages[0].content.text
