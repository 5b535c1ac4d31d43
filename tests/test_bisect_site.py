"""base='current' keeps what the base interpreter's site adds: real venvs, real .pth files, real uv installs.

The project's venv reaches a package only through a .pth path file (a shared torch install, `conda develop`):
the bisect environments must import it too, or refuse up front naming what they cannot carry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rootcause.tools.bisect import basesite
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.bisect_env import BisectEnvInput, bisect_env
from rootcause.tools.run.interpreters import freeze, uv_binary

from tests.conftest import FIXTURES

pytestmark = pytest.mark.anyio
UV_ENV = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
REPRO = """\
import extpkg  # reached only through a .pth file of the project's venv
print("extpkg", extpkg.WHERE)
""" + (FIXTURES / "bisect" / "clickproj" / "repro.py").read_text()


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python*/site-packages"))


def make_pth_project(tmp: Path, *packages: str) -> tuple[Path, Path]:
    """A plain project (no pyproject) with a `python -m venv --without-pip` .venv holding `packages`, whose
    site-packages has shared.pth naming a folder outside the root with the package `extpkg`."""
    root = tmp / "project"
    root.mkdir()
    (root / "repro.py").write_text(REPRO)
    shared = tmp / "shared-site"
    (shared / "extpkg").mkdir(parents=True)
    (shared / "extpkg" / "__init__.py").write_text("WHERE = 'shared-site'\n")
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    if packages:
        subprocess.run([uv_binary(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *packages],
                       check=True, env=UV_ENV, timeout=300)
    (site_packages(venv) / "shared.pth").write_text(f"# the team's shared packages\n{shared}\n{tmp}/not-there\n")
    return root, shared


async def test_the_interpreter_reports_its_pth_paths_and_the_plan_keeps_them(tmp_path: Path) -> None:
    root, shared = make_pth_project(tmp_path, "setuptools==80.9.0")
    rel = tmp_path / "relative-site"
    rel.mkdir()
    site = site_packages(root / ".venv")
    (site / "rel.pth").write_text(os.path.relpath(rel, site) + "\n")
    python = root / ".venv" / "bin" / "python"
    ctx = ToolContext.for_root(root)
    report = await basesite.read_site(ctx.workspace, python)
    assert str(shared) in report.sys_path and str(rel) in report.sys_path  # what site really added
    packages = await freeze(ctx.workspace, python)
    plan = basesite.plan(report, packages, root=root, source=root, project=None, python=python)
    # shared.pth and rel.pth are kept (the missing folder is left out, as site does); setuptools'
    # distutils-precedence.pth (an import line) is not copied: reinstalling setuptools writes it.
    assert [(c.name, c.paths) for c in plan.carried] == [("rel.pth", (str(rel),)), ("shared.pth", (str(shared),))]
    assert (site / "distutils-precedence.pth").is_file() and "setuptools" in packages
    assert plan.editables == () and plan.user_packages == () and not plan.system_site


async def test_bisect_env_base_current_imports_what_a_pth_adds(tmp_path: Path) -> None:
    root, _ = make_pth_project(tmp_path, "click==8.1.8")
    result = await bisect_env(BisectEnvInput(package="click", version="8.2.0", command="python repro.py",
                                             base="current", keep=False), ToolContext.for_root(root))
    assert result.verdict == "version_flips_outcome", result.summary()
    assert "extpkg shared-site" in (root / result.env_a.log_path).read_text()
    assert "mix_stderr" in result.env_b.error and "extpkg" not in (result.env_b.error or "")
    assert [d.package for d in result.freeze_diff] == ["click"]


async def test_an_import_line_no_package_owns_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    root, _ = make_pth_project(tmp_path)
    site = site_packages(root / ".venv")
    (site / "_team_hook.py").write_text("import os\nos.environ['TEAM'] = '1'\n")
    (site / "team.pth").write_text("import _team_hook\n")
    with pytest.raises(UsageError) as caught:
        await bisect_env(BisectEnvInput(package="click", version="8.2.0", command="python repro.py",
                                        base="current"), ToolContext.for_root(root))
    text = str(caught.value)
    assert f"{site / 'team.pth'}:1: import _team_hook" in text and "no installed package owns" in text
    assert "path line" in caught.value.hint and "base='project'" in caught.value.hint
    envs = root / ".rootcause" / "envs"
    assert not [p for p in envs.iterdir() if p.is_dir()]  # refused up front: no environment was started


@pytest.mark.slow
async def test_an_editable_sibling_with_a_finder_pth_is_installed_editable_again(tmp_path: Path) -> None:
    """`pip install -e ../teamlib` with setuptools: its .pth is an import line (setuptools' finder), owned by the
    editable distribution; the environment installs teamlib editable from the same folder, so it imports."""
    root, _ = make_pth_project(tmp_path, "click==8.1.8")
    lib = tmp_path / "teamlib"
    (lib / "teamlib").mkdir(parents=True)
    (lib / "teamlib" / "__init__.py").write_text("NAME = 'teamlib from its folder'\n")
    (lib / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=64"]\n'
                                        'build-backend = "setuptools.build_meta"\n'
                                        '[project]\nname = "teamlib"\nversion = "0.1"\n'
                                        '[tool.setuptools]\npackages = ["teamlib"]\n')
    python = root / ".venv" / "bin" / "python"
    subprocess.run([uv_binary(), "pip", "install", "-q", "--python", str(python), "-e", str(lib)], check=True,
                   env=UV_ENV, timeout=300)
    finder = [p for p in site_packages(root / ".venv").glob("*.pth") if "teamlib" in p.name]
    assert finder and finder[0].read_text().startswith("import ")  # the finder form, not a path line
    (root / "repro.py").write_text("import teamlib\nprint(teamlib.NAME)\n" + REPRO)
    result = await bisect_env(BisectEnvInput(package="click", version="8.2.0", command="python repro.py",
                                             base="current", keep=False), ToolContext.for_root(root))
    assert result.verdict == "version_flips_outcome", result.summary()
    assert "teamlib from its folder" in (root / result.env_a.log_path).read_text()


async def test_a_venv_with_system_site_packages_gets_them_too(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    root.mkdir()
    venv = root / ".venv"
    base = Path(sys.base_prefix) / "bin" / Path(sys.executable).name
    base = base if base.exists() else Path(shutil.which("python3") or sys.executable)
    subprocess.run([str(base), "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    ctx = ToolContext.for_root(root)
    python = venv / "bin" / "python"
    report = await basesite.read_site(ctx.workspace, python)
    assert {f.kind for f in report.folders} >= {"own", "system"}
    plan = basesite.plan(report, {}, root=root, source=root, project=None, python=python)
    assert plan.system_site and plan.carried == ()
