"""gitrepo: every git command has a time limit; a hung git ends in a UsageError naming the command and the limit."""

from __future__ import annotations

from pathlib import Path

import git as gitpython
import pytest
from rootcause.tools.core import gitrepo
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import worktrees

from tests.conftest import git


def hanging_filter_repo(root: Path) -> Path:
    """A repository whose *.dat files pass through a clean/smudge filter that never returns (like a stuck LFS)."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("one\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "one")
    (root / ".gitattributes").write_text("*.dat filter=stuck\n")
    (root / "blob.dat").write_text("data\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "two")
    git(root, "config", "filter.stuck.clean", "sleep 300")
    git(root, "config", "filter.stuck.smudge", "sleep 300")
    # Same size, new content: diff and status must run the clean filter to tell.
    (root / "blob.dat").write_text("DATA\n")
    return root


def test_facts_of_a_repository(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("edited\n")
    (repo / "new file.txt").write_text("x\n")
    assert gitrepo.head_sha(repo) == head == gitrepo.resolve_ref(repo, "main")
    assert gitrepo.changed_files(repo) == ["README.md", "new file.txt"]
    assert gitrepo.untracked_files(repo) == ["new file.txt"]
    diff = gitrepo.working_tree_diff(repo)
    assert "+edited" in diff and "--untracked--\nnew file.txt" in diff
    assert gitrepo.file_at(repo, head, "README.md") == "# project\n"
    assert gitrepo.file_at(repo, head, "absent.md") is None
    assert gitrepo.object_at(repo, head, "README.md") == git(repo, "rev-parse", "HEAD:README.md")
    assert gitrepo.diff_hunks(repo, head, "README.md") == (1, 1, 1)
    assert gitrepo.has_changes(repo) and gitrepo.top_level(repo / ".") == repo
    assert gitrepo.is_ancestor(repo, head, head) and gitrepo.recent_commits(repo) == [git(repo, "log", "--oneline")]


def test_paths_are_relative_to_the_top_from_a_subfolder(repo: Path) -> None:
    sub = repo / "pkg"
    sub.mkdir()
    (sub / "mod.py").write_text("x = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pkg")
    head = git(repo, "rev-parse", "HEAD")
    (sub / "mod.py").write_text("x = 2\n")
    (sub / "new.py").write_text("y = 1\n")
    assert gitrepo.changed_files(sub) == ["pkg/mod.py", "pkg/new.py"]
    assert gitrepo.untracked_files(sub) == ["pkg/new.py"]
    assert gitrepo.diff_hunks(sub, head, "pkg/mod.py") == (1, 1, 1)
    assert gitrepo.file_at(sub, head, "pkg/mod.py") == "x = 1\n"
    assert gitrepo.top_level(sub) == repo and gitrepo.has_changes(sub, ".")


def test_outside_a_repository(tmp_path: Path) -> None:
    assert gitrepo.head_sha(tmp_path) is None and gitrepo.changed_files(tmp_path) == []
    assert gitrepo.file_fingerprints(tmp_path) == {} and gitrepo.top_level(tmp_path) is None
    with pytest.raises(UsageError, match="not inside a git repository"):
        gitrepo.resolve_ref(tmp_path, "HEAD")


def test_a_hung_git_is_stopped_with_the_command_and_the_limit(tmp_path: Path) -> None:
    root = hanging_filter_repo(tmp_path / "stuck")
    with pytest.raises(UsageError) as caught:
        gitrepo.git(root, "diff", "HEAD", timeout_s=1.5)
    text = str(caught.value)
    assert "`git diff HEAD` did not finish within 1.5s" in text and "filter or hook" in text


def test_gitpython_calls_of_repo_for_are_timed_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers that still use repo_for(root).git.<command>() get the same limit (RC_GIT_TIMEOUT_S)."""
    root = hanging_filter_repo(tmp_path / "stuck")
    monkeypatch.setenv("RC_GIT_TIMEOUT_S", "1.5")
    repo = gitrepo.repo_for(root)
    assert repo is not None and repo.git.rev_parse("HEAD") == git(root, "rev-parse", "HEAD")
    with pytest.raises(gitpython.GitCommandError):
        repo.git.rev_parse("--verify", "no-such-ref")
    with pytest.raises(UsageError, match=r"`git status --porcelain` did not finish within 1\.5s"):
        repo.git.status("--porcelain")
    with pytest.raises(UsageError, match=r"did not finish within 1\.5s"):
        gitrepo.changed_files(root)


def test_a_worktree_checkout_that_hangs_is_a_usage_error(tmp_path: Path) -> None:
    root = hanging_filter_repo(tmp_path / "stuck")
    ws = Workspace(root)
    with pytest.raises(UsageError, match=r"`git worktree add --detach --force .* did not finish within 2s"):
        worktrees.add_worktree(ws, "wt", "HEAD", timeout_s=2)
    worktrees.remove_worktree(ws, "wt")
    assert "wt" not in git(root, "worktree", "list")


def test_worktree_is_detached_reused_and_removed(repo: Path) -> None:
    ws = Workspace(repo)
    first = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("second\n")
    git(repo, "commit", "-q", "-am", "second")
    path = worktrees.add_worktree(ws, "wt", first)
    assert (path / "README.md").read_text() == "# project\n"
    (path / "junk.txt").write_text("left by a test\n")
    assert worktrees.checkout_worktree(ws, "wt", "HEAD") == path
    assert (path / "README.md").read_text() == "second\n" and not (path / "junk.txt").exists()
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main" and git(repo, "status", "--porcelain") == ""
    worktrees.remove_worktree(ws, "wt")
    assert not path.exists() and str(path) not in git(repo, "worktree", "list")


def test_without_git_on_path_the_module_imports_and_commands_fail_in_our_words(repo: Path) -> None:
    """gitpython raises ImportError at import when git is missing; every tool importing gitrepo crashed."""
    import subprocess
    import sys

    script = (
        "import sys; from pathlib import Path\n"
        "from rootcause.tools.core import gitrepo\n"
        "from rootcause.tools.core.errors import UsageError\n"
        "root = Path(sys.argv[1])\n"
        "print('recent', gitrepo.recent_commits(root))\n"
        "try:\n"
        "    gitrepo.git(root, 'status')\n"
        "except UsageError as exc:\n"
        "    print('error', exc)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(repo)], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(Path(sys.executable).parent)}, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    assert "recent []" in proc.stdout
    assert "error git is not installed (cannot run 'git')" in proc.stdout
