"""No worktree outlives a tool call, over stdio: success, failure, client cancellation and disconnect.

After every call `git worktree list` shows only the user's own checkout and no process of the run is left.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from tests.conftest import error_text, git, stdio_client, structured
from tests.e2e.test_reproduce import _none_left, _processes_with
from tests.test_bisect import GOOD, WRONG, commit_series, make_click_repo

pytestmark = pytest.mark.anyio
SLEEPER = "import sys, time\nprint('sleeping', sys.argv[1], flush=True)\ntime.sleep(600)\n"


def listed(root: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in git(root, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def sleeper_repo(root: Path) -> list[str]:
    """calc.py breaks at the third commit; sleeper.py (a run that waits forever) is in every commit."""
    root.mkdir(parents=True)
    (root / "sleeper.py").write_text(SLEEPER)
    return commit_series(root, [GOOD, GOOD, WRONG, WRONG], exist_ok=True)


def token() -> str:
    return f"rc-wt-{os.getpid()}-{time.time_ns()}"


async def wait_for(tag: str, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while not _processes_with(tag) and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    assert _processes_with(tag), f"the run carrying {tag} never started"


async def test_success_and_failure_leave_only_the_users_worktree(tmp_path: Path) -> None:
    root = tmp_path / "ok"
    shas = commit_series(root, [GOOD, GOOD, GOOD, WRONG, WRONG])
    git(root, "worktree", "add", "-q", "--detach", str(tmp_path / "users-own"), shas[0])  # the user's own
    own = listed(root)
    async with stdio_client(root) as client:
        commits = structured(await client.call_tool("bisect_commits", {
            "good": shas[0], "bad": "HEAD", "command": "python check.py"}))
        assert commits["status"] == "found" and commits["first_bad_commit"]["sha"] == shas[3]
        assert listed(root) == own
        collateral = structured(await client.call_tool("check_collateral", {"command": "python check.py"}))
        assert collateral["verdict"] == "inconclusive"  # no change in the tree: the same failure on both
        assert listed(root) == own
        # A failing call: the checkout of a commit with a filter that never returns stops at setup_timeout_s.
        (root / ".gitattributes").write_text("*.dat filter=stuck\n")
        (root / "blob.dat").write_text("data\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "data")
        git(root, "config", "filter.stuck.smudge", "sleep 300")
        text = error_text(await client.call_tool("bisect_commits", {
            "good": shas[0], "bad": "HEAD", "command": "python check.py", "setup_timeout_s": 3}))
        assert "did not finish within 3s" in text
        assert listed(root) == own
    assert not any((root / ".rootcause" / "worktrees").iterdir())
    assert not await _none_left("sleep 300", 10)


@pytest.mark.parametrize("tool", ["bisect_commits", "check_collateral"])
async def test_a_cancelled_call_removes_its_worktree_and_its_processes(tmp_path: Path, tool: str) -> None:
    root = tmp_path / tool
    shas = sleeper_repo(root)
    tag = token()
    arguments = {"command": f"python sleeper.py {tag}", "timeout_s": 300}
    if tool == "bisect_commits":
        arguments |= {"good": shas[0], "bad": "HEAD"}
    async with stdio_client(root) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, tool, arguments)
            await wait_for(tag)
            assert len(listed(root)) == 2  # the run is in its worktree
            tg.cancel_scope.cancel()  # the client cancels the request (notifications/cancelled)
        assert not await _none_left(tag, 15)
        deadline = time.monotonic() + 15
        while len(listed(root)) > 1 and time.monotonic() < deadline:
            await anyio.sleep(0.2)
        assert listed(root) == [str(root)]
        # The server still serves, and a new call finds nothing stale.
        data = structured(await client.call_tool("bisect_commits", {
            "good": shas[0], "bad": shas[3], "command": "python check.py"}))
        assert data["status"] == "found" and listed(root) == [str(root)]


async def test_a_client_that_disconnects_mid_run_leaves_no_worktree(tmp_path: Path) -> None:
    root = tmp_path / "gone"
    shas = sleeper_repo(root)
    tag = token()
    with pytest.raises(BaseException):  # noqa: B017 - however the broken connection is reported
        async with stdio_client(root) as client, anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "bisect_commits", {"good": shas[0], "bad": "HEAD",
                                                               "command": f"python sleeper.py {tag}"})
            await wait_for(tag)
            raise RuntimeError("the client goes away")  # closes the server's stdin
    assert not await _none_left(tag, 15)
    deadline = time.monotonic() + 15
    while len(listed(root)) > 1 and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    assert listed(root) == [str(root)]


@pytest.mark.slow
async def test_bisect_env_codegen_worktrees_go_on_cancellation_and_the_envs_stay_cached(tmp_path: Path) -> None:
    root = make_click_repo(tmp_path / "gen", "codegen")
    (root / "sleeper.py").write_text(SLEEPER)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "sleeper")
    tag = token()
    async with stdio_client(root) as client:
        done = structured(await client.call_tool("bisect_env", {
            "package": "click", "version": "8.2.0", "command": "python repro.py", "timeout_s": 120}))
        assert done["verdict"] == "version_flips_outcome" and done["worktrees"], done["detail"]
        assert listed(root) == [str(root)]
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "bisect_env", {
                "package": "click", "version": "8.2.0", "command": "python repro.py",
                "codegen": f"python sleeper.py {tag}"})
            await wait_for(tag, 120)
            assert len(listed(root)) == 3  # both environments' worktrees
            tg.cancel_scope.cancel()
        assert not await _none_left(tag, 15)
        deadline = time.monotonic() + 15
        while len(listed(root)) > 1 and time.monotonic() < deadline:
            await anyio.sleep(0.2)
        assert listed(root) == [str(root)]
        again = structured(await client.call_tool("bisect_env", {
            "package": "click", "version": "8.2.0", "command": "python repro.py", "timeout_s": 120}))
    assert again["env_a"]["cached"] and again["env_b"]["cached"] and again["verdict"] == "version_flips_outcome"
    assert listed(root) == [str(root)]
