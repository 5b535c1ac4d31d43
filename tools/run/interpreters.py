"""Which Python interpreter a tool targets: the caller's, the project's .venv, else our own."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace


def resolve_python(workspace: Workspace, python: str | None) -> Path:
    """The `python` argument (a path, or a name found on PATH), else `<root>/.venv/bin/python`, else sys.executable.

    An explicit interpreter may live outside the root (a cluster's shared venv); it is
    only executed, never written to.
    """
    if python:
        if python.startswith("-") or "\x00" in python:
            raise UsageError(f"python {python!r} is not an interpreter path.", "give a path like .venv/bin/python")
        try:
            candidate = Path(python).expanduser()
        except RuntimeError:  # ~user of an unknown user
            candidate = Path(python)
        if not candidate.is_absolute() and os.sep not in python:
            from shutil import which

            found = which(python)
            candidate = Path(found) if found else workspace.root / python
        elif not candidate.is_absolute():
            candidate = workspace.root / candidate
        try:
            executable = candidate.is_file() and os.access(candidate, os.X_OK)
        except OSError:  # a name too long, a symlink loop
            executable = False
        if not executable:
            raise UsageError(f"python {python[:200]!r} is not an executable file.",
                             "give the interpreter of the project's environment, e.g. .venv/bin/python")
        return Path(os.path.abspath(candidate))
    venv_python = workspace.root / ".venv" / "bin" / "python"
    if venv_python.is_file() and os.access(venv_python, os.X_OK):
        return venv_python
    return Path(sys.executable)


class Interpreter(BaseModel):
    """The interpreter a run uses and why: the one rule every tool follows, stated in its results."""

    path: Path
    source: Literal["argument", "project_venv", "rootcause", "tool"]

    @classmethod
    def explicit(cls, path: Path) -> Interpreter:
        return cls(path=path, source="tool")

    @property
    def note(self) -> str | None:
        """What to tell the user when the run did not use the project's own interpreter (None when it did)."""
        if self.source == "rootcause":
            return (f"rootcause's own interpreter {self.path} (no .venv in the project; pass python=... for the "
                    "project's)")
        return None

    def describe(self) -> str:
        why = {"argument": "python=", "project_venv": "the project's .venv", "tool": "chosen by the tool"}
        return self.note or f"{self.path} ({why.get(self.source, self.source)})"


def choose_interpreter(workspace: Workspace, python: str | None) -> Interpreter:
    """resolve_python with the reason: argument, the project's .venv, or rootcause's own."""
    path = resolve_python(workspace, python)
    if python:
        return Interpreter(path=path, source="argument")
    if path == workspace.root / ".venv" / "bin" / "python":
        return Interpreter(path=path, source="project_venv")
    return Interpreter(path=path, source="rootcause")


def venv_of(python: Path) -> Path | None:
    """The virtual environment an interpreter belongs to (the folder holding pyvenv.cfg), if any."""
    for parent in (python.parent.parent,):
        if (parent / "pyvenv.cfg").is_file():
            return parent
    return None


def activation_env(python: Path) -> dict[str, str]:
    """VIRTUAL_ENV and PATH so that `python` and console scripts resolve to this interpreter's env."""
    env = {"PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    venv = venv_of(python)
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
    return env


def uv_binary() -> str:
    """The uv executable shipped by the `uv` wheel (not looked up on PATH)."""
    import uv

    return uv.find_uv_bin()


def parse_freeze(text: str) -> dict[str, str]:
    """`name==version` lines (also `name @ url`) to {normalised name: version-or-url}."""
    from packaging.utils import canonicalize_name

    packages: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        if "==" in line:
            name, _, version = line.partition("==")
        elif " @ " in line:
            name, _, version = line.partition(" @ ")
        else:
            continue
        packages[canonicalize_name(name.strip())] = version.strip()
    return packages


async def freeze(workspace: Workspace, python: Path) -> dict[str, str]:
    """Installed packages of an interpreter, via `uv pip freeze --python` through the shared runner."""
    from rootcause.tools.run import run_captured

    record, output = await run_captured([uv_binary(), "pip", "freeze", "--python", str(python)], workspace,
                                        env={"UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"},
                                        timeout_s=120, label="uv pip freeze")
    if record.outcome != "pass":
        raise UsageError(f"`uv pip freeze --python {python}` failed: {output.strip()[-500:]}",
                         "check that the interpreter exists and is a Python environment")
    return parse_freeze(output)
