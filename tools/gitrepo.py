"""Read-only facts about the root's git repository (gitpython); None/empty outside a repo."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import git

from tools.errors import UsageError


@lru_cache(maxsize=32)
def _repo(root: str) -> git.Repo | None:
    try:
        return git.Repo(root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def repo_for(root: Path) -> git.Repo | None:
    return _repo(str(root))


def head_sha(root: Path) -> str | None:
    repo = repo_for(root)
    if repo is None:
        return None
    # Plain git commands only: gitpython's object database would keep a `git cat-file` child alive.
    try:
        return repo.git.rev_parse("--verify", "--quiet", "HEAD^{commit}") or None
    except git.GitCommandError:  # no commits yet
        return None


def working_tree_diff(root: Path) -> str:
    """`git diff HEAD` plus the names of untracked files: the edits since the last commit."""
    repo = repo_for(root)
    if repo is None:
        return ""
    try:
        diff = repo.git.diff("HEAD") if head_sha(root) else repo.git.diff("--cached")
    except git.GitCommandError:
        diff = ""
    untracked = "\n".join(sorted(repo.untracked_files))
    return diff + ("\n--untracked--\n" + untracked if untracked else "")


def diff_hash(root: Path) -> str:
    return hashlib.sha256(working_tree_diff(root).encode("utf-8", "replace")).hexdigest()[:16]


def recent_commits(root: Path, count: int = 10) -> list[str]:
    repo = repo_for(root)
    if repo is None or head_sha(root) is None:
        return []
    return repo.git.log("--oneline", f"-{count}").splitlines()


def changed_files(root: Path) -> list[str]:
    """Paths (relative to the repository top) changed in the working tree: staged, unstaged, untracked."""
    repo = repo_for(root)
    if repo is None:
        return []
    names: set[str] = set()
    records = iter(repo.git.status("--porcelain=v1", "-z", "--untracked-files=all").split("\0"))
    for record in records:
        if len(record) < 4:
            continue
        names.add(record[3:])
        if record[0] in "RC":  # a rename or copy: the next record is its source path
            names.add(next(records, ""))
    return sorted(n for n in names if n)


MAX_REF_CHARS = 1_000  # longer is no ref, and past 128 KB git cannot even be started with it


def resolve_ref(root: Path, ref: str) -> str:
    """The commit sha a ref names; refuses option-like refs and refs that do not resolve."""
    if not ref or ref.startswith("-") or len(ref) > MAX_REF_CHARS or any(c in ref for c in "\x00\n\r "):
        raise UsageError(f"git ref {ref[:200]!r} is not a valid ref.", "name a branch, tag or commit (not an option)")
    repo = repo_for(root)
    if repo is None:
        raise UsageError(f"{root} is not inside a git repository.", "run the server in a git checkout")
    try:
        return repo.git.rev_parse("--verify", "--end-of-options", f"{ref}^{{commit}}")
    except git.GitCommandError:
        raise UsageError(f"git ref {ref!r} does not resolve to a commit.", "check `git log --oneline`") from None


def blob_sha(path: Path) -> str:
    """Git's blob id of a file's current content (computed here, nothing written to .git); 'missing' if absent."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return "missing"
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def file_fingerprints(root: Path, limit: int = 2_000) -> dict[str, str]:
    """{path: blob id} of every changed or untracked file (at most `limit`): tells later edits from earlier ones."""
    repo = repo_for(root)
    if repo is None or not repo.working_tree_dir:
        return {}
    top = Path(repo.working_tree_dir)
    return {name: blob_sha(top / name) for name in changed_files(root)[:limit]}
