"""`rootcause install`: the MCP server entry and the debugging skill, written into a repository.

Every client keeps a project-level JSON file naming its MCP servers: Claude Code `.mcp.json`
(`mcpServers`), Cursor `.cursor/mcp.json` (`mcpServers`), VS Code `.vscode/mcp.json`
(`servers`, each entry with `"type": "stdio"`; JSON with comments and trailing commas, edited
in place by tools/jsonc.py so the user's comments stay). With scope "user" the entry goes to
the client's user-level file instead (no machine path in a shared repository; the server's
root is the folder the client opens). The install is planned first (every file parsed, every
new content computed) and written only when the whole plan is valid, so a malformed file for
one client leaves every file untouched. A file whose content would not change is not
rewritten at all, which makes a second run byte-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from rootcause.tools.core.errors import UsageError

Client = Literal["claude", "cursor", "vscode"]
Scope = Literal["project", "user"]
CLIENTS: tuple[Client, ...] = ("claude", "cursor", "vscode")
CLIENT_NAMES: dict[str, str] = {"claude": "Claude Code", "cursor": "Cursor", "vscode": "VS Code"}
SERVER_NAME = "rootcause"
SKILL_NAME = "rootcause-debug"


class ClientLayout(BaseModel):
    config: str
    servers_key: str
    entry_type: str | None
    """The `type` field the client expects in a stdio entry (None: leave it out)."""
    jsonc: bool = False
    """The client reads its config as JSON with comments and trailing commas."""
    workspace_variable: str | None = None
    """How a user-level entry names the opened folder (None: the client starts the server in it)."""


LAYOUTS: dict[str, ClientLayout] = {
    "claude": ClientLayout(config=".mcp.json", servers_key="mcpServers", entry_type="stdio"),
    "cursor": ClientLayout(config=".cursor/mcp.json", servers_key="mcpServers", entry_type=None,
                           workspace_variable="${workspaceFolder}"),
    "vscode": ClientLayout(config=".vscode/mcp.json", servers_key="servers", entry_type="stdio", jsonc=True,
                           workspace_variable="${workspaceFolder}"),
}


def user_config(client: Client, environ: dict[str, str] | None = None) -> Path:
    """The client's user-level MCP config (Claude Code's user scope, Cursor's global file, VS Code's profile)."""
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home())
    if client == "claude":
        return home / ".claude.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "Code" / "User" / "mcp.json"
    if sys.platform == "win32":
        return Path(env.get("APPDATA", home / "AppData" / "Roaming")) / "Code" / "User" / "mcp.json"
    return Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "Code" / "User" / "mcp.json"


class ServerCommand(BaseModel):
    command: str
    args: list[str]
    via: Literal["executable", "uvx"]
    env: dict[str, str] = {}
    """Variables the client must pass (a custom UV_TOOL_DIR, so uvx finds the installed tool)."""


class FileChange(BaseModel):
    path: str
    relative: str
    what: str
    action: Literal["create", "update", "unchanged"]
    content: str


class InstallPlan(BaseModel):
    repo: str
    clients: list[Client]
    server: ServerCommand
    changes: list[FileChange]

    def summary(self, dry_run: bool = False) -> str:
        verbs = {"create": "would create" if dry_run else "created",
                 "update": "would update" if dry_run else "updated",
                 "unchanged": "unchanged"}
        lines = [f"rootcause server command: {' '.join([self.server.command, *self.server.args])}"]
        for change in self.changes:
            lines.append(f"  {verbs[change.action]:<13} {change.relative}  ({change.what})")
            if dry_run and change.action != "unchanged":
                lines.extend("      " + line for line in change.content.rstrip("\n").splitlines())
        if dry_run:
            lines.append("dry run: nothing was written")
        elif any(c.action != "unchanged" for c in self.changes):
            names = ", ".join(CLIENT_NAMES[c] for c in self.clients)
            lines.append(f"done: reload the MCP servers (or restart) in {names} to pick up rootcause")
        else:
            lines.append("nothing to do: rootcause is already installed for " +
                         ", ".join(CLIENT_NAMES[c] for c in self.clients))
        return "\n".join(lines)


# ---------------------------------------------------------------- the server command


def uv_tool_dir(environ: dict[str, str] | None = None) -> Path:
    """Where `uv tool install` puts tool environments (what `uv tool dir` prints)."""
    env = os.environ if environ is None else environ
    if env.get("UV_TOOL_DIR"):
        return Path(env["UV_TOOL_DIR"]).expanduser()
    if sys.platform == "win32":
        return Path(env.get("APPDATA", Path.home() / "AppData" / "Roaming")) / "uv" / "data" / "tools"
    data_home = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "uv" / "tools"


def is_uv_tool(prefix: Path, environ: dict[str, str] | None = None) -> bool:
    """True when this interpreter's environment is managed by uv: an installed tool or a `uvx` run.

    An installed tool's environment holds uv's `uv-receipt.toml` and sits in uv's tools
    directory; a `uvx` run lives in uv's cache (`archive-v0`), which uv may clean, so its path
    must never be written into a config.
    """
    prefix = Path(prefix)
    if (prefix / "uv-receipt.toml").is_file():
        return True
    if prefix.parent == uv_tool_dir(environ):
        return True
    return "archive-v0" in prefix.parts


def own_executable() -> Path:
    """The `rootcause` console script of the running environment (next to the interpreter)."""
    bindir = Path(sys.executable).parent  # not resolved: a venv's python is a symlink out of the venv
    for name in ("rootcause", "rootcause.exe"):
        candidate = bindir / name
        if candidate.is_file():
            return Path(os.path.abspath(candidate))
    found = shutil.which("rootcause")
    if found:
        return Path(os.path.abspath(found))
    raise UsageError(
        f"cannot find the rootcause executable next to {sys.executable} or on PATH.",
        "install rootcause as a tool (uv tool install rootcause, or pipx install rootcause) and run it from there",
    )


def server_command(repo: Path | str | None, prefix: Path | None = None,
                   environ: dict[str, str] | None = None) -> ServerCommand:
    """`rootcause serve --root <repo>`: through uvx for a uv-managed install, else the absolute executable.

    repo None: no --root, the server works in the folder the client starts it in.
    """
    serve = ["serve", "--root", str(repo)] if repo is not None else ["serve"]
    env = os.environ if environ is None else environ
    if is_uv_tool(Path(sys.prefix) if prefix is None else prefix, env):
        # Clients start servers with their own environment: a custom tool dir must travel with the entry,
        # or uvx would not find the installed tool and fall back to downloading one.
        extra = {"UV_TOOL_DIR": env["UV_TOOL_DIR"]} if env.get("UV_TOOL_DIR") else {}
        return ServerCommand(command="uvx", args=[SERVER_NAME, *serve], via="uvx", env=extra)
    return ServerCommand(command=str(own_executable()), args=serve, via="executable")


def server_entry(client: Client, server: ServerCommand) -> dict[str, Any]:
    layout = LAYOUTS[client]
    entry: dict[str, Any] = {"type": layout.entry_type} if layout.entry_type else {}
    entry.update(command=server.command, args=list(server.args))
    if server.env:
        entry["env"] = dict(server.env)
    return entry


# ---------------------------------------------------------------- the skill


def skill_text() -> str:
    """The skill shipped with the package (a copy of .agents/skills/rootcause-debug/SKILL.md)."""
    return files("rootcause.tools.ecosystem").joinpath("skill", "SKILL.md").read_text(encoding="utf-8")


def split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    import yaml

    if not text.startswith("---\n"):
        return {}, text
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        return {}, text
    return yaml.safe_load(head) or {}, body.lstrip("\n")


def cursor_rule(skill: str) -> str:
    """The skill as a Cursor rule the agent pulls in by its description (alwaysApply false)."""
    meta, body = split_frontmatter(skill)
    description = " ".join(str(meta.get("description", "")).split())
    return f"---\ndescription: {json.dumps(description, ensure_ascii=False)}\nglobs:\nalwaysApply: false\n---\n\n{body}"


def skill_files(client: Client, scope: Scope = "project") -> list[tuple[str, str, str]]:
    """(path relative to the repository, or to the home folder for scope user; content; what) of the skill files.

    VS Code's agent reads Agent Skills from .github/skills/ in the workspace and ~/.copilot/skills/
    for the user; Cursor has no user-level rule file (user rules live in its settings).
    """
    if client == "claude":
        return [(f".claude/skills/{SKILL_NAME}/SKILL.md", skill_text(), "Claude Code skill")]
    if client == "cursor":
        rule = (f".cursor/rules/{SKILL_NAME}.mdc", cursor_rule(skill_text()), "Cursor rule")
        return [] if scope == "user" else [rule]
    folder = ".copilot/skills" if scope == "user" else ".github/skills"
    return [(f"{folder}/{SKILL_NAME}/SKILL.md", skill_text(), "VS Code agent skill")]


# ---------------------------------------------------------------- planning and writing


def render_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _read_config(path: Path, relative: str, servers_key: str, manual: str,
                 jsonc: bool = False) -> tuple[dict[str, Any] | None, str]:
    """The parsed config (None when absent) and its text; UsageError for anything we must not overwrite."""
    if not path.exists():
        return None, ""
    hint = f"fix or move the file and run `rootcause install` again, or add this entry by hand:\n{manual}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{relative} cannot be read ({exc}); it was left untouched.", hint) from None
    if not text.strip():
        return {}, text
    if jsonc:
        from rootcause.tools.ecosystem import jsonc as jsonc_text

        try:
            data = jsonc_text.loads(text, relative)
        except UsageError as exc:
            raise UsageError(f"{exc} It was left untouched.", hint) from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{relative} is not valid JSON ({exc}); it was left untouched.", hint) from None
    if not isinstance(data, dict):
        raise UsageError(f"{relative} holds a JSON {type(data).__name__}, not an object; it was left untouched.", hint)
    if servers_key in data and not isinstance(data[servers_key], dict):
        raise UsageError(f"{relative}: {servers_key!r} is not a JSON object; the file was left untouched.", hint)
    return data, text


def plan_config(repo: Path, client: Client, server: ServerCommand, scope: Scope = "project") -> FileChange:
    layout = LAYOUTS[client]
    path = repo / layout.config if scope == "project" else user_config(client)
    relative = layout.config if scope == "project" else str(path)
    desired = server_entry(client, server)
    manual = render_json({layout.servers_key: {SERVER_NAME: desired}})
    data, text = _read_config(path, relative, layout.servers_key, manual, layout.jsonc)
    what = f"{CLIENT_NAMES[client]} MCP server entry" + (" (user)" if scope == "user" else "")
    if data is None:
        return FileChange(path=str(path), relative=relative, what=what, action="create", content=manual)
    servers = data.setdefault(layout.servers_key, {})
    current = servers.get(SERVER_NAME)
    # Keep fields the user added to our entry (env, cwd...): only ours are replaced.
    merged = {**current, **desired} if isinstance(current, dict) else desired
    if isinstance(current, dict) and isinstance(current.get("env"), dict) and "env" in desired:
        merged["env"] = {**current["env"], **desired["env"]}
    if merged == current:
        return FileChange(path=str(path), relative=relative, what=what, action="unchanged", content=text)
    servers[SERVER_NAME] = merged
    if layout.jsonc and text.strip():
        from rootcause.tools.ecosystem import jsonc as jsonc_text

        content = jsonc_text.set_member(text, (layout.servers_key, SERVER_NAME), merged)
        if jsonc_text.loads(content, relative) != data:  # the splice must mean exactly the merged config
            raise UsageError(f"{relative} could not be edited in place; it was left untouched.",
                             f"add this entry by hand:\n{manual}")
    else:
        content = render_json(data)
    return FileChange(path=str(path), relative=relative, what=what, action="update", content=content)


def plan_file(repo: Path, relative: str, content: str, what: str) -> FileChange:
    path = repo / relative
    relative = str(path) if Path(relative).is_absolute() else relative
    if not path.exists():
        action: Literal["create", "update", "unchanged"] = "create"
    else:
        try:
            action = "unchanged" if path.read_text(encoding="utf-8") == content else "update"
        except (OSError, UnicodeDecodeError):
            action = "update"
    return FileChange(path=str(path), relative=relative, what=what, action=action, content=content)


def resolve_clients(client: str) -> list[Client]:
    if client == "all":
        return list(CLIENTS)
    if client not in CLIENTS:
        raise UsageError(f"unknown client {client!r}.", "use one of claude, cursor, vscode, all")
    return [client]  # type: ignore[list-item]


def resolve_repo(repo: str | os.PathLike[str] | None) -> Path:
    path = Path(repo or os.getcwd()).expanduser()
    if not path.is_dir():
        raise UsageError(f"repository {str(path)!r} is not a directory.", "pass --repo PATH of an existing folder")
    return path.resolve()


def plan_install(repo: Path, clients: list[Client], server: ServerCommand | None = None,
                 scope: Scope = "project") -> InstallPlan:
    """Everything an install would write; raises UsageError before anything is written."""
    changes: list[FileChange] = []
    home = Path(os.environ.get("HOME") or Path.home())
    for client in clients:
        if scope == "user":
            variable = LAYOUTS[client].workspace_variable
            command = server or server_command(variable)  # variable None: the client starts it in the folder
            changes.append(plan_config(repo, client, command, scope))
            changes.extend(plan_file(home, str(home / rel), content, what)
                           for rel, content, what in skill_files(client, scope))
            server_shown = command
        else:
            server_shown = server or server_command(repo)
            changes.append(plan_config(repo, client, server_shown))
            changes.extend(plan_file(repo, rel, content, what) for rel, content, what in skill_files(client))
    return InstallPlan(repo=str(repo), clients=clients, server=server_shown, changes=changes)


def write_atomic(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def install(repo: str | os.PathLike[str] | None, client: str, dry_run: bool = False,
            server: ServerCommand | None = None, scope: Scope = "project") -> InstallPlan:
    clients = resolve_clients(client)
    root = resolve_repo(repo)
    plan = plan_install(root, clients, server, scope)
    if not dry_run:
        for change in plan.changes:
            if change.action != "unchanged":
                write_atomic(Path(change.path), change.content)
    return plan
