"""uv environments under `.rootcause/envs/<key>/`: build, cache, freeze, diff and reconcile.

An environment is a base (the project synced from its lock — or resolved from pyproject.toml
without one —, or a copy of an interpreter's freeze plus what its site adds besides site-packages:
basesite.SitePlan), the project itself installed editable
from the tree under test (its console scripts and metadata exist), plus at most one override
`package==version`. The override is installed with the
base's own freeze as constraints and the target as an override, so the resolver may not
float any other package: it either keeps every other version or reports a conflict.
Environments are cached by key (base fingerprint, extras, groups, override, interpreter, source):
a repeated bisect finds them ready and only re-reads their freeze.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import time
import tomllib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from filelock import FileLock
from packaging.utils import canonicalize_name
from pydantic import BaseModel
from rootcause.tools.bisect.basesite import SitePlan, missing_paths, write_carried
from rootcause.tools.bisect.causes import tls_note
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import run_captured
from rootcause.tools.run.interpreters import parse_freeze, uv_binary

UV_ENV = {"UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
PROJECT_FILES = ("pyproject.toml", "uv.lock", ".python-version", "uv.toml")
Step = Callable[[str], Awaitable[None]]


async def _quiet(message: str) -> None:
    return None


class StepFailed(Exception):
    """A build step failed: what ran, the client's own message, and the step's log."""

    def __init__(self, step: str, message: str, log_path: str | None, conflict: bool = False) -> None:
        self.step, self.message, self.log_path, self.conflict = step, message, log_path, conflict
        super().__init__(f"{step} failed: {message}")


@dataclass(frozen=True)
class Base:
    """What environment A is made of."""

    kind: Literal["project", "current"]
    source: Path
    python: Path
    fingerprint: str
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] | None = None
    requirements: str | None = None
    tag: str = ""
    site: SitePlan | None = None


@dataclass
class Env:
    key: str
    folder: Path
    python: Path
    freeze: dict[str, str]
    override: tuple[str, str] | None
    cached: bool
    check_ok: bool = True
    check_output: str = ""
    logs: list[str] = field(default_factory=list)

    @property
    def venv(self) -> Path:
        return self.folder / "venv"


class FreezeDiff(BaseModel):
    package: str
    a: str | None
    b: str | None
    kind: Literal["target", "drift", "added", "removed"]


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str, sort_keys=True).encode()).hexdigest()[:16]


def project_base(source: Path, python: Path, *, extras: tuple[str, ...] = (), groups: tuple[str, ...] | None = None,
                 tag: str = "") -> Base:
    """The project at `source` as pinned by its uv.lock (else its pyproject.toml)."""
    pieces = [(name, (source / name).read_bytes()) for name in PROJECT_FILES if (source / name).is_file()]
    fingerprint = hashlib.sha256(b"".join(n.encode() + b"\0" + data for n, data in pieces)).hexdigest()[:16]
    return Base("project", source, python, fingerprint, tuple(extras), None if groups is None else tuple(groups),
                None, tag)


def requirements_of(freeze: dict[str, str], skip: str | None = None) -> str:
    lines = []
    for name, value in sorted(freeze.items()):
        if name == skip:
            continue
        lines.append(f"{name}=={value}" if "://" not in value else f"{name} @ {value}")
    return "\n".join(lines) + "\n"


def current_base(source: Path, python: Path, freeze: dict[str, str], site: SitePlan | None = None) -> Base:
    """A copy of what an interpreter has installed (the project itself is installed from `source`), keeping
    what its site adds besides site-packages (basesite.SitePlan: .pth paths, editables, user-site packages)."""
    text = requirements_of({**freeze, **dict(site.user_packages)} if site else freeze)
    pyproject = source / "pyproject.toml"
    project = pyproject.read_bytes() if pyproject.is_file() else b""
    kept = site.fingerprint().encode() if site else b""
    return Base("current", source, python,
                hashlib.sha256(text.encode() + b"\0" + project + b"\0" + kept).hexdigest()[:16],
                requirements=text, site=site)


def env_key(base: Base, override: tuple[str, str] | None) -> str:
    # The source is part of the key: the project is installed (editable) from it.
    return _digest(base.kind, base.fingerprint, base.extras, base.groups, str(base.python), base.tag,
                   str(base.source), override)


def client_message(output: str, limit: int = 1500) -> str:
    """The part of a uv/pip output a human needs: from the first error line on, else the last lines."""
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.lstrip().lower().startswith(("error", "×", "x ")):
            text = "\n".join(lines[i:])
            return text if len(text) <= limit else text[: limit - 3] + "..."
    text = "\n".join(lines[-12:])
    return text[-limit:]


_NOT_A_CONFLICT = ("there is no version of", "network was disabled", "needs to be downloaded", "Failed to fetch",
                   "error sending request", "not found in the package registry", "was not found in the cache")


def is_conflict(output: str) -> bool:
    """The resolver refused the pins (a real conflict), as opposed to a missing version or an offline index."""
    return "No solution found" in output and not any(marker in output for marker in _NOT_A_CONFLICT)


async def _uv(ws: Workspace, args: list[str], *, step: str, cwd: Path, env: dict[str, str] | None = None,
              timeout_s: float) -> tuple[str, str]:
    record, output = await run_captured([uv_binary(), *args], ws, cwd=cwd, env={**UV_ENV, **(env or {})},
                                        timeout_s=timeout_s, label=step)
    if record.outcome != "pass":
        message = client_message(output) + tls_note(output) if not record.timed_out \
            else f"timed out after {timeout_s:.0f}s"
        raise StepFailed(step, message, record.log_path, conflict=is_conflict(output))
    return output, record.log_path


async def freeze_env(ws: Workspace, python: Path, timeout_s: float = 120) -> dict[str, str]:
    output, _ = await _uv(ws, ["pip", "freeze", "--python", str(python)], step="uv pip freeze", cwd=ws.root,
                          timeout_s=timeout_s)
    return parse_freeze(output)


async def check_env(ws: Workspace, python: Path) -> tuple[bool, str]:
    """`uv pip check`: (compatible, uv's report)."""
    record, output = await run_captured([uv_binary(), "pip", "check", "--python", str(python)], ws,
                                        env=UV_ENV, timeout_s=120, label="uv pip check")
    lines = [ln for ln in output.splitlines() if not ln.startswith(("Using Python", "Checked "))]
    return record.outcome == "pass", "\n".join(lines).strip()[:2000]


async def _populate(ws: Workspace, base: Base, folder: Path, venv: Path, python: Path, timeout_s: float,
                    logs: list[str]) -> None:
    if base.kind == "current":
        req = folder / "base-requirements.txt"
        req.write_text(base.requirements or "", encoding="utf-8")
        if (base.requirements or "").strip():
            _, log = await _uv(ws, ["pip", "install", "--python", str(python), "-r", str(req)],
                               step="uv pip install (replicate freeze)", cwd=folder, timeout_s=timeout_s)
            logs.append(log)
        if base.site and base.site.editables:
            args = ["pip", "install", "--python", str(python), "--no-deps"]
            for path in base.site.editables:
                args += ["-e", path]
            _, log = await _uv(ws, args, step="uv pip install -e (the base's editable installs)", cwd=folder,
                               timeout_s=timeout_s)
            logs.append(log)
        await _install_project(ws, base, python, timeout_s, logs)
        if base.site and base.site.carried:
            write_carried(venv, base.site)
            missing = await missing_paths(ws, python, base.site)
            if missing:
                raise StepFailed("keeping the base's .pth paths", "not on the environment's sys.path: "
                                 + ", ".join(missing), None)
        return
    if (base.source / "uv.lock").is_file():
        await _sync_locked(ws, base, venv, python, timeout_s, logs)
    else:
        await _sync_unlocked(ws, base, folder, python, timeout_s, logs)
        await _install_project(ws, base, python, timeout_s, logs)


async def _sync_locked(ws: Workspace, base: Base, venv: Path, python: Path, timeout_s: float,
                       logs: list[str]) -> None:
    """`uv sync --frozen` in place: uv reads the lock without writing it, [tool.uv.sources] paths resolve from the
    project, and uv installs the project itself (editable) like the user's own `uv sync`."""
    args = ["sync", "--frozen", "--python", str(python)]
    for extra in base.extras:
        args += ["--extra", extra]
    if base.groups is not None:
        args.append("--no-default-groups")
        for group in base.groups:
            args += ["--group", group]
    _, log = await _uv(ws, args, step="uv sync", cwd=base.source, env={"UV_PROJECT_ENVIRONMENT": str(venv)},
                       timeout_s=timeout_s)
    logs.append(log)


async def _sync_unlocked(ws: Workspace, base: Base, folder: Path, python: Path, timeout_s: float,
                         logs: list[str]) -> None:
    """No uv.lock: resolve pyproject.toml with `uv pip compile` into the env's folder (nothing is written into the
    user's tree; relative [tool.uv.sources] paths resolve from the project), then `uv pip sync` it."""
    requirements = folder / "requirements.txt"
    requirements.unlink(missing_ok=True)  # an old output file would be read as version preferences
    args = ["pip", "compile", "--quiet", "--python", str(python), str(base.source / "pyproject.toml"),
            "-o", str(requirements)]
    for extra in base.extras:
        args += ["--extra", extra]
    for group in default_groups(base.source) if base.groups is None else base.groups:
        args += ["--group", group]
    _, log = await _uv(ws, args, step="uv pip compile", cwd=base.source, timeout_s=timeout_s)
    logs.append(log)
    _, log = await _uv(ws, ["pip", "sync", "--python", str(python), str(requirements)], step="uv pip sync",
                       cwd=base.source, timeout_s=timeout_s)
    logs.append(log)


def _pyproject(source: Path) -> dict:
    try:
        return tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8", errors="replace"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def default_groups(source: Path) -> tuple[str, ...]:
    """The dependency groups `uv sync` installs by default: tool.uv.default-groups, else 'dev' when defined."""
    data = _pyproject(source)
    defined = data.get("dependency-groups", {})
    chosen = data.get("tool", {}).get("uv", {}).get("default-groups", ["dev"])
    if chosen == "all":
        chosen = list(defined)
    return tuple(g for g in chosen if isinstance(g, str) and g in defined)


def project_name(source: Path) -> str | None:
    """The distribution name of a packaged project at `source` (one with a build system), else None."""
    if (source / "pyproject.toml").is_file():
        data = _pyproject(source)
        name = data.get("project", {}).get("name")
        declared = data.get("tool", {}).get("uv", {}).get("package")  # uv's own switch wins over build-system
        packaged = declared if isinstance(declared, bool) else "build-system" in data
        if isinstance(name, str) and packaged:
            return canonicalize_name(name)
    if (source / "setup.py").is_file():
        return canonicalize_name(source.name)
    return None


async def _install_project(ws: Workspace, base: Base, python: Path, timeout_s: float, logs: list[str]) -> None:
    """The project itself, editable from the tree under test: its entry points and metadata exist in the env."""
    if project_name(base.source) is None:
        return
    _, log = await _uv(ws, ["pip", "install", "--python", str(python), "--no-deps", "-e", str(base.source)],
                       step="uv pip install -e <project> (the tree under test)", cwd=base.source,
                       timeout_s=timeout_s)
    logs.append(log)


def installed_project(venv: Path, source: Path) -> str | None:
    """'name version (editable)' when the project at `source` is installed in `venv`, else None."""
    name = project_name(source)
    if name is None:
        return None
    for site in venv.glob("lib/python*/site-packages"):
        for dist in site.glob("*.dist-info"):
            dist_name, _, dist_version = dist.name[: -len(".dist-info")].partition("-")
            if canonicalize_name(dist_name) != name:
                continue
            direct = dist / "direct_url.json"
            try:
                editable = json.loads(direct.read_text(encoding="utf-8")).get("dir_info", {}).get("editable") is True
            except (OSError, ValueError, AttributeError):
                editable = False
            return f"{name} {dist_version}" + (" (editable)" if editable else "")
    return None


async def install_pinned(ws: Workspace, env: Env, wanted: list[str], pins: dict[str, str], target: tuple[str, str],
                         timeout_s: float, step: str) -> str:
    """Install `wanted` with every package of `pins` (but the target) as a constraint and the target overridden."""
    constraints = env.folder / "constraints.txt"
    overrides = env.folder / "overrides.txt"
    constraints.write_text(requirements_of(pins, skip=target[0]), encoding="utf-8")
    overrides.write_text(f"{target[0]}=={target[1]}\n", encoding="utf-8")
    _, log = await _uv(ws, ["pip", "install", "--python", str(env.python), *wanted, "-c", str(constraints),
                            "--overrides", str(overrides)], step=step, cwd=env.folder, timeout_s=timeout_s)
    env.logs.append(log)
    return log


async def build(ws: Workspace, base: Base, override: tuple[str, str] | None = None, *, timeout_s: float = 600,
                step: Step = _quiet, label: str = "env") -> Env:
    """The environment for (base, override), built now or found in the cache."""
    key = env_key(base, override)
    folder = ws.state_dir("envs", key)
    lock = FileLock(str(folder / ".lock"), thread_local=False)
    await asyncio.to_thread(lock.acquire, timeout=timeout_s)
    try:
        return await _build_locked(ws, base, override, key, folder, timeout_s, step, label)
    finally:
        lock.release()


async def _build_locked(ws: Workspace, base: Base, override: tuple[str, str] | None, key: str, folder: Path,
                        timeout_s: float, step: Step, label: str) -> Env:
    venv = folder / "venv"
    python = venv / "bin" / "python"
    meta_path = folder / "meta.json"
    if meta_path.is_file() and python.exists():
        env = Env(key, folder, python, {}, override, True)
        meta = _read_meta(meta_path)
        if meta.get("site_mtime") == _site_mtime(venv) and isinstance(meta.get("freeze"), dict):
            # Nothing was installed or removed since: the recorded freeze and check still hold.
            await step(f"{label}: cached environment {key}, unchanged since it was built")
            env.freeze, env.check_ok, env.check_output = meta["freeze"], meta["check_ok"], meta["check_output"]
        else:
            await step(f"{label}: cached environment {key} was modified, reading its freeze again")
            env.freeze, (env.check_ok, env.check_output) = await asyncio.gather(freeze_env(ws, python),
                                                                                 check_env(ws, python))
            save_meta(env, base)
        return env
    meta_path.unlink(missing_ok=True)
    if venv.exists():
        shutil.rmtree(venv)
    env = Env(key, folder, python, {}, override, False)
    system = ["--system-site-packages"] if base.site and base.site.system_site else []
    await step(f"{label}: uv venv --python {base.python}" + (f" {system[0]}" if system else ""))
    _, log = await _uv(ws, ["venv", "--quiet", *system, "--python", str(base.python), str(venv)], step="uv venv",
                       cwd=folder, timeout_s=120)
    env.logs.append(log)
    kept = f", keeping {base.site.describe()}" if base.site and base.site.describe() else ""
    await step(f"{label}: installing the base ({'uv sync' if base.kind == 'project' else 'replicated freeze'}{kept})")
    await _populate(ws, base, folder, venv, python, timeout_s, env.logs)
    if override is not None:
        await step(f"{label}: uv pip install {override[0]}=={override[1]} with every other package pinned")
        pins = await freeze_env(ws, python)
        await install_pinned(ws, env, [f"{override[0]}=={override[1]}"], pins, override, timeout_s,
                             f"uv pip install {override[0]}=={override[1]}")
    env.freeze, (env.check_ok, env.check_output) = await asyncio.gather(freeze_env(ws, python),
                                                                         check_env(ws, python))
    save_meta(env, base)
    return env


def _site_mtime(venv: Path) -> int | None:
    """mtime of site-packages: every install or removal adds or deletes a *.dist-info folder there."""
    found = sorted(venv.glob("lib/python*/site-packages"))
    return found[0].stat().st_mtime_ns if found else None


def _read_meta(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def save_meta(env: Env, base: Base | None = None) -> None:
    """Mark the environment complete, with what a warm hit needs to skip re-reading it."""
    path = env.folder / "meta.json"
    meta = _read_meta(path)
    meta.update({"key": env.key, "override": env.override, "freeze": env.freeze, "check_ok": env.check_ok,
                 "check_output": env.check_output, "site_mtime": _site_mtime(env.venv), "updated": time.time()})
    if base is not None:
        meta.update({"kind": base.kind, "source": str(base.source)})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta), encoding="utf-8")
    os.replace(tmp, path)


def _normalise(value: str | None, sources: tuple[Path, ...]) -> str | None:
    if value is None:
        return None
    for source in sources:
        value = value.replace(source.as_uri(), "<source>").replace(str(source), "<source>")
    return value


def diff_freezes(a: dict[str, str], b: dict[str, str], target: str,
                 sources: tuple[Path, ...] = ()) -> list[FreezeDiff]:
    """Every package whose version differs; paths of the two source trees (worktrees) compare equal."""
    out = []
    for name in sorted(set(a) | set(b)):
        va, vb = _normalise(a.get(name), sources), _normalise(b.get(name), sources)
        if va == vb:
            continue
        if name == target:
            kind: Literal["target", "drift", "added", "removed"] = "target"
        elif va is None:
            kind = "added"
        elif vb is None:
            kind = "removed"
        else:
            kind = "drift"
        out.append(FreezeDiff(package=name, a=a.get(name), b=b.get(name), kind=kind))
    return out


async def reconcile(ws: Workspace, env_b: Env, freeze_a: dict[str, str], target: tuple[str, str],
                    drift: list[FreezeDiff], timeout_s: float) -> list[dict[str, str | None]]:
    """Pin drifted or removed packages of B back to A's versions; StepFailed(conflict) when impossible."""
    wanted = [requirements_of({d.package: d.a}).strip() for d in drift if d.a is not None]
    if not wanted:
        return []
    pins = {**freeze_a, **{k: v for k, v in env_b.freeze.items() if k not in freeze_a}}
    await install_pinned(ws, env_b, wanted, pins, target, timeout_s, "uv pip install (pin back to A)")
    env_b.freeze, (env_b.check_ok, env_b.check_output) = await asyncio.gather(
        freeze_env(ws, env_b.python), check_env(ws, env_b.python))
    save_meta(env_b)
    return [{"package": d.package, "from": d.b, "to": d.a} for d in drift if d.a is not None]


def remove(env: Env) -> None:
    shutil.rmtree(env.folder, ignore_errors=True)


def site_path(source: Path) -> str:
    """PYTHONPATH that puts a source tree (and its src/ layout) ahead of any installed copy."""
    parts = [str(source / "src")] if (source / "src").is_dir() else []
    parts.append(str(source))
    existing = os.environ.get("PYTHONPATH")
    return os.pathsep.join(parts + ([existing] if existing else []))
