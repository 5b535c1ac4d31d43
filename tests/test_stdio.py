"""The real thing: `rootcause serve` as a subprocess, driven by the official MCP stdio client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import error_text, rootcause_executable, stdio_client, structured

pytestmark = pytest.mark.anyio


async def test_stdio_session_prompts_and_resource(repo: Path) -> None:
    async with stdio_client(repo) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "start_session" in names
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert prompts == {"debug_protocol", "quick_path", "verification_subagent", "distributed_checklist",
                           "numerical_checklist"}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "rootcause://sessions/{session_id}" in templates
        data = structured(await client.call_tool("start_session", {"symptom": "rank 0 hangs in barrier"}))
        assert data["path"] == "full" and data["category"] == "hang"
        report = (await client.read_resource(f"rootcause://sessions/{data['session_id']}")).contents[0].text
        assert "rank 0 hangs in barrier" in report
        assert "symptom is empty" in error_text(await client.call_tool("start_session", {"symptom": " "}))
        rendered = await client.get_prompt("verification_subagent", {"conclusion": "C1", "evidence": "E1"})
        assert "C1" in rendered.messages[0].content.text and "E1" in rendered.messages[0].content.text


async def test_server_starts_inside_repo_with_server_and_tools_folders(repo: Path) -> None:
    """A user's repository with its own server/ and tools/ packages must not shadow ours."""
    for name in ("server", "tools", "prompts"):
        (repo / name).mkdir()
        (repo / name / "__init__.py").write_text("raise ImportError('shadowed: the user package was imported')\n")
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("start_session", {"symptom": "ValueError: bad"}))
        assert data["category"] == "python_exception"


async def test_decoy_packages_on_pythonpath_do_not_shadow_rootcause(repo: Path, tmp_path: Path) -> None:
    """mmdetection, Megatron-LM and PyTorch ship a top-level tools/, and ML repos run with PYTHONPATH=.: decoy
    tools/, server/ and prompts/ packages first on PYTHONPATH and in the working directory change nothing."""
    from mcp import Client, StdioServerParameters

    decoys = tmp_path / "decoys"
    for where in (decoys, repo):
        for name in ("server", "tools", "prompts"):
            (where / name).mkdir(parents=True, exist_ok=True)
            (where / name / "__init__.py").write_text(f"raise ImportError('decoy {name} imported from {where}')\n")
            (where / name / "catalog.py").write_text("raise ImportError('decoy module imported')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(decoys), str(repo), os.environ.get("PYTHONPATH", "")])}
    params = StdioServerParameters(command=rootcause_executable(), args=["serve", "--root", str(repo)],
                                   cwd=str(repo), env=env)
    async with Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"reproduce", "diagnose_log", "start_session"} <= names
        data = structured(await client.call_tool("diagnose_log", {"text": "ValueError: bad shape\n"}))
        assert data["diagnosis"]["exception_type"] == "ValueError"
        ran = structured(await client.call_tool("reproduce", {"command": "python -c 'import sys; sys.exit(3)'",
                                                              "runs": 1}))
        assert ran["runs"][0]["exit_code"] == 3


def test_installed_rootcause_provides_no_bare_top_level_modules() -> None:
    """Only `rootcause` comes from an installed rootcause: no bare server, tools or prompts."""
    from importlib.metadata import distribution

    dist = distribution("rootcause")
    tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith(("..", "/"))}
    tops = {t.removesuffix(".py") for t in tops if not t.endswith((".dist-info", ".pth"))}
    assert not tops & {"server", "tools", "prompts"}, tops
    import rootcause.tools

    assert Path(rootcause.tools.__file__).parent.name == "tools"


def test_cli_session_start_and_show_match_tools(repo: Path) -> None:
    exe = rootcause_executable()
    started = subprocess.run([exe, "--root", str(repo), "session", "start", "loss is NaN", "--json"],
                             capture_output=True, text=True, check=True)
    data = json.loads(started.stdout)
    assert data["category"] == "nonfinite"
    shown = subprocess.run([exe, "--root", str(repo), "session", "show", data["session_id"]],
                           capture_output=True, text=True, check=True)
    assert shown.stdout.startswith(f"# rootcause session {data['session_id']}")
    bad = subprocess.run([exe, "--root", str(repo), "session", "show", "20200101-000000-abcdef"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown session" in bad.stderr


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
@pytest.mark.parametrize("method", ["tools/list", "prompts/list"])
def test_mcp_inspector_cli(repo: Path, method: str) -> None:
    proc = subprocess.run(
        ["npx", "-y", "@modelcontextprotocol/inspector@2.12.0", "--cli", rootcause_executable(), "serve",
         "--root", str(repo), "--method", method],
        capture_output=True, text=True, timeout=240, cwd=repo,
    )
    if proc.returncode != 0 and "ENOTFOUND" in proc.stderr + proc.stdout:
        pytest.skip("npm registry unreachable")
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = json.loads(proc.stdout)
    key = method.split("/")[0]
    names = {item["name"] for item in listed[key]}
    assert ("start_session" if key == "tools" else "debug_protocol") in names


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
def test_mcp_inspector_strict_finds_no_input_schema_warning(repo: Path) -> None:
    """Input schemas are portable (one type per anyOf branch); output schemas keep nullable type lists
    to stay within the tools/list budget (docs/install.md says why)."""
    proc = subprocess.run(
        ["npx", "-y", "@modelcontextprotocol/inspector@2.12.0", "--cli", rootcause_executable(), "serve",
         "--root", str(repo), "--method", "tools/list", "--strict"],
        capture_output=True, text=True, timeout=240, cwd=repo,
    )
    if proc.returncode != 0 and "ENOTFOUND" in proc.stderr + proc.stdout:
        pytest.skip("npm registry unreachable")
    assert proc.returncode == 0, proc.stderr[-2000:]
    paths = [line.split("Path:", 1)[1].strip() for line in proc.stderr.splitlines() if "Path:" in line]
    assert not [p for p in paths if p.startswith("inputSchema")], proc.stderr[-3000:]
    assert {t["name"] for t in json.loads(proc.stdout)["tools"]} >= {"reproduce", "start_session"}
