"""Shared fixtures: a real git repository, the in-memory MCP client, the stdio client."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit, standing for the user's project."""
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# project\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def rootcause_executable() -> str:
    """The console script of the environment running the tests."""
    candidate = Path(sys.executable).parent / "rootcause"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("rootcause")
    if not found:
        pytest.fail("the rootcause console script is not installed: pip install -e '.[dev]'")
    return found


@asynccontextmanager
async def memory_client(root: Path) -> AsyncIterator:
    from mcp import Client
    from rootcause.server.app import build_server

    async with Client(build_server(root)) as client:
        yield client


@asynccontextmanager
async def stdio_client(root: Path, *extra: str) -> AsyncIterator:
    """The official MCP client talking to `rootcause serve` started as a subprocess."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=rootcause_executable(), args=["serve", "--root", str(root), *extra],
                                   cwd=str(root), env=dict(os.environ))
    async with Client(params) as client:
        yield client


def structured(result) -> dict:
    assert not result.is_error, result.content[0].text if result.content else result
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error, f"expected an error, got {result.structured_content}"
    return result.content[0].text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _is_guardian(proc) -> bool:
    """The runner's guardian (tools/runner/guardian.py) lives as long as the process that ran something."""
    try:
        return any(part.endswith("guardian.py") for part in proc.cmdline())
    except Exception:
        return False


@pytest.fixture
def no_leftover_processes() -> Iterator[None]:
    """Fails the test if it leaves a child process of this test process behind."""
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    import time

    deadline = time.time() + 5
    while time.time() < deadline:
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE and not _is_guardian(p)]
        if not left:
            return
        time.sleep(0.2)
    pytest.fail(f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}")
