"""The package's shape (issue 21): one import namespace, floors without cycles, checked by import-linter."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("server", "tools", "prompts")


def _python_files() -> list[Path]:
    return [p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
            if "demo/example" not in p.as_posix() and "__pycache__" not in p.parts]


def test_import_linter_contracts_hold(tmp_path: Path) -> None:
    """Floors (pyproject's [tool.importlinter]): no import runs up a floor, no cycle at any depth, no engine
    imports mcp or server/. import-linter analyses a package on disk, so the folders are copied under rootcause/
    as the wheel lays them out."""
    lint = shutil.which("lint-imports", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                              os.environ.get("PATH", "")]))
    if lint is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[dev]'")
    package = tmp_path / "rootcause"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, package / folder, ignore=shutil.ignore_patterns("__pycache__", "example"))
    done = subprocess.run([lint, str(ROOT / "pyproject.toml")], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-2000:]


def test_no_bare_server_tools_or_prompts_imports() -> None:
    """Every import of our own code goes through the rootcause namespace (a bare `tools` could be a user's)."""
    bare = []
    for path in _python_files() + list((ROOT / "tests").rglob("*.py")) + list((ROOT / "bench").glob("*.py")):
        if "fixtures" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            bare += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert bare == []


def test_every_tool_is_one_engine_module_named_as_the_tool() -> None:
    from rootcause.server.catalog import TOOLS

    engines = {p.stem for p in (ROOT / "tools" / "engines").glob("*.py") if p.stem != "__init__"}
    assert engines == {t.name for t in TOOLS}
    for spec in TOOLS:
        engine, input_model, output_model = spec.load()
        assert engine.__module__ == f"rootcause.tools.engines.{spec.name}"
        assert input_model.__name__.endswith("Input") and output_model.__name__.endswith("Result")


def test_no_loose_modules_beside_the_floors() -> None:
    """tools/ holds floor packages only; a new module goes into the floor its imports put it on."""
    loose = sorted(p.name for p in (ROOT / "tools").glob("*.py") if p.name != "__init__.py")
    assert loose == []
