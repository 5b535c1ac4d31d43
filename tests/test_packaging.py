"""A wheel built from the repository installs into a fresh venv, imports only under rootcause, and runs the demo."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _uv() -> str:
    from rootcause.tools.run.interpreters import uv_binary

    return str(uv_binary())


def test_wheel_maps_the_folders_under_rootcause_and_runs_the_demo(tmp_path: Path) -> None:
    built = subprocess.run([_uv(), "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("rootcause-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"rootcause"}, tops
    assert "rootcause/tools/ecosystem/demo/example/minitrain/loss.py" in names
    assert "rootcause/tools/knowledge/data/pitfalls.yaml" in names and not any("__pycache__" in n for n in names)
    assert "rootcause/tools/run/fr_hook/sitecustomize.py" in names  # the flight-recorder hook runs' children load

    venv = tmp_path / "venv"
    subprocess.run([_uv(), "venv", "--python", sys.executable, str(venv)], check=True, capture_output=True)
    installed = subprocess.run([_uv(), "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel)],
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    probe = ("import importlib.util as u, rootcause.server.cli; "
             "print([n for n in ('tools', 'server', 'prompts') if u.find_spec(n)])")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    bare = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, env=clean, check=True)
    assert bare.stdout.strip() == "[]"
    demo = subprocess.run([str(venv / "bin" / "rootcause"), "demo"], capture_output=True, text=True, cwd=tmp_path,
                          env=clean, timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-2000:]
    assert "demo finished" in demo.stdout
