"""Detached git worktrees under `.rootcause/worktrees/`: the user's HEAD, index and tree stay untouched."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rootcause.tools.core import gitrepo
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


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
        gitrepo.git(workspace.root, "worktree", "add", "--detach", "--force", str(path), sha, timeout_s=timeout_s)
    except gitrepo.GitFailed as exc:
        raise UsageError(f"git worktree add of {sha[:10]} failed: {exc.stderr.strip()[-500:]}",
                         "check that git can check that commit out (disk space, filters, hooks)") from None
    return path


def remove_worktree(workspace: Workspace, name: str) -> None:
    path = worktree_path(workspace, name)
    if gitrepo.repo_for(workspace.root) is not None:
        # A killed `worktree add` leaves its entry locked: unlock, then a double --force removes it anyway.
        gitrepo.execute(["git", "worktree", "unlock", str(path)], workspace.root)
        gitrepo.execute(["git", "worktree", "remove", "--force", "--force", str(path)], workspace.root)
        gitrepo.execute(["git", "worktree", "prune"], workspace.root)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


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


@contextmanager
def temporary_worktree(workspace: Workspace, name: str, ref: str) -> Iterator[Path]:
    path = add_worktree(workspace, name, ref)
    try:
        yield path
    finally:
        remove_worktree(workspace, name)
