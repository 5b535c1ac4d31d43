"""A surface that cannot be wedged (issue 24), through `rootcause serve` as a subprocess: every string and list
argument has a limit in its schema and a longer one is refused before anything parses it, parsing and redaction
are linear, the event loop answers while a call works, unknown argument names and true-for-a-number are refused,
and the edges of the transport (a line that is no JSON, arguments as a list, a client that vanishes) get answers
instead of silence or tracebacks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from tests.conftest import error_text, rootcause_executable, stdio_client, structured

pytestmark = pytest.mark.anyio
# Not a speed goal (bench/bench_limits.py measures those): a bound that the quadratic code of before blew by
# minutes (shlex took 134 s for 3,000,000 characters; redacting 20,000 characters of `a-a-...` took 74 s).
WEDGED_S = 60


def _open_shapes_without_limits(node, path: str = "") -> list[str]:
    found = []
    if isinstance(node, dict):
        kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        if "string" in kinds and "maxLength" not in node:
            found.append(path)
        if "array" in kinds and "maxItems" not in node:
            found.append(path)
        if "object" in kinds and isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node:
            found.append(path)
        for key, value in node.items():
            if isinstance(value, dict):
                found += _open_shapes_without_limits(value, f"{path}/{key}")
            elif isinstance(value, list):
                found += [p for i, v in enumerate(value) for p in _open_shapes_without_limits(v, f"{path}/{key}/{i}")]
    return found


async def test_every_string_and_list_argument_states_its_limit(repo: Path) -> None:
    async with stdio_client(repo) as client:
        tools = (await client.list_tools()).tools
        glossary = client.instructions or ""
    for tool in tools:
        assert _open_shapes_without_limits(tool.input_schema) == [], tool.name
    # objects several tools share are spelled out once, in the instructions: their text fields state limits too
    slurm = next(line for line in glossary.splitlines() if line.startswith("- slurm: "))
    assert "partition (text of at most 4,096 characters)" in slurm
    assert "extra_args (a list of at most 32 entries, each text of at most 4,096 characters)" in slurm


async def test_a_3_000_000_character_command_is_refused_while_other_requests_are_answered(repo: Path) -> None:
    """The refusal names the limit; a request sent meanwhile (tools/list: this client speaks the protocol version
    without ping) is answered rather than queued behind the parse. bench/bench_limits.py times both."""
    answered: dict[str, object] = {}
    async with stdio_client(repo) as client:
        await client.list_tools()
        started = time.monotonic()

        async def call() -> None:
            answered["text"] = error_text(await client.call_tool("reproduce", {"command": "x" * 3_000_000}))
            answered["call"] = time.monotonic() - started

        async def other() -> None:
            await anyio.sleep(0.05)
            await client.list_tools()
            answered["other"] = time.monotonic() - started

        with anyio.fail_after(WEDGED_S):
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                group.start_soon(other)
    assert answered["text"] == "reproduce: command is 3,000,000 characters long; it takes at most 100,000.", answered
    assert not (repo / ".rootcause" / "runs").exists()
    print(f"refused after {answered['call']:.3f} s, tools/list answered after {answered['other']:.3f} s")


async def test_parsing_and_redaction_stay_linear_on_hostile_text(repo: Path) -> None:
    """An 80,000-character word of `a-a-...` (under the command limit): split, not found, its error redacted."""
    word = "a-" * 40_000
    async with stdio_client(repo) as client:
        with anyio.fail_after(WEDGED_S):
            text = error_text(await client.call_tool("reproduce", {"command": f"{word} --flag 'quoted arg'"}))
            data = structured(await client.call_tool("diagnose_log", {"text": ("a-" * 100_000 + "\n") * 5}))
    assert text.startswith("command not found: a-a-a-")
    assert data["log_bytes"] == 1_000_005


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"command": "sleep 5", "timout_s": 1}, "reproduce: unknown argument 'timout_s'; did you mean 'timeout_s'?"),
    ({"command": "sleep 5", "runs": True}, "reproduce: runs takes an integer from 1 to 20, not true."),
    ({"command": "sleep 5", "launcher": "slurm", "slurm": {"nodez": 2}},
     "reproduce: unknown field 'nodez' in slurm; did you mean 'nodes'?"),
    ({"command": "sleep 5", "slurm": {"nodes": False}}, "reproduce: slurm.nodes takes an integer from 1 to 4096, "
                                                        "not false."),
    ({"command": "sleep 5", "colour": "red"}, "reproduce: unknown argument 'colour'; it takes command, timeout_s,"),
    ({"command": ["sleep", "5"] * 600}, "reproduce: command has 1,200 entries; it takes at most 1,000."),
])
async def test_unknown_names_and_booleans_for_numbers_are_refused(repo: Path, arguments: dict, expected: str) -> None:
    async with stdio_client(repo) as client:
        text = error_text(await client.call_tool("reproduce", arguments))
    assert text.startswith(expected), text
    assert not (repo / ".rootcause" / "runs").exists()  # refused before anything ran


async def test_a_long_id_is_refused_without_being_echoed(repo: Path) -> None:
    async with stdio_client(repo) as client:
        text = error_text(await client.call_tool("close_session", {"session_id": "x" * 10_000}))
    assert text == "close_session: session_id is 10,000 characters long; it takes at most 64."


async def test_a_binary_file_is_not_diagnosed_as_a_log(repo: Path) -> None:
    (repo / "model.bin").write_bytes(bytes(range(256)) * 64)
    async with stdio_client(repo) as client:
        text = error_text(await client.call_tool("diagnose_log", {"path": "model.bin"}))
    assert "is a binary file, not a log" in text and "\\x00" not in text and "\x00" not in text


class RawServer:
    """`rootcause serve` spoken to line by line, as a client's bytes reach it."""

    def __init__(self, root: Path, stderr: Path) -> None:
        self.stderr_path = stderr
        self.proc = subprocess.Popen([rootcause_executable(), "serve", "--root", str(root)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=stderr.open("wb"))
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "raw", "version": "0"}}})
        assert self.reply()["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict | str) -> None:
        assert self.proc.stdin is not None
        line = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def reply(self) -> dict:
        assert self.proc.stdout is not None
        while True:
            message = json.loads(self.proc.stdout.readline())
            if "id" in message:  # not a notification
                return message


def test_lines_that_are_no_json_rpc_get_their_error(repo: Path, tmp_path: Path) -> None:
    server = RawServer(repo, tmp_path / "stderr.txt")
    try:
        server.send("this is not JSON")
        assert server.reply() == {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32700, "message": "Parse error: the line is not JSON; send one JSON-RPC message per line."}}
        server.send('{"hello": "world"}')
        assert server.reply()["error"]["code"] == -32600
        server.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                     "params": {"name": "reproduce", "arguments": ["pytest", "-x"]}})
        refused = server.reply()
        assert refused["id"] == 7 and refused["error"]["code"] == -32602
        assert refused["error"]["message"] == ('tools/call: arguments must be an object of argument names and values '
                                               '(e.g. {"command": "pytest -x"}), not a list.')
        server.send({"jsonrpc": "2.0", "id": 8, "method": "ping"})
        assert server.reply() == {"jsonrpc": "2.0", "id": 8, "result": {}}  # still serving
    finally:
        server.proc.stdin.close()
        server.proc.wait(30)
    assert (tmp_path / "stderr.txt").read_text() == ""


def test_a_client_that_vanishes_ends_the_server_quietly(repo: Path, tmp_path: Path) -> None:
    """The client dies (SIGKILL closes both its pipe ends) while a run prints progress: the server tears the run
    down and exits 0, with nothing on stderr (it printed a 64-line ExceptionGroup traceback)."""
    import psutil

    marker = f"vanish-{os.getpid()}-{time.time_ns()}"
    server = RawServer(repo, tmp_path / "stderr.txt")
    server.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "reproduce", "_meta": {"progressToken": 1},
        "arguments": {"command": "python -c 'import time\nfor i in range(600): print(i, flush=True); time.sleep(0.1)'",
                      "runs": 1, "env": {"VANISH_MARKER": marker}}}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _marked(marker):
        time.sleep(0.05)
    assert _marked(marker), "the run never started"
    time.sleep(0.5)
    assert server.proc.stdout is not None and server.proc.stdin is not None
    server.proc.stdout.close()  # what a killed client does to both ends of the connection
    server.proc.stdin.close()
    assert server.proc.wait(30) == 0
    assert (tmp_path / "stderr.txt").read_text() == ""
    gone = time.monotonic() + 10
    while time.monotonic() < gone and _marked(marker):
        time.sleep(0.1)
    assert not _marked(marker), [p.cmdline() for p in map(psutil.Process, _marked(marker))]


def _marked(marker: str) -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("VANISH_MARKER") == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_the_limits_table_names_real_arguments() -> None:
    """server/limits.yaml names arguments some tool takes (a typo there would silently leave the default)."""
    import yaml
    from rootcause.server.schemas import tool_schemas

    table = yaml.safe_load((Path(__file__).resolve().parent.parent / "server" / "limits.yaml").read_text())
    names = {name for schema in tool_schemas()["tools"].values()
             for properties in [schema["input"]["properties"],
                                *(d.get("properties", {}) for d in schema["input"].get("$defs", {}).values())]
             for name in properties}
    assert set(table) - {"default"} <= names, sorted(set(table) - {"default"} - names)
    assert all(re.fullmatch(r"\w+", name) for name in table)
