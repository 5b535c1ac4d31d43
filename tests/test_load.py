"""Load: 8 concurrent MCP clients on one HTTP server, each running a session with reproduce and captures.

Each client starts a session, reproduces its own failing script (2 runs), reads one run's log resource,
captures two distinct constraints into the shared knowledge file, and records a diagnose_log. Afterwards:
every result is the client's own, the knowledge file parses with every entry exactly once and numbered
without gaps, and every session's event log parses with the right evidence count.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import anyio
import pytest
from rootcause.tools.knowledge.entries import parse_markdown

from tests.conftest import git, structured
from tests.test_http import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
CLIENTS = 8
CAPTURES = 2
CALL_BOUND_S = 120


def _distinct_entries(count: int) -> list[tuple[str, str]]:
    """Entries that share no content words, so none is a near-duplicate of another."""
    rng = random.Random(11)
    syllables = ["ka", "lo", "mi", "ru", "te", "va", "zo", "pe", "qu", "ni", "sa", "fo", "gu", "he", "ji", "wy"]
    words: set[str] = set()
    while len(words) < count * 6:
        words.add("".join(rng.choice(syllables) for _ in range(4)))
    pool = sorted(words)
    rng.shuffle(pool)
    return [(f"{pool[i * 6].title()} {pool[i * 6 + 1]} {pool[i * 6 + 2]} invariant",
             f"- {pool[i * 6 + 3]} {pool[i * 6 + 4]} before {pool[i * 6 + 5]}") for i in range(count)]


@pytest.fixture
def project(repo: Path) -> Path:
    for i in range(CLIENTS):
        (repo / f"fail_{i}.py").write_text(f"def step():\n    raise ValueError('client {i} failed')\n\n\nstep()\n")
    (repo / ".agents" / "knowledge").mkdir(parents=True)
    (repo / ".agents" / "knowledge" / "constraints.md").write_text(
        "# Constraints\n\n## Training\n\n1. **Existing rule stays** — keep this byte for byte\n"
        "   - it was here before the load\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "load fixtures")
    return repo


async def test_eight_concurrent_http_clients(project: Path) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    entries = _distinct_entries(CLIENTS * CAPTURES)
    before = (project / ".agents" / "knowledge" / "constraints.md").read_text(encoding="utf-8")
    outcomes: dict[int, dict] = {}

    async def session(url: str, i: int) -> None:
        http = create_mcp_http_client()
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            with anyio.fail_after(CALL_BOUND_S):
                sid = structured(await client.call_tool("start_session", {"symptom": f"client {i} ValueError"}))[
                    "session_id"]
                rep = structured(await client.call_tool("reproduce", {
                    "command": f"python fail_{i}.py", "runs": 2, "session_id": sid}))
                log = (await client.read_resource(rep["runs"][1]["log_uri"])).contents[0].text
                captured = []
                for title, body in entries[i * CAPTURES:(i + 1) * CAPTURES]:
                    captured.append(structured(await client.call_tool("capture_knowledge", {
                        "kind": "constraint", "title": title, "body": body, "section": "Training",
                        "session_id": sid})))
                diag = structured(await client.call_tool("diagnose_log", {"text": log, "session_id": sid}))
            outcomes[i] = {"sid": sid, "rep": rep, "log": log, "captured": captured, "diag": diag}

    with http_server(project) as url:
        async with anyio.create_task_group() as tg:
            for i in range(CLIENTS):
                tg.start_soon(session, url, i)

    assert sorted(outcomes) == list(range(CLIENTS))
    assert len({o["sid"] for o in outcomes.values()}) == CLIENTS
    for i, o in outcomes.items():
        rep = o["rep"]
        assert rep["status"] == "reproduced" and rep["consistent"], (i, rep["status"])
        assert rep["diagnosis"]["message"] == f"client {i} failed", (i, rep["diagnosis"]["message"])
        assert rep["command"][-1] == f"fail_{i}.py"
        assert f"client {i} failed" in o["log"] and o["diag"]["diagnosis"]["message"] == f"client {i} failed"
        assert all(c["written"] for c in o["captured"]), (i, o["captured"])

    after = (project / ".agents" / "knowledge" / "constraints.md").read_text(encoding="utf-8")
    assert after.startswith(before.rstrip("\n")), "existing bytes changed"
    parsed = [e for e in parse_markdown(after, "constraints.md").entries if e.kind == "numbered"]
    assert sorted(e.number for e in parsed) == list(range(1, CLIENTS * CAPTURES + 2))
    for title, _ in entries:
        assert after.count(f"**{title}**") == 1, title
    written = sorted(c["written"]["number"] for o in outcomes.values() for c in o["captured"])
    assert written == list(range(2, CLIENTS * CAPTURES + 2))

    for i, o in outcomes.items():
        lines = (project / ".rootcause" / "sessions" / o["sid"] / "events.jsonl").read_text(
            encoding="utf-8").splitlines()
        events = [json.loads(line) for line in lines]
        evidence = [e["evidence"] for e in events if e["type"] == "evidence"]
        assert [e["tool"] for e in evidence] == ["reproduce", *["capture_knowledge"] * CAPTURES, "diagnose_log"], i
        assert [e["seq"] for e in evidence] == list(range(1, CAPTURES + 3)), i
        assert f"client {i} ValueError" in json.dumps(events[0])
