"""Detached git worktrees under `.rootcause/worktrees/`: the user's HEAD, index and tree stay untouched."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import git

from tools import gitrepo
from tools.errors import UsageError
from tools.workspace import Workspace

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


def worktree_path(workspace: Workspace, name: str) -> Path:
    if not _NAME.match(name):
        raise UsageError(f"worktree name {name!r} is not allowed.", "use letters, digits, '.', '_' and '-'")
    return workspace.state_dir("worktrees") / name


def add_worktree(workspace: Workspace, name: str, ref: str) -> Path:
    """A detached worktree of `ref` at `.rootcause/worktrees/<name>` (replacing a stale one of that name)."""
    sha = gitrepo.resolve_ref(workspace.root, ref)
    repo = gitrepo.repo_for(workspace.root)
    assert repo is not None  # resolve_ref checked it
    path = worktree_path(workspace, name)
    if path.exists():
        remove_worktree(workspace, name)
    repo.git.worktree("add", "--detach", "--force", str(path), sha)
    return path


def remove_worktree(workspace: Workspace, name: str) -> None:
    repo = gitrepo.repo_for(workspace.root)
    path = worktree_path(workspace, name)
    if repo is not None:
        try:
            repo.git.worktree("remove", "--force", str(path))
        except git.GitCommandError:
            pass
        repo.git.worktree("prune")
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def checkout_worktree(workspace: Workspace, name: str, ref: str) -> Path:
    """Reuse the worktree `name` when it exists, moving it to `ref` (detached, forced clean)."""
    path = worktree_path(workspace, name)
    if not (path / ".git").exists():
        return add_worktree(workspace, name, ref)
    sha = gitrepo.resolve_ref(workspace.root, ref)
    wt = git.Repo(path)
    wt.git.checkout("--detach", "--force", sha)
    wt.git.clean("-fdx", "-e", ".venv")
    return path


@contextmanager
def temporary_worktree(workspace: Workspace, name: str, ref: str) -> Iterator[Path]:
    path = add_worktree(workspace, name, ref)
    try:
        yield path
    finally:
        remove_worktree(workspace, name)
