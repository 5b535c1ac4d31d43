"""`rootcause install`: client configs written and merged, the skill installed, the command really serving."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rootcause.tools.ecosystem import install as inst

from tests.conftest import REPO_ROOT, rootcause_executable

CONFIGS = {"claude": (".mcp.json", "mcpServers"), "cursor": (".cursor/mcp.json", "mcpServers"),
           "vscode": (".vscode/mcp.json", "servers")}
TRIGGERS = ["bug", "error", "crash", "wrong output", "loss NaN", "gradient explosion", "test failure", "CUDA error",
            "training hangs", "FSDP error", "OOM", "checkpoint load failure"]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([rootcause_executable(), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


def entry_of(repo: Path, client: str) -> dict:
    config, key = CONFIGS[client]
    return json.loads((repo / config).read_text())[key]["rootcause"]


# ---------------------------------------------------------------- the skill


def test_skill_copies_identical_and_valid() -> None:
    source = REPO_ROOT / ".agents" / "skills" / "rootcause-debug" / "SKILL.md"
    shipped = REPO_ROOT / "tools" / "ecosystem" / "skill" / "SKILL.md"
    assert source.read_bytes() == shipped.read_bytes(), "tools/skill/SKILL.md must be a copy of the repo's skill"
    meta, body = inst.split_frontmatter(source.read_text())
    assert meta["name"] == source.parent.name == inst.SKILL_NAME
    assert len(meta["description"]) <= 1024
    for trigger in TRIGGERS:
        assert trigger.lower() in meta["description"].lower(), trigger
    for tool in ("start_session", "reproduce", "check_constraints", "verify_hypothesis", "record_fix_attempt",
                 "capture_knowledge", "close_session"):
        assert f"`{tool}`" in body, tool
    assert inst.skill_text() == source.read_text()


# ---------------------------------------------------------------- each client


@pytest.mark.parametrize("client", ["claude", "cursor", "vscode"])
def test_install_writes_valid_config_and_skill(repo: Path, client: str) -> None:
    proc = cli("install", "--client", client, "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr
    config, key = CONFIGS[client]
    data = json.loads((repo / config).read_text())
    assert list(data) == [key]
    entry = data[key]["rootcause"]
    assert entry["command"] == rootcause_executable()
    assert entry["args"] == ["serve", "--root", str(repo.resolve())]
    if client == "vscode":
        assert entry["type"] == "stdio"
    assert f"created       {config}" in proc.stdout
    written = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts)
    if client == "claude":
        skill = repo / ".claude/skills/rootcause-debug/SKILL.md"
        assert skill.read_text() == inst.skill_text()
        assert written == [".claude/skills/rootcause-debug/SKILL.md", ".mcp.json", "README.md"]
    elif client == "cursor":
        rule = (repo / ".cursor/rules/rootcause-debug.mdc").read_text()
        head, _, body = rule[4:].partition("\n---\n")
        meta = yaml.safe_load(head)
        assert meta["alwaysApply"] is False and "globs" in meta
        for trigger in TRIGGERS:
            assert trigger.lower() in meta["description"].lower(), trigger
        assert "`start_session`" in body and not body.lstrip().startswith("---")
        assert written == [".cursor/mcp.json", ".cursor/rules/rootcause-debug.mdc", "README.md"]
    else:
        assert (repo / ".github/skills/rootcause-debug/SKILL.md").read_text() == inst.skill_text()
        assert written == [".github/skills/rootcause-debug/SKILL.md", ".vscode/mcp.json", "README.md"]



@pytest.mark.anyio
@pytest.mark.parametrize("client", ["claude", "cursor", "vscode"])
async def test_configured_command_serves_tools_list(repo: Path, client: str) -> None:
    """Spawn exactly the command and args written into the client's file, as the client would."""
    from mcp import Client, StdioServerParameters

    assert cli("install", "--client", client, "--repo", str(repo)).returncode == 0
    entry = entry_of(repo, client)
    # A client starts the server from wherever it likes: not from the repository.
    params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd="/",
                                   env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/")})
    async with Client(params) as client_session:
        names = {t.name for t in (await client_session.list_tools()).tools}
        assert "start_session" in names
        started = await client_session.call_tool("start_session", {"symptom": "ValueError: bad shape"})
        assert not started.is_error
    sessions = list((repo / ".rootcause" / "sessions").iterdir())
    assert len(sessions) == 1, "the session must be stored in the --root repository"


# ---------------------------------------------------------------- idempotence, merge, refusal


def test_install_twice_is_byte_identical(repo: Path) -> None:
    assert cli("install", "--client", "all", "--repo", str(repo)).returncode == 0
    first = snapshot(repo)
    mtimes = {p: p.stat().st_mtime_ns for p in repo.rglob("*") if p.is_file()}
    second = cli("install", "--client", "all", "--repo", str(repo))
    assert second.returncode == 0
    assert snapshot(repo) == first
    assert {p: p.stat().st_mtime_ns for p in repo.rglob("*") if p.is_file()} == mtimes, "files were rewritten"
    assert "nothing to do" in second.stdout
    assert all(c.action == "unchanged" for c in inst.plan_install(repo.resolve(), list(inst.CLIENTS)).changes)


def test_merge_keeps_other_servers_and_user_fields(repo: Path) -> None:
    other = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"fs": other}, "extra": {"keep": True}}, indent=4))
    (repo / ".vscode").mkdir()
    stale = {"type": "stdio", "command": "/old/rootcause", "args": ["serve"], "env": {"NCCL_DEBUG": "INFO"}}
    (repo / ".vscode/mcp.json").write_text(json.dumps({"inputs": [], "servers": {"rootcause": stale, "git": other}}))
    proc = cli("install", "--client", "all", "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr
    claude = json.loads((repo / ".mcp.json").read_text())
    assert claude["mcpServers"]["fs"] == other and claude["extra"] == {"keep": True}
    assert list(claude["mcpServers"]) == ["fs", "rootcause"]
    vscode = json.loads((repo / ".vscode/mcp.json").read_text())
    assert vscode["inputs"] == [] and vscode["servers"]["git"] == other
    ours = vscode["servers"]["rootcause"]
    assert ours["command"] == rootcause_executable() and ours["env"] == {"NCCL_DEBUG": "INFO"}
    assert "updated       .vscode/mcp.json" in proc.stdout
    before = snapshot(repo)
    assert cli("install", "--client", "all", "--repo", str(repo)).returncode == 0
    assert snapshot(repo) == before


@pytest.mark.parametrize(("text", "error"), [
    ('{"mcpServers": {"fs": {"command": "x",}}}', "is not valid JSON"),
    ("[1, 2]", "holds a JSON list, not an object"),
    ('{"mcpServers": ["x"]}', "'mcpServers' is not a JSON object"),
])
def test_malformed_config_refused_and_untouched(repo: Path, text: str, error: str) -> None:
    (repo / ".mcp.json").write_text(text)
    proc = cli("install", "--client", "all", "--repo", str(repo))
    assert proc.returncode == 2
    assert ".mcp.json" in proc.stderr and error in proc.stderr, proc.stderr
    assert "left untouched" in proc.stderr and '"rootcause"' in proc.stderr  # the entry to add by hand
    assert (repo / ".mcp.json").read_text() == text
    assert not (repo / ".cursor").exists() and not (repo / ".vscode").exists(), "nothing written on a refusal"


def test_json_error_position_is_reported(repo: Path) -> None:
    (repo / ".vscode").mkdir()
    (repo / ".vscode/mcp.json").write_text('{\n  "servers": {\n    "a": [1 2]\n  }\n}\n')
    proc = cli("install", "--client", "vscode", "--repo", str(repo))
    assert proc.returncode == 2
    assert ".vscode/mcp.json is not valid JSON with comments (line 3" in proc.stderr, proc.stderr
    assert "left untouched" in proc.stderr


VSCODE_JSONC = """{
  // Servers for this workspace (kept by rootcause install)
  "servers": {
    "git": {
      "type": "stdio",
      "command": "uvx",
      "args": ["mcp-server-git"], // trailing comma next line
    },
    /* the filesystem server, off for now */
  },
  "inputs": [],
}
"""


def test_vscode_jsonc_keeps_comments_and_other_servers(repo: Path) -> None:
    """VS Code reads mcp.json as JSON with comments and trailing commas: so do we, and we edit in place."""
    import json5

    (repo / ".vscode").mkdir()
    config = repo / ".vscode/mcp.json"
    config.write_text(VSCODE_JSONC)
    proc = cli("install", "--client", "vscode", "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr
    text = config.read_text()
    for line in VSCODE_JSONC.splitlines():
        assert line in text, line  # every comment, trailing comma and server line is still there
    data = json5.loads(text)
    assert data["servers"]["git"]["args"] == ["mcp-server-git"] and data["inputs"] == []
    assert data["servers"]["rootcause"] == {"type": "stdio", "command": rootcause_executable(),
                                            "args": ["serve", "--root", str(repo.resolve())]}
    before = config.read_bytes()
    assert "nothing to do" in cli("install", "--client", "vscode", "--repo", str(repo)).stdout
    assert config.read_bytes() == before
    # an outdated entry of ours is replaced where it stands; the comment after it stays
    config.write_text(text.replace(rootcause_executable(), "/old/bin/rootcause").replace(
        '"type": "stdio",\n      "command": "/old', '"type": "stdio", // ours\n      "command": "/old', 1))
    assert cli("install", "--client", "vscode", "--repo", str(repo)).returncode == 0
    updated = config.read_text()
    assert "/old/bin/rootcause" not in updated and "// trailing comma next line" in updated
    assert json5.loads(updated)["servers"]["rootcause"]["command"] == rootcause_executable()


@pytest.mark.parametrize("text", [
    '{"servers": {"a": {"command": "x"}, }, }',  # one line, trailing commas in both objects (issue 24)
    '{"servers": {"a": {"command": "x"},},}',
    '{"inputs": [], }',  # no servers object yet
    '{"servers": {}, } // nothing yet',
])
def test_vscode_jsonc_on_one_line_with_trailing_commas(repo: Path, text: str) -> None:
    """The one-line form VS Code accepts installs like the multi-line one: the entry joins the line, the user's
    bytes stay, the result parses to the merged config."""
    import json5

    (repo / ".vscode").mkdir()
    config = repo / ".vscode/mcp.json"
    config.write_text(text)
    proc = cli("install", "--client", "vscode", "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr
    written = config.read_text()
    data = json5.loads(written)
    assert data["servers"]["rootcause"]["args"] == ["serve", "--root", str(repo.resolve())]
    assert {k: v for k, v in data["servers"].items() if k != "rootcause"} == json5.loads(text).get("servers", {})
    if '"a"' in text:
        assert '{"servers": {"a": {"command": "x"}' in written  # what was there stays byte for byte
    assert "nothing to do" in cli("install", "--client", "vscode", "--repo", str(repo)).stdout


def test_user_scope_writes_nothing_into_the_repository(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".claude.json").write_text(json.dumps({"numStartups": 3, "mcpServers": {"fs": {"command": "x"}}}))
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    before = snapshot(repo)
    proc = subprocess.run([rootcause_executable(), "install", "--client", "all", "--scope", "user", "--repo",
                           str(repo)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(repo) == before
    claude = json.loads((home / ".claude.json").read_text())
    assert claude["numStartups"] == 3 and claude["mcpServers"]["fs"] == {"command": "x"}
    assert claude["mcpServers"]["rootcause"]["args"] == ["serve"]  # Claude Code starts it in the project
    cursor = json.loads((home / ".cursor/mcp.json").read_text())["mcpServers"]["rootcause"]
    assert cursor["args"] == ["serve", "--root", "${workspaceFolder}"]
    vscode = json.loads((home / ".config/Code/User/mcp.json").read_text())["servers"]["rootcause"]
    assert vscode["args"] == ["serve", "--root", "${workspaceFolder}"] and vscode["type"] == "stdio"
    assert (home / ".claude/skills/rootcause-debug/SKILL.md").read_text() == inst.skill_text()
    assert (home / ".copilot/skills/rootcause-debug/SKILL.md").read_text() == inst.skill_text()
    assert str(repo) not in json.dumps([claude, cursor, vscode])


@pytest.mark.anyio
async def test_user_scope_entry_serves_the_folder_it_starts_in(repo: Path, tmp_path: Path) -> None:
    from mcp import Client, StdioServerParameters

    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.run([rootcause_executable(), "install", "--client", "claude", "--scope", "user"],
                          capture_output=True, text=True, env=env, timeout=60, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads((home / ".claude.json").read_text())["mcpServers"]["rootcause"]
    params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(repo),
                                   env={"PATH": os.environ["PATH"], "HOME": str(home)})
    async with Client(params) as client:
        started = await client.call_tool("start_session", {"symptom": "ValueError: bad shape"})
        assert not started.is_error
    assert len(list((repo / ".rootcause" / "sessions").iterdir())) == 1


def test_dry_run_writes_nothing(repo: Path) -> None:
    before = snapshot(repo)
    proc = cli("install", "--client", "all", "--repo", str(repo), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(repo) == before
    for path in (".mcp.json", ".cursor/mcp.json", ".vscode/mcp.json", ".claude/skills/rootcause-debug/SKILL.md",
                 ".cursor/rules/rootcause-debug.mdc"):
        assert f"would create  {path}" in proc.stdout
    assert '"servers"' in proc.stdout and "dry run: nothing was written" in proc.stdout


def test_bad_input_exit_codes(tmp_path: Path) -> None:
    missing = cli("install", "--client", "claude", "--repo", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    unknown = cli("install", "--client", "emacs", "--repo", str(tmp_path))
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


def test_default_repo_is_cwd(repo: Path) -> None:
    assert cli("install", "--client", "claude", cwd=repo).returncode == 0
    assert entry_of(repo, "claude")["args"] == ["serve", "--root", str(repo.resolve())]


# ---------------------------------------------------------------- how the server is started


def test_uv_tool_detection(tmp_path: Path) -> None:
    tools_dir = tmp_path / "uv-tools"
    env = {"UV_TOOL_DIR": str(tools_dir)}
    receipt_env = tmp_path / "elsewhere" / "rootcause"
    receipt_env.mkdir(parents=True)
    (receipt_env / "uv-receipt.toml").write_text('[tool]\nrequirements = [{ name = "rootcause" }]\n')
    assert inst.is_uv_tool(receipt_env, env)
    assert inst.is_uv_tool(tools_dir / "rootcause", env)
    assert inst.is_uv_tool(tmp_path / ".cache" / "uv" / "archive-v0" / "Xy12", env)
    assert not inst.is_uv_tool(Path(sys.prefix), env)
    assert inst.uv_tool_dir({"XDG_DATA_HOME": "/data"}) == Path("/data/uv/tools")
    served = inst.server_command(tmp_path, prefix=receipt_env, environ=env)
    assert served.command == "uvx" and served.args == ["rootcause", "serve", "--root", str(tmp_path)]
    own = inst.server_command(tmp_path, prefix=Path(sys.prefix), environ=env)
    assert own.via == "executable" and own.command == rootcause_executable() and own.env == {}
    assert served.env == {"UV_TOOL_DIR": str(tools_dir)}


def test_uvx_entry_written(repo: Path, tmp_path: Path) -> None:
    server = inst.ServerCommand(command="uvx", args=["rootcause", "serve", "--root", str(repo)], via="uvx")
    plan = inst.install(repo, "vscode", server=server)
    assert plan.changes[0].action == "create"
    assert entry_of(repo, "vscode") == {"type": "stdio", "command": "uvx",
                                        "args": ["rootcause", "serve", "--root", str(repo)]}


# ---------------------------------------------------------------- the MCP Inspector against the installed command


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
@pytest.mark.parametrize("call", ["list", "start_session"])
def test_inspector_cli_against_installed_command(repo: Path, call: str) -> None:
    assert cli("install", "--client", "claude", "--repo", str(repo)).returncode == 0
    entry = entry_of(repo, "claude")
    method = ["--method", "tools/list"] if call == "list" else [
        "--method", "tools/call", "--tool-name", "start_session", "--tool-arg", "symptom=loss is NaN at step 3"]
    proc = subprocess.run(["npx", "-y", "@modelcontextprotocol/inspector@2.12.0", "--cli", entry["command"],
                           *entry["args"], *method], capture_output=True, text=True, timeout=240, cwd=repo)
    if proc.returncode != 0 and "ENOTFOUND" in proc.stderr + proc.stdout:
        pytest.skip("npm registry unreachable")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    if call == "list":
        assert {"start_session", "close_session"} <= {t["name"] for t in out["tools"]}
    else:
        assert not out.get("isError"), out
        assert out["structuredContent"]["category"] == "nonfinite"
        assert out["structuredContent"]["path"] == "full"


# ---------------------------------------------------------------- a real `uv tool install`


@pytest.mark.slow
@pytest.mark.anyio
async def test_uv_tool_install_writes_a_uvx_entry_that_serves(repo: Path, tmp_path: Path) -> None:
    """The fresh-machine path: `uv tool install` the checkout, `rootcause install`, start what was written."""
    from mcp import Client, StdioServerParameters
    from rootcause.tools.run.interpreters import uv_binary

    uv = Path(uv_binary())
    env = {**os.environ, "UV_TOOL_DIR": str(tmp_path / "tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin")}
    built = subprocess.run([str(uv), "tool", "install", str(REPO_ROOT)], env=env, capture_output=True, text=True,
                           timeout=600)
    if built.returncode != 0 and any(s in built.stderr for s in ("Failed to fetch", "error sending request",
                                                                 "network was disabled")):
        pytest.skip(f"package index unreachable for uv tool install: {built.stderr.strip()[-300:]}")
    assert built.returncode == 0, built.stderr[-2000:]
    assert (tmp_path / "tools" / "rootcause" / "uv-receipt.toml").is_file()
    proc = subprocess.run([str(tmp_path / "bin" / "rootcause"), "install", "--client", "vscode", "--repo", str(repo)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    entry = entry_of(repo, "vscode")
    assert entry == {"type": "stdio", "command": "uvx", "args": ["rootcause", "serve", "--root", str(repo.resolve())],
                     "env": {"UV_TOOL_DIR": str(tmp_path / "tools")}}
    # A client's environment: its PATH (where uvx lives), HOME, and the entry's env; nothing else of ours.
    client_env = {"PATH": f"{uv.parent}{os.pathsep}/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"),
                  "UV_OFFLINE": "1", **entry["env"]}
    params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd="/", env=client_env)
    async with Client(params) as client:
        assert "start_session" in {t.name for t in (await client.list_tools()).tools}
