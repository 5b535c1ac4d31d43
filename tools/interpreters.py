"""Which Python interpreter a tool targets: the caller's, the project's .venv, else our own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tools.errors import UsageError
from tools.workspace import Workspace


def resolve_python(workspace: Workspace, python: str | None) -> Path:
    """The `python` argument (a path, or a name found on PATH), else `<root>/.venv/bin/python`, else sys.executable.

    An explicit interpreter may live outside the root (a cluster's shared venv); it is
    only executed, never written to.
    """
    if python:
        if python.startswith("-") or "\x00" in python:
            raise UsageError(f"python {python!r} is not an interpreter path.", "give a path like .venv/bin/python")
        candidate = Path(python).expanduser()
        if not candidate.is_absolute() and os.sep not in python:
            from shutil import which

            found = which(python)
            candidate = Path(found) if found else workspace.root / python
        elif not candidate.is_absolute():
            candidate = workspace.root / candidate
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise UsageError(f"python {python!r} is not an executable file.",
                             "give the interpreter of the project's environment, e.g. .venv/bin/python")
        return Path(os.path.abspath(candidate))
    venv_python = workspace.root / ".venv" / "bin" / "python"
    if venv_python.is_file() and os.access(venv_python, os.X_OK):
        return venv_python
    return Path(sys.executable)


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
