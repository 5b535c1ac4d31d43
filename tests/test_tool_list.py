"""What an agent meets first, through the official stdio client: the tool list's size and annotations,
argument errors in our words, sessions as resources, prompt argument errors without a traceback."""

from __future__ import annotations

import json
import os
import re
import shlex
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from mcp.types import INVALID_PARAMS
from rootcause.server.catalog import TOOLS

from tests.conftest import REPO_ROOT, error_text, rootcause_executable, stdio_client, structured

pytestmark = pytest.mark.anyio

# Characters of tools/list as JSON (json.dumps of the result), measured through the stdio client.
MODEL_READS_BUDGET = 25_000  # what the agent reads: names, descriptions, input schemas, annotations
TOOLS_LIST_BUDGET = 62_000  # the whole result, complete output schemas included (60,000 until issues 22-23 added
# collectives, mismatch, group and evidence to the results: output schemas grow, what the agent reads does not)

# (readOnly, destructive, idempotent, openWorld) as a client reads them: a hint the server leaves out means MCP's
# default (not read-only, destructive, not idempotent, open world). A tool that can start a program (a command,
# an interpreter, a codegen check) is never read-only: clients auto-approve read-only tools.
EXPECTED_HINTS = {
    "start_session": (False, False, False, False),
    "reproduce": (False, True, False, True),
    "diagnose_log": (True, False, True, False),
    "check_constraints": (False, True, False, True),
    "bisect_env": (False, True, False, True),
    "bisect_versions": (False, True, False, True),
    "bisect_commits": (False, True, False, True),
    "compare_setups": (False, True, False, True),
    "verify_hypothesis": (False, True, False, True),
    "record_fix_attempt": (False, True, False, True),
    "check_collateral": (False, True, False, True),
    "capture_knowledge": (False, False, True, False),
    "close_session": (False, False, True, False),
    "inspect_checkpoint": (False, True, False, True),
    "analyze_training_log": (True, False, True, False),
}


def as_read(hints) -> tuple[bool, bool, bool, bool]:
    """Annotations as a client takes them: MCP's defaults where a hint is absent; a read-only tool changes nothing."""
    read_only = bool(hints.read_only_hint)
    destructive = False if read_only else hints.destructive_hint is not False
    idempotent = True if read_only else bool(hints.idempotent_hint)
    return read_only, destructive, idempotent, hints.open_world_hint is not False


@asynccontextmanager
async def client_with_stderr(root: Path, stderr: Path):
    from mcp import Client, StdioServerParameters

    serve = shlex.join([rootcause_executable(), "serve", "--root", str(root)])
    command = f"exec {serve} 2>{shlex.quote(str(stderr))}"
    params = StdioServerParameters(command="/bin/sh", args=["-c", command], cwd=str(root), env=dict(os.environ))
    async with Client(params) as client:
        yield client


def tool_list_figures(result: dict) -> dict[str, int]:
    """The tools/list sizes: all of it, what the model reads (everything but outputSchema), the output schemas."""
    reads = [{key: value for key, value in tool.items() if key != "outputSchema"} for tool in result["tools"]]
    total, model_reads = len(json.dumps(result)), len(json.dumps({**result, "tools": reads}))
    return {"total": total, "model_reads": model_reads, "output_schemas": total - model_reads}


async def test_tools_list_within_budget_with_complete_output_schemas(repo: Path) -> None:
    async with stdio_client(repo) as client:
        listed = await client.list_tools()
        glossary = set(re.findall(r"^- (\w+): ", client.instructions or "", re.MULTILINE))
    result = listed.model_dump(mode="json", by_alias=True, exclude_none=True)
    figures = tool_list_figures(result)
    print(f"tools/list {figures}")
    assert figures["model_reads"] <= MODEL_READS_BUDGET, figures
    assert figures["total"] <= TOOLS_LIST_BUDGET, figures
    assert {t["name"] for t in result["tools"]} == {spec.name for spec in TOOLS}
    for tool in result["tools"]:
        assert tool["description"].startswith("Use "), tool["name"]  # when to use it, first
        assert tool["outputSchema"]["type"] == "object" and tool["outputSchema"]["properties"], tool["name"]
        assert all("title" not in prop for prop in tool["inputSchema"]["properties"].values()), tool["name"]
        for which in ("inputSchema", "outputSchema"):
            Draft202012Validator.check_schema(tool[which])
            shared = glossary if which == "inputSchema" else set()
            assert not open_shapes(tool[which], shared) and not dangling_refs(tool[which]), (tool["name"], which)
    reproduce = next(t for t in result["tools"] if t["name"] == "reproduce")
    assert reproduce["inputSchema"]["required"] == ["command"]
    output = reproduce["outputSchema"]
    assert {"status", "runs", "diagnosis", "consistent"} <= set(output["properties"])
    assert output["properties"]["runs"]["items"] == {"$ref": "#/$defs/Observation"}
    assert {"run_id", "outcome", "exit_code", "signal", "duration_s", "signature", "log_path"} <= set(
        output["$defs"]["Observation"]["properties"])
    assert {"$ref": "#/$defs/Diagnosis"} in output["properties"]["diagnosis"]["anyOf"]
    assert {"category", "exception_type", "signature", "location", "frames", "ranks", "stacks", "excerpt"} <= set(
        output["$defs"]["Diagnosis"]["properties"])


def open_shapes(schema: dict, glossary: set[str] = frozenset(), path: str = "") -> list[str]:
    """Shapes left open: an array without items, an object naming neither its fields nor its values.

    An argument the server's instructions spell out once for several tools (slurm, reference) is a plain
    object in each tool's inputSchema: `glossary` names the arguments allowed to be.
    """
    found = []
    if isinstance(schema, dict):
        kinds = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
        if "array" in kinds and "items" not in schema:
            found.append(path)
        if "object" in kinds and not {"properties", "additionalProperties"} & set(schema) and path and \
                path.removeprefix("/properties/") not in glossary:
            found.append(path)
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for name, sub in value.items():
                    found += open_shapes(sub, glossary, f"{path}/{key}/{name}")
            elif isinstance(value, dict):
                found += open_shapes(value, glossary, f"{path}/{key}")
            elif isinstance(value, list):
                for index, sub in enumerate(value):
                    found += open_shapes(sub, glossary, f"{path}/{key}/{index}")
    return found


def dangling_refs(schema: dict) -> list[str]:
    text = json.dumps(schema)
    refs = set(re.findall(r'"\$ref": "#/\$defs/([^"]+)"', text))
    return sorted(refs - set(schema.get("$defs", {})))


async def test_every_tool_is_annotated_as_it_behaves(repo: Path) -> None:
    async with stdio_client(repo) as client:
        listed = await client.list_tools()
    for tool in listed.tools:
        hints = tool.annotations
        assert hints is not None and hints.read_only_hint is not None, tool.name  # always said, never implied
        assert as_read(hints) == EXPECTED_HINTS[tool.name], tool.name


async def test_the_tools_that_started_programs_as_read_only_are_not(repo: Path) -> None:
    """Issue 24's two cases, for real: check_constraints runs its codegen command and inspect_checkpoint runs its
    python= executable; both were readOnlyHint: true, which clients auto-approve."""
    import zipfile

    fake_python = repo / "fake-python"
    fake_python.write_text("#!/bin/sh\ntouch interpreter-ran\nexit 3\n")
    fake_python.chmod(0o755)
    with zipfile.ZipFile(repo / "ok.pt", "w") as archive:  # a torch.save file's shape
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("archive/version", "3\n")
    async with stdio_client(repo) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        await client.call_tool("check_constraints", {"symptom": "x", "check_codegen": True,
                                                     "codegen_command": "touch codegen-ran"})
        await client.call_tool("inspect_checkpoint", {"path": "ok.pt", "python": "./fake-python"})
    assert (repo / "codegen-ran").exists() and (repo / "interpreter-ran").exists()
    for name in ("check_constraints", "inspect_checkpoint", "compare_setups"):
        assert tools[name].annotations.read_only_hint is False, name
        assert as_read(tools[name].annotations) == (False, True, False, True), name


@pytest.fixture(scope="module")
def call_graph():
    from rootcause.server.effects import CallGraph

    return CallGraph(REPO_ROOT)


def _chain(found: list[str] | None) -> str:
    return " -> ".join(k.removeprefix("rootcause.tools.") for k in found or [])


def test_declared_effects_are_what_the_engines_can_reach(call_graph) -> None:
    """The annotations follow from each tool's declared effects (catalog.Effects.hints); the declarations are
    checked here against the engine's code, both ways: reaching the process runner means declaring the program it
    starts, and declaring one means its code can reach it."""
    from rootcause.server.effects import engine_reach

    for spec in TOOLS:
        reach = engine_reach(REPO_ROOT, spec.name, call_graph)
        if reach.spawns:
            assert spec.effects.starts, f"{spec.name} can start a program: {_chain(reach.spawns)}"
        else:
            assert not spec.effects.starts, f"{spec.name} declares it starts {spec.effects.starts}; its code cannot"
        assert spec.effects.network == bool(reach.network), (spec.name, _chain(reach.network))
        assert ("knowledge" in spec.effects.writes) == bool(reach.knowledge_write), (
            spec.name, _chain(reach.knowledge_write))
        assert spec.hints.read_only == (not spec.effects.starts and not spec.effects.writes), spec.name


def test_only_the_runner_starts_programs(call_graph) -> None:
    """Every call that starts a process is in tools/run/ (the runner, its guardian, stacks and Slurm helpers) or
    is git's (core/gitrepo.py): an engine that started one some other way would escape the check above."""
    from rootcause.server.effects import GIT

    sites = call_graph.spawn_sites()
    assert any(key.startswith("rootcause.tools.run.process:") for key in sites), sites
    assert all(key.startswith(("rootcause.tools.run.", f"{GIT}:")) for key in sites), sites


ENGINE_OF_A_TOOL = {
    "run/__init__.py": "from rootcause.tools.run.process import RunRecord, run_captured\n",
    "run/process.py": ("import asyncio\n\nclass RunRecord:\n    exit_code: int = 0\n\n"
                       "async def run_captured(argv):\n    return await asyncio.create_subprocess_exec(*argv)\n"),
    "record/store.py": ("class Store:\n    def record(self, what):\n        return what\n\n"
                        "def open_store():\n    return Store()\n"),
    "judge/probe.py": ("class Probe:\n    def record(self, argv):\n"
                       "        from rootcause.tools.run import run_captured\n        return run_captured(argv)\n"),
    "engines/reads.py": ("from rootcause.tools.record.store import open_store\n"
                         "from rootcause.tools.run.process import RunRecord\n\n"
                         "def reads(inp, ctx) -> RunRecord:\n    return open_store().record(inp)\n"),
    "engines/lazy.py": ("def lazy(inp, ctx):\n    from rootcause.tools.run import run_captured\n"
                        "    return run_captured([])\n"),
    "engines/method.py": ("from rootcause.tools.judge.probe import Probe\n\n"
                          "def method(inp, ctx):\n    probe = [Probe][0]()\n    return inp.store.record(['x'])\n"),
    "engines/callback.py": ("import anyio\nfrom rootcause.tools.run import process\n\n"
                            "async def callback(inp, ctx):\n"
                            "    return await anyio.to_thread.run_sync(process.run_captured, [])\n"),
}


def test_the_reach_analysis_follows_every_way_code_calls_code(tmp_path: Path) -> None:
    """A lazy import, a method of an object whose type the caller does not name, a callback handed to a thread,
    a package's re-export: each reaches the runner. Naming a model of the runner's module, or calling a method
    that only a class of another family defines, does not."""
    from rootcause.server.effects import CallGraph, engine_reach

    for relative, text in ENGINE_OF_A_TOOL.items():
        path = tmp_path / "tools" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    graph = CallGraph(tmp_path)
    assert engine_reach(tmp_path, "reads", graph).spawns is None
    for tool in ("lazy", "method", "callback"):
        found = engine_reach(tmp_path, tool, graph).spawns
        assert found and found[-1] == "asyncio.create_subprocess_exec", (tool, found)


async def test_structured_output_still_validates(repo: Path) -> None:
    """The client checks structuredContent against the compact outputSchema."""
    log = repo / "job.log"
    log.write_text('Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
                   "ValueError: shapes (4,) and (5,) not aligned\n")
    async with stdio_client(repo) as client:
        await client.list_tools()
        data = structured(await client.call_tool("diagnose_log", {"path": "job.log"}))
    assert data["diagnosis"]["exception_type"] == "ValueError"


@pytest.mark.parametrize(("arguments", "expected"), [
    ({}, "reproduce: command is required: text or a list of text."),
    ({"command": "true", "runs": "twice"}, "reproduce: runs takes an integer"),
    ({"command": "true", "timeout_s": "nan"}, "reproduce: timeout_s must be a finite number, not nan"),
    ({"command": "true", "timeout_s": 99999999999}, "reproduce: timeout_s must be > 0 seconds and at most 604800 "
                                                    "(7 days), not 1e+11."),
    ({"command": "true", "timeout_s": -1}, "reproduce: timeout_s must be > 0 seconds and at most 604800"),
    # JSON has no infinity: the client sends 1e309 as null, and the answer says what it takes
    ({"command": "true", "timeout_s": float("inf")}, "reproduce: timeout_s takes a number > 0 and <= 604800 seconds "
                                                     "(7 days at most), not null: not a finite number"),
    ({"command": "true", "env": ["A=1"]}, "reproduce: env takes an object of NAME: text"),
])
async def test_argument_errors_in_our_words_over_mcp(repo: Path, arguments: dict, expected: str) -> None:
    async with stdio_client(repo) as client:
        text = error_text(await client.call_tool("reproduce", arguments))
    assert text.startswith(expected), text
    assert "pydantic" not in text and "validation error" not in text and "Error executing tool" not in text
    assert not (repo / ".rootcause" / "runs").exists()  # refused before anything ran


async def test_sessions_are_listed_as_resources_newest_first(repo: Path) -> None:
    async with stdio_client(repo) as client:
        first = structured(await client.call_tool("start_session", {"symptom": "loss is NaN after step 40"}))
        second = structured(await client.call_tool("start_session", {"symptom": "DataLoader worker hangs"}))
        resources = (await client.list_resources()).resources
        sessions = [r for r in resources if str(r.uri).startswith("rootcause://sessions/")]
        assert [str(r.uri) for r in sessions][:2] == [f"rootcause://sessions/{second['session_id']}",
                                                      f"rootcause://sessions/{first['session_id']}"]
        assert sessions[0].description == "DataLoader worker hangs"
        report = await client.read_resource(sessions[1].uri)
        assert "loss is NaN after step 40" in report.contents[0].text


async def test_prompt_argument_errors_answer_without_a_traceback(repo: Path, tmp_path: Path) -> None:
    from mcp.shared.exceptions import MCPError

    stderr = tmp_path / "server-stderr.txt"
    async with client_with_stderr(repo, stderr) as client:
        with pytest.raises(MCPError, match="prompt debug_protocol does not take colour; it takes: symptom"):
            await client.get_prompt("debug_protocol", {"symptom": "hang", "colour": "red"})
        with pytest.raises(MCPError, match="prompt debug_protocol needs symptom"):
            await client.get_prompt("debug_protocol", {})
        with pytest.raises(MCPError, match="unknown prompt 'nope'; the prompts are: debug_protocol") as caught:
            await client.get_prompt("nope", {})
        assert caught.value.error.code == INVALID_PARAMS
        rendered = await client.get_prompt("debug_protocol", {"symptom": "hang at step 3"})
        assert "hang at step 3" in rendered.messages[0].content.text
    assert stderr.read_text() == ""  # answered as errors: no traceback, no log line


async def test_unknown_tools_and_resources_answer_in_our_words(repo: Path, tmp_path: Path) -> None:
    """The low-level server leaves these to us: an isError result naming the tools, invalid params naming the
    resources, a malformed id refused before any file is opened; nothing on the server's stderr."""
    from mcp.shared.exceptions import MCPError

    stderr = tmp_path / "server-stderr.txt"
    async with client_with_stderr(repo, stderr) as client:
        text = error_text(await client.call_tool("reproduce_it", {"command": "true"}))
        assert text.startswith("unknown tool 'reproduce_it'; the tools are: start_session, reproduce,"), text
        with pytest.raises(MCPError, match=re.escape("unknown resource 'rootcause://nope'; the resources are: "
                                                     "rootcause://sessions/{session_id}")) as caught:
            await client.read_resource("rootcause://nope")
        assert caught.value.error.code == INVALID_PARAMS
        with pytest.raises(MCPError, match="malformed resource") as caught:
            await client.read_resource("rootcause://runs/..%2F..%2Fetc/log")
        assert caught.value.error.code == INVALID_PARAMS
        with pytest.raises(MCPError, match="unknown run 'r1'") as caught:
            await client.read_resource("rootcause://runs/r1/log")
        assert caught.value.error.code == INVALID_PARAMS
        templates = (await client.list_resource_templates()).resource_templates
        assert {t.uri_template: t.mime_type for t in templates} == {
            "rootcause://sessions/{session_id}": "text/markdown", "rootcause://runs/{run_id}/log": "text/plain"}
    assert stderr.read_text() == ""


async def test_durations_are_bounded_and_single_typed_in_the_schema(repo: Path) -> None:
    """Every *_s argument is > 0 and at most 7 days; no argument uses a type list (portable schemas)."""
    async with stdio_client(repo) as client:
        tools = (await client.list_tools()).tools
    durations = 0
    for tool in tools:
        for name, prop in tool.input_schema["properties"].items():
            assert not isinstance(prop.get("type"), list), (tool.name, name, prop)
            if name.endswith("_s"):
                durations += 1
                assert prop["exclusiveMinimum"] == 0 and prop["maximum"] == 7 * 24 * 3600, (tool.name, name)
    assert durations >= 10  # timeout_s, idle_timeout_s, setup_timeout_s of the tools that run commands
    reproduce = next(t for t in tools if t.name == "reproduce")
    assert reproduce.input_schema["properties"]["command"]["anyOf"] == [
        {"type": "string", "maxLength": 100_000},
        {"type": "array", "items": {"type": "string", "maxLength": 100_000}, "maxItems": 1000}]
