"""Worktree leases on real git repositories: every worktree a call registers is gone when it ends, however it ends."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio
import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.engines.bisect_commits import BisectCommitsInput, bisect_commits
from rootcause.tools.run import worktrees

from tests.conftest import git
from tests.test_bisect import make_history

pytestmark = pytest.mark.anyio


def listed(root: Path) -> list[str]:
    """`git worktree list --porcelain`: the paths git has registered."""
    return [line.split(" ", 1)[1] for line in git(root, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


async def test_a_lease_removes_its_worktrees_when_the_block_fails(repo: Path) -> None:
    ws = Workspace(repo)
    with pytest.raises(RuntimeError):
        async with worktrees.leased(ws) as lease:
            names = [lease.claim("one"), lease.claim("two")]
            for name in names:
                path = await anyio.to_thread.run_sync(lease.checkout, name, "HEAD")
                assert (path / "README.md").is_file()
            assert len(listed(repo)) == 3
            raise RuntimeError("the tool failed")
    assert listed(repo) == [str(repo)]
    assert not any((repo / ".rootcause" / "worktrees").iterdir())


async def test_a_name_another_call_holds_is_not_shared(repo: Path) -> None:
    ws = Workspace(repo)
    async with worktrees.leased(ws) as first, worktrees.leased(ws) as second:
        a, b = first.claim("bisect-commits"), second.claim("bisect-commits")
        assert a == "bisect-commits" and b.startswith("bisect-commits-") and b != a
        await anyio.to_thread.run_sync(first.checkout, a, "HEAD")
        await anyio.to_thread.run_sync(second.checkout, b, "HEAD")
    assert listed(repo) == [str(repo)]


async def test_worktrees_added_at_once_in_threads_all_check_out(repo: Path) -> None:
    """bisect_env checks its two sides out in parallel threads; git's `worktree add` dies on a sibling's entry
    that is half-made, so every add must see the others' entries whole (raw git here: 1 failed add in 120)."""
    for i in range(300):  # a checkout that takes a while widens the window
        (repo / f"data_{i}.txt").write_text(f"{i}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "data")
    ws = Workspace(repo)
    for _ in range(5):
        async with worktrees.leased(ws) as lease:
            names = [lease.claim(f"side-{i}") for i in range(8)]
            paths: list[Path] = []

            async def add(name: str, into: list[Path] = paths) -> None:
                into.append(await anyio.to_thread.run_sync(lease.checkout, name, "HEAD"))

            async with anyio.create_task_group() as tg:
                for name in names:
                    tg.start_soon(add, name)
            assert sorted(p.name for p in paths) == sorted(names)
            assert all((p / "README.md").is_file() for p in paths)
        assert listed(repo) == [str(repo)]


async def test_stale_worktrees_are_swept_and_live_ones_kept(repo: Path) -> None:
    """A worktree an older rootcause kept (keep=True) or a SIGKILLed server left is swept at the next call; one
    that a running call holds is not."""
    ws = Workspace(repo)
    worktrees.add_worktree(ws, "bisect-commits", "HEAD")  # left registered, nobody's lease
    (repo / ".rootcause" / "worktrees" / "half-made").mkdir()  # a folder without registration
    async with worktrees.leased(ws) as live:
        name = live.claim("collateral-live")
        await anyio.to_thread.run_sync(live.checkout, name, "HEAD")
        async with worktrees.leased(ws):
            paths = listed(repo)
            assert str(repo / ".rootcause" / "worktrees" / "collateral-live") in paths
            assert not any(p.endswith("bisect-commits") for p in paths)
            assert not (repo / ".rootcause" / "worktrees" / "half-made").exists()
    assert listed(repo) == [str(repo)]


async def test_cancellation_during_a_checkout_waits_for_it_then_removes_the_worktree(repo: Path) -> None:
    """The checkout runs in a thread that cancellation cannot stop (a slow smudge filter): the shielded removal
    waits for it, so nothing is registered once the cancelled call returns."""
    (repo / ".gitattributes").write_text("*.dat filter=slow\n")
    (repo / "blob.dat").write_text("data\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "data")
    git(repo, "config", "filter.slow.smudge", "sleep 2; cat")
    ws = Workspace(repo)
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        async with worktrees.leased(ws) as lease:
            await anyio.to_thread.run_sync(lease.checkout, lease.claim("slow"), "HEAD", abandon_on_cancel=True)
    assert scope.cancelled_caught and time.monotonic() - started >= 1.5  # it waited for git to finish
    assert listed(repo) == [str(repo)]
    assert not (repo / ".rootcause" / "worktrees" / "slow").exists()


async def test_a_checkout_after_the_lease_closed_is_refused(repo: Path) -> None:
    ws = Workspace(repo)
    async with worktrees.leased(ws) as lease:
        name = lease.claim("late")
    with pytest.raises(UsageError, match="ended before its worktree"):
        lease.checkout(name, "HEAD")
    assert listed(repo) == [str(repo)]


async def test_bisect_commits_keeps_no_worktree_with_keep_true(tmp_path: Path) -> None:
    root = tmp_path / "history"
    shas = make_history(root, commits=6, bug_at=4, skip_at=None)
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python check.py",
                                                     keep=True), ToolContext.for_root(root))
    assert result.status == "found" and result.first_bad_commit.sha == shas[3]
    assert listed(root) == [str(root)] and not any((root / ".rootcause" / "worktrees").iterdir())


async def test_a_users_dangling_worktree_survives_a_bisect(tmp_path: Path) -> None:
    """The user's own worktree whose folder is gone stays registered: rootcause removes only its own entries
    (no `git worktree prune`), also when one of its own was left dangling."""
    root = tmp_path / "history"
    shas = make_history(root, commits=6, bug_at=4, skip_at=None)
    user = tmp_path / "users-experiment"
    git(root, "worktree", "add", "-q", "--detach", str(user), shas[1])
    ws = Workspace(root)
    ours = worktrees.add_worktree(ws, "bisect-commits", "HEAD")  # left by a killed call
    shutil.rmtree(user)
    shutil.rmtree(ours)
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python check.py"),
                                  ToolContext.for_root(root))
    assert result.status == "found" and result.first_bad_commit.sha == shas[3]
    assert listed(root) == [str(root), str(user)]
    assert "prunable" in git(root, "worktree", "list", "--porcelain")  # still the user's to prune
    admin = Path(git(root, "rev-parse", "--git-common-dir").strip())
    admin = admin if admin.is_absolute() else root / admin
    assert [p.name for p in (admin / "worktrees").iterdir()] == ["users-experiment"]
