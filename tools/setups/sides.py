"""One side of a comparison, resolved: its tree (a commit or the working tree), run, env and interpreter."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rootcause.tools.core import gitrepo
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import run_dir
from rootcause.tools.run.interpreters import resolve_python
from rootcause.tools.setups.configs import file_format

LOCK_FILES = ("uv.lock", "poetry.lock", "pdm.lock", "requirements.txt", "requirements.lock")
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|AUTH", re.IGNORECASE)


class SetupSide(BaseModel):
    """One setup: a git ref (omitted: the working tree), files, an interpreter, env, or a recorded run."""

    ref: str | None = Field(None, description="A git ref (branch, tag, commit); omitted: the working tree.")
    files: list[str] | None = Field(
        None, description="Config and launcher files to compare (paths inside the root). Default: the files the "
                          "run's command names (YAML, JSON, TOML, shell scripts), pyproject.toml and the lock file, "
                          "plus config files changed between the two refs.")
    python: str | None = Field(None, description="An interpreter whose installed packages are compared.")
    env: dict[str, str] | None = Field(None, description="Environment variables of this setup.")
    run_id: str | None = Field(None, description="A recorded run (reproduce): its command and env are taken.")


@dataclass
class Side:
    name: str
    spec: SetupSide
    sha: str | None = None
    python: Path | None = None
    env: dict[str, str] | None = None
    argv: list[str] | None = None
    cwd: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def tree(self) -> str:
        return self.sha[:10] if self.sha else "working tree"


def resolve_side(name: str, spec: SetupSide, workspace: Workspace) -> Side:
    """Validate everything a side names (ref, run, interpreter) before any work is done."""
    side = Side(name=name, spec=spec)
    if spec.ref is not None:
        side.sha = gitrepo.resolve_ref(workspace.root, spec.ref)
    if spec.python is not None:
        side.python = resolve_python(workspace, spec.python)
    if spec.run_id is not None:
        meta = _run_meta(workspace, spec.run_id)
        side.argv = [str(w) for w in meta.get("argv") or []]
        cwd = Path(meta.get("cwd") or workspace.root)
        side.cwd = cwd if cwd.is_dir() else workspace.root
        side.env = _run_env(meta)
    if spec.env is not None:
        side.env = {**(side.env or {}), **{str(k): str(v) for k, v in spec.env.items()}}
    return side


def _run_meta(workspace: Workspace, run_id: str) -> dict[str, Any]:
    folder = run_dir(workspace, run_id)
    meta: dict[str, Any] = {}
    for name in ("meta.json", "record.json", "environment.json"):
        path = folder / name
        if path.is_file():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(loaded, dict):
                for key, value in loaded.items():
                    meta.setdefault(key, value)
    return meta


def _run_env(meta: dict[str, Any]) -> dict[str, str]:
    """The env a run had: a captured environment when the recorder kept one, plus the overrides it was given."""
    env: dict[str, str] = {}
    captured = meta.get("environment")
    if isinstance(captured, dict):
        for key in ("env", "env_vars", "variables"):
            if isinstance(captured.get(key), dict):
                env.update({str(k): str(v) for k, v in captured[key].items()})
    for key in ("env", "env_overrides"):
        if isinstance(meta.get(key), dict):
            env.update({str(k): str(v) for k, v in meta[key].items()})
    return env


def command_files(side: Side, workspace: Workspace) -> list[Path]:
    """Files the side's command names that exist: configs and scripts, also as `--opt=path` or `key=path`."""
    if not side.argv:
        return []
    found: list[Path] = []
    for word in side.argv:
        for candidate in {word, word.partition("=")[2]}:
            if not candidate or file_format(candidate) not in {"yaml", "json", "toml", "script"}:
                continue
            path = Path(candidate) if Path(candidate).is_absolute() else (side.cwd or workspace.root) / candidate
            try:
                resolved = workspace.resolve(path)
            except UsageError:
                continue
            if resolved.is_file() and resolved not in found:
                found.append(resolved)
    return found


def project_files(workspace: Workspace) -> list[Path]:
    return [workspace.root / name for name in ("pyproject.toml", *LOCK_FILES)]


def redact(name: str, value: str | None) -> str | None:
    """Secret-looking variables are never echoed; a short hash still shows whether two values differ."""
    if value is None or not _SECRET.search(name):
        return value
    import hashlib

    return f"<redacted sha256:{hashlib.sha256(value.encode()).hexdigest()[:8]}>"
