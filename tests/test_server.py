"""The MCP surface through the in-memory client: tools, prompts, resources, errors."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from rootcause.server.catalog import PROMPTS, TOOLS

from tests.conftest import error_text, memory_client, structured

pytestmark = pytest.mark.anyio
CONTRACT_TOOLS = {t.name for t in TOOLS}  # every tool list in the tests derives from the catalog
DESIGN = Path(__file__).resolve().parent.parent.parent / "shared" / "DESIGN.md"


def test_catalog_names_the_contract() -> None:
    """The catalog serves exactly the tools DESIGN.md's tool contract names (`name(args...)` lines)."""
    if not DESIGN.is_file():
        pytest.skip(f"{DESIGN} is not beside the checkout")
    text = DESIGN.read_text(encoding="utf-8")
    contract = text[text.index("## Tool contract"):text.index("\nPrompts:")]
    assert {t.name for t in TOOLS} == set(re.findall(r"^`([a-z_]+)\(", contract, re.MULTILINE))
    assert {p.name for p in PROMPTS} == {"debug_protocol", "quick_path", "verification_subagent",
                                         "distributed_checklist", "numerical_checklist"}


async def test_every_contract_tool_is_served(repo: Path) -> None:
    async with memory_client(repo) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == CONTRACT_TOOLS
    for tool in tools.values():
        assert tool.description and tool.output_schema, tool.name


async def test_start_session_and_report_resource(repo: Path) -> None:
    async with memory_client(repo) as client:
        result = await client.call_tool("start_session", {"symptom": "loss is NaN after step 1200 with FSDP2"})
        data = structured(result)
        assert data["path"] == "full" and data["category"] == "nonfinite"
        assert "FULL path" in result.content[0].text
        report = await client.read_resource(f"rootcause://sessions/{data['session_id']}")
        text = report.contents[0].text
        assert text.startswith(f"# rootcause session {data['session_id']}")
        assert "loss is NaN after step 1200" in text


async def test_bad_input_is_specific(repo: Path) -> None:
    async with memory_client(repo) as client:
        assert "symptom is empty" in error_text(await client.call_tool("start_session", {"symptom": ""}))
        assert "unknown session '20200101-000000-abcdef'" in error_text(
            await client.call_tool("close_session", {"session_id": "20200101-000000-abcdef"}))
        assert "malformed" in error_text(await client.call_tool("close_session", {"session_id": "nope"}))
        with pytest.raises(Exception, match="unknown session"):
            await client.read_resource("rootcause://sessions/20200101-000000-abcdef")


async def test_prompts_render(repo: Path) -> None:
    async with memory_client(repo) as client:
        listed = {p.name: p for p in (await client.list_prompts()).prompts}
        assert set(listed) == {p.name for p in PROMPTS}
        assert [a.name for a in listed["verification_subagent"].arguments] == ["conclusion", "evidence"]
        rendered = await client.get_prompt("verification_subagent",
                                           {"conclusion": "the LR warmup causes the NaN",
                                            "evidence": "run A (warmup 0) NaN at step 3; run B finite"})
        text = rendered.messages[0].content.text
        assert "the LR warmup causes the NaN" in text and "run B finite" in text
        assert "CONFIRMED" in text and "CHALLENGED" in text and "INSUFFICIENT_EVIDENCE" in text
        assert "{{" not in text
        for name in ("debug_protocol", "quick_path"):
            body = (await client.get_prompt(name, {"symptom": "rank 2 hangs"})).messages[0].content.text
            assert "rank 2 hangs" in body
        for name in ("distributed_checklist", "numerical_checklist"):
            body = (await client.get_prompt(name, {})).messages[0].content.text
            assert body.startswith("# ")


async def test_progress_values_increase(repo: Path) -> None:
    """Engines nest counters (runs, steps, seconds); the client must still see increasing progress."""
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    command = ["python", "-c", "import time\nfor i in range(7):\n    print(i, flush=True); time.sleep(1)"]
    async with memory_client(repo) as client:
        result = await client.call_tool("reproduce", {"command": command, "runs": 2, "timeout_s": 60},
                                        progress_callback=on_progress)
    assert structured(result)["status"] == "not_reproduced"
    values = [value for value, _ in seen]
    assert len(values) >= 3, seen
    assert all(b > a for a, b in itertools.pairwise(values)), seen
    assert any(message and "last line" in message for _, message in seen), seen
