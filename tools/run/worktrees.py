"""Detached git worktrees under `.rootcause/worktrees/`: the user's HEAD, index and tree stay untouched.

A tool call leases the worktrees it uses (`leased`): each name is locked (`.rootcause/locks/worktrees/`,
an flock the kernel drops when the process dies) for as long as the call runs, and every worktree of the
lease is removed when the call ends: on success, on failure and on cancellation (the removal
is shielded and waits for a checkout still running in its thread). No worktree outlives the call, so
`git worktree list` shows only the user's own. A worktree left registered by a process that could not
clean up (SIGKILL) is swept at the start of the next call: registered under `.rootcause/worktrees/`
and locked by nobody.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
from filelock import FileLock, Timeout
from rootcause.tools.core import gitrepo
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import STATE_DIR, Workspace

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")
LEASES = ("locks", "worktrees")


def worktree_path(workspace: Workspace, name: str) -> Path:
    if not _NAME.match(name):
        raise UsageError(f"worktree name {name!r} is not allowed.", "use letters, digits, '.', '_' and '-'")
    return workspace.state_dir("worktrees") / name


def add_worktree(workspace: Workspace, name: str, ref: str,
                 timeout_s: float = gitrepo.CHECKOUT_TIMEOUT_S) -> Path:
    """A detached worktree of `ref` at `.rootcause/worktrees/<name>` (replacing a stale one of that name)."""
    sha = gitrepo.resolve_ref(workspace.root, ref)
    path = worktree_path(workspace, name)
    if path.exists():
        remove_worktree(workspace, name)
    try:
        with _admin(workspace):
            gitrepo.git(workspace.root, "worktree", "add", "--detach", "--force", str(path), sha,
                        timeout_s=timeout_s)
    except gitrepo.GitFailed as exc:
        raise UsageError(f"git worktree add of {sha[:10]} failed: {exc.stderr.strip()[-500:]}",
                         "check that git can check that commit out (disk space, filters, hooks)") from None
    return path


@contextmanager
def _admin(workspace: Workspace) -> Iterator[None]:
    """One `git worktree add/remove/list` of this root at a time, across threads and servers.

    git reads every entry under `.git/worktrees/` while it adds one, and dies on a sibling's entry that a
    concurrent add has created but not yet filled ("failed to read .git/worktrees/<name>/commondir")."""
    # A fresh FileLock each time: its own file descriptor, so two threads of one process exclude each other too.
    with FileLock(str(workspace.state_dir("locks") / "worktree-admin.lock"), thread_local=False):
        yield


def remove_worktree(workspace: Workspace, name: str) -> None:
    path = worktree_path(workspace, name)
    if gitrepo.repo_for(workspace.root) is not None:
        with _admin(workspace):
            # A killed `worktree add` leaves its entry locked: unlock, then a double --force removes it anyway.
            gitrepo.execute(["git", "worktree", "unlock", str(path)], workspace.root)
            gitrepo.execute(["git", "worktree", "remove", "--force", "--force", str(path)], workspace.root)
            # Not `git worktree prune`: it would drop the user's own worktrees whose folders are gone as well.
            for admin in _admin_dirs(workspace, path):
                shutil.rmtree(admin, ignore_errors=True)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _admin_dirs(workspace: Workspace, path: Path) -> list[Path]:
    """The repository's `worktrees/<name>` entries that register `path` (their gitdir file names `path/.git`)."""
    code, out, _ = gitrepo.execute(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
                                   workspace.root)
    admin_root = Path(out.strip()) / "worktrees"
    if code != 0 or not admin_root.is_dir():
        return []
    ours = (path / ".git").resolve()
    found = []
    for admin in admin_root.iterdir():
        try:
            gitdir = (admin / "gitdir").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        # worktree.useRelativePaths (git 2.48) writes it relative to the entry
        if gitdir and (admin / gitdir).resolve() == ours:
            found.append(admin)
    return found


def checkout_worktree(workspace: Workspace, name: str, ref: str,
                      timeout_s: float = gitrepo.CHECKOUT_TIMEOUT_S) -> Path:
    """Reuse the worktree `name` when it exists, moving it to `ref` (detached, forced clean)."""
    path = worktree_path(workspace, name)
    if not (path / ".git").exists():
        return add_worktree(workspace, name, ref, timeout_s)
    sha = gitrepo.resolve_ref(workspace.root, ref)
    try:
        gitrepo.git(path, "checkout", "--detach", "--force", sha, timeout_s=timeout_s)
        gitrepo.git(path, "clean", "-fdx", "-e", ".venv", timeout_s=timeout_s)
    except gitrepo.GitFailed as exc:
        raise UsageError(f"git checkout of {sha[:10]} in the worktree {name} failed: {exc.stderr.strip()[-500:]}",
                         "remove .rootcause/worktrees/" + name + " and retry") from None
    return path


def registered(workspace: Workspace) -> list[Path]:
    """Worktrees of the repository that live under this root's `.rootcause/worktrees/` (resolved paths)."""
    if gitrepo.repo_for(workspace.root) is None:
        return []
    with _admin(workspace):
        code, out, _ = gitrepo.execute(["git", "worktree", "list", "--porcelain"], workspace.root)
    if code != 0:
        return []
    folder = (workspace.root / STATE_DIR / "worktrees").resolve()
    paths = [Path(line[len("worktree "):]) for line in out.splitlines() if line.startswith("worktree ")]
    return [p for p in paths if p.resolve().parent == folder]


def _lock(workspace: Workspace, name: str) -> FileLock:
    return FileLock(str(workspace.state_dir(*LEASES) / f"{name}.lock"), thread_local=False)


def sweep(workspace: Workspace) -> list[str]:
    """Remove the worktrees (registered, or folders) under `.rootcause/worktrees/` whose lease nobody holds."""
    folder = workspace.root / STATE_DIR / "worktrees"
    if not folder.is_dir():
        return []
    names = {p.name for p in registered(workspace)}
    names |= {p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")}
    swept = []
    for name in sorted(n for n in names if _NAME.match(n)):
        lock = _lock(workspace, name)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue  # a live call (this server or another) is using it
        try:
            remove_worktree(workspace, name)
            swept.append(name)
        finally:
            lock.release()
    return swept


class WorktreeLease:
    """The worktrees of one tool call: claimed names stay locked until close(), which removes every one."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.names: list[str] = []
        self._locks: list[FileLock] = []
        self._added: set[str] = set()
        self._busy = 0
        self._closed = False
        self._cond = threading.Condition()

    def claim(self, name: str) -> str:
        """`name` when no other call holds it, else `name-<random>`; held until close()."""
        worktree_path(self.workspace, name)
        for candidate in (name, *(f"{name}-{secrets.token_hex(3)}" for _ in range(5))):
            lock = _lock(self.workspace, candidate)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            with self._cond:
                self._locks.append(lock)
                self.names.append(candidate)
            return candidate
        raise UsageError(f"every worktree name like {name!r} is in use.", "wait for the other calls to finish")

    def checkout(self, name: str, ref: str, timeout_s: float = gitrepo.CHECKOUT_TIMEOUT_S) -> Path:
        """(In a thread.) The claimed worktree `name` at `ref`: added fresh the first time, then moved."""
        if name not in self.names:
            raise ValueError(f"worktree {name} was not claimed")
        with self._cond:
            if self._closed:
                raise UsageError("the call ended before its worktree was checked out.", "run the tool again")
            self._busy += 1
        try:
            if name in self._added:
                return checkout_worktree(self.workspace, name, ref, timeout_s)
            self._added.add(name)
            return add_worktree(self.workspace, name, ref, timeout_s)
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def close(self) -> None:
        """(In a thread.) Wait for running checkouts, remove every worktree, release the names."""
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._busy == 0)
            names, locks = list(self.names), list(self._locks)
        try:
            for name in names:
                remove_worktree(self.workspace, name)
        finally:
            for lock in locks:
                lock.release()


@asynccontextmanager
async def leased(workspace: Workspace) -> AsyncIterator[WorktreeLease]:
    """A lease whose worktrees are gone when the block ends, however it ends (stale ones swept first)."""
    await asyncio.to_thread(sweep, workspace)
    lease = WorktreeLease(workspace)
    try:
        yield lease
    finally:
        # Shielded like the runner's teardown: a client's cancel must not stop the removal half-way.
        with anyio.CancelScope(shield=True):
            await asyncio.shield(asyncio.to_thread(lease.close))


@contextmanager
def temporary_worktree(workspace: Workspace, name: str, ref: str) -> Iterator[Path]:
    """A synchronous one-worktree lease (for callers outside the event loop)."""
    sweep(workspace)
    lease = WorktreeLease(workspace)
    try:
        yield lease.checkout(lease.claim(name), ref)
    finally:
        lease.close()
