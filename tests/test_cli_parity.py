"""CLI parity: `rootcause <tool> ... --json` prints exactly the MCP structured result; exit codes 0 / 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from rootcause.server.catalog import TOOLS

from tests.conftest import error_text, rootcause_executable, stdio_client, structured

TRACEBACK = """\
Traceback (most recent call last):
  File "train.py", line 12, in <module>
    main()
  File "train.py", line 9, in main
    raise ValueError(f"shapes do not match: {a} vs {b}")
ValueError: shapes do not match: (4, 8) vs (4, 9)
"""


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([rootcause_executable(), "--root", str(root), *args], capture_output=True, text=True,
                          timeout=180)


def cli_json(root: Path, *args: str) -> dict:
    proc = cli(root, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _loaded() -> list:
    loaded = []
    for spec in TOOLS:
        try:
            spec.load()
        except ModuleNotFoundError:
            continue
        loaded.append(spec)
    return loaded


def test_every_tool_has_a_subcommand_with_the_same_arguments() -> None:
    from rootcause.server.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for spec in _loaded():
        _, input_model, _ = spec.load()
        sub = subparsers.choices[spec.name.replace("_", "-")]
        dests = {a.dest for a in sub._actions if a.dest not in ("help", "as_json")}
        assert dests == set(input_model.model_fields), spec.name
        assert any(a.dest == "as_json" for a in sub._actions), spec.name
    assert {"serve", "session", "install", "init", "demo"} <= set(subparsers.choices)


@pytest.mark.anyio
async def test_start_session_json_matches_mcp(repo: Path) -> None:
    symptom = "RuntimeError: NCCL watchdog timeout on rank 3 after 1800000 ms"
    from_cli = cli_json(repo, "start-session", symptom)
    async with stdio_client(repo) as client:
        from_mcp = structured(await client.call_tool("start_session", {"symptom": symptom}))
    assert from_cli.keys() == from_mcp.keys()
    assert from_cli["session_id"] != from_mcp["session_id"]
    assert {k: v for k, v in from_cli.items() if k != "session_id"} == \
        {k: v for k, v in from_mcp.items() if k != "session_id"}


@pytest.mark.anyio
async def test_close_session_refusal_same_message_and_exit_2(repo: Path) -> None:
    session_id = cli_json(repo, "start-session", "ValueError: bad")["session_id"]
    refused = cli(repo, "close-session", session_id, "--json")
    assert refused.returncode == 2 and refused.stdout == ""
    async with stdio_client(repo) as client:
        message = error_text(await client.call_tool("close_session", {"session_id": session_id}))
    # One message, worded for each surface: the CLI names subcommands and options where MCP names tools.
    from rootcause.server.surface import render

    cli_message = refused.stderr.strip().removeprefix("error: ")
    assert render(message, "cli") == cli_message, (message, cli_message)
    assert "Phase 5" in cli_message and "capture-knowledge" in cli_message and "capture_knowledge" in message


@pytest.mark.anyio
async def test_diagnose_log_json_equals_mcp(repo: Path) -> None:
    pytest.importorskip("rootcause.tools.engines.diagnose_log", reason="diagnose_log is not in this build yet")
    from_cli = cli_json(repo, "diagnose-log", "--text", TRACEBACK)
    async with stdio_client(repo) as client:
        from_mcp = structured(await client.call_tool("diagnose_log", {"text": TRACEBACK}))
    assert from_cli == from_mcp
    assert from_cli["diagnosis"]["exception_type"] == "ValueError"


@pytest.mark.anyio
async def test_check_constraints_json_equals_mcp(repo: Path) -> None:
    pytest.importorskip("rootcause.tools.engines.check_constraints", reason="not in this build yet")
    from rootcause.tools.ecosystem.scaffold import init_knowledge

    init_knowledge(repo)
    constraints = repo / ".agents/knowledge/constraints.md"
    constraints.write_text(constraints.read_text() + (
        "\n2. **Shapes of the two projection weights must match**\n"
        "   - A mismatch raises ValueError: shapes do not match when the model is built.\n"))
    symptom = "ValueError: shapes do not match: (4, 8) vs (4, 9)"
    from_cli = cli_json(repo, "check-constraints", "--symptom", symptom)
    async with stdio_client(repo) as client:
        from_mcp = structured(await client.call_tool("check_constraints", {"symptom": symptom}))
    assert from_cli == from_mcp
    assert any("projection weights" in m["title"] for m in from_cli["matches"])


def test_reproduce_exit_codes(repo: Path) -> None:
    """A reproduced failure is a call that worked (0); bad input is 2 with a message, never a traceback."""
    pytest.importorskip("rootcause.tools.engines.reproduce", reason="the reproduce engine is not in this build yet")
    failing = cli(repo, "reproduce", "python -c 'raise SystemExit(3)'", "--runs", "1", "--json")
    assert failing.returncode == 0, failing.stderr
    data = json.loads(failing.stdout)
    assert data["status"] == "reproduced" and data["runs"][0]["exit_code"] == 3
    human = cli(repo, "reproduce", "python -c 'raise SystemExit(3)'", "--runs", "1")
    assert human.returncode == 0 and "reproduced" in human.stdout.lower() and not human.stdout.lstrip().startswith("{")
    empty = cli(repo, "reproduce", " ")
    assert empty.returncode == 2 and "command is empty" in empty.stderr and "Traceback" not in empty.stderr


def test_bad_input_is_exit_2(repo: Path, tmp_path: Path) -> None:
    unknown = cli(repo, "session", "show", "20200101-000000-abcdef")
    assert unknown.returncode == 2 and "unknown session" in unknown.stderr
    malformed = cli(repo, "close-session", "not-a-session")
    assert malformed.returncode == 2 and "malformed" in malformed.stderr
    bad_json = cli(repo, "start-session", "x", "--path-hint", "sideways")
    assert bad_json.returncode == 2 and "invalid choice" in bad_json.stderr
    if "verify_hypothesis" in {s.name for s in _loaded()}:
        proc = cli(repo, "verify-hypothesis", "--session-id", "20200101-000000-abcdef", "--hypothesis", "A or B",
                   "--prediction", "p", "--command", "true", "--expect", "pass", "--changed", "c", "--disproof", "d")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
