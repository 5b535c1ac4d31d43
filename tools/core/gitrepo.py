"""Every git command rootcause runs, each with a timeout; read-only facts about the root's repository.

`git(cwd, *args)` is the one way to run git: its own process group, no terminal prompt
(GIT_TERMINAL_PROMPT=0), no optional locks, and a time limit after which the whole group is
killed and a UsageError names the command and the limit (a credential prompt, another git's
lock, a hanging filter or hook). `repo_for` still hands out a gitpython Repo for its
discovery, but that Repo's `.git.<command>()` calls run through the same timed executor.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

# Without git on PATH, gitpython raises ImportError at import and every tool that imports this module
# crashed; quiet, the commands themselves fail through `execute` with our error instead.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import git as gitpython
from rootcause.tools.core.errors import UsageError

DEFAULT_TIMEOUT_S = 120.0
"""Limit of one git command unless the caller gives one; RC_GIT_TIMEOUT_S overrides it."""
CHECKOUT_TIMEOUT_S = 600.0
"""Limit for commands that write a whole tree (worktree add, checkout) in a large repository."""
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}


class GitFailed(Exception):
    """git ran and exited non-zero: the command, its exit code and what it printed on stderr."""

    def __init__(self, args: tuple[str, ...], code: int, stderr: str, stdout: str = "") -> None:
        self.args_, self.code, self.stderr, self.stdout = args, code, stderr, stdout
        super().__init__(f"git {' '.join(args)[:300]} exited {code}: {stderr.strip()[-500:]}")


def default_timeout() -> float:
    raw = os.environ.get("RC_GIT_TIMEOUT_S", "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if 0 < value < 86_400 else DEFAULT_TIMEOUT_S


def _describe(args: list[str] | tuple[str, ...]) -> str:
    text = " ".join(args)
    return text if len(text) <= 200 else text[:197] + "..."


def execute(argv: list[str], cwd: Path | str, *, timeout_s: float | None = None,
            env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run a git argv (argv[0] is the git executable) to completion or its time limit: (exit code, stdout, stderr)."""
    limit = timeout_s if timeout_s is not None else default_timeout()
    try:
        proc = subprocess.Popen(argv, cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={**os.environ, **(env or {}), **GIT_ENV},
                                start_new_session=True)
    except FileNotFoundError:
        raise UsageError(f"git is not installed (cannot run {argv[0]!r}).", "install git and restart the server") \
            from None
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise stopped(argv[1:], limit, cwd) from None
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def stopped(args: list[str] | tuple[str, ...], limit: float, cwd: Path | str) -> UsageError:
    """The error for a git command stopped at its time limit (also for git run through the runner)."""
    return UsageError(
        f"`git {_describe(args)}` did not finish within {limit:g}s (in {cwd}) and was stopped.",
        "git waits like this on a credential prompt, another git's lock, or a slow filter or hook; run the same "
        "command in a terminal there to see what it waits for (RC_GIT_TIMEOUT_S raises the limit)")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # a descendant that left the group still holds the pipes
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()


def git(cwd: Path | str, *args: str, timeout_s: float | None = None, ok: tuple[int, ...] = (0,),
        strip: bool = True) -> str:
    """stdout of `git <args>` run in `cwd`; GitFailed when the exit code is not in `ok`."""
    code, out, err = execute(["git", *args], cwd, timeout_s=timeout_s)
    if code not in ok:
        raise GitFailed(args, code, err, out)
    return out.strip() if strip else out


def succeeds(cwd: Path | str, *args: str, timeout_s: float | None = None) -> bool:
    """Whether `git <args>` exits 0 (for the yes/no commands: merge-base --is-ancestor, rev-parse --verify)."""
    return execute(["git", *args], cwd, timeout_s=timeout_s)[0] == 0


class _TimedGit(gitpython.Git):
    """gitpython's command wrapper with every one-off command run by `execute` above (timed, own group)."""

    def execute(self, command: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        streaming = args or kwargs.get("as_process") or kwargs.get("output_stream") is not None \
            or kwargs.get("istream") is not None
        if streaming or isinstance(command, str):
            kwargs.setdefault("kill_after_timeout", default_timeout())
            return super().execute(command, *args, **kwargs)
        code, out, err = execute(list(command), self._working_dir or os.getcwd(),
                                 timeout_s=kwargs.get("kill_after_timeout"),
                                 env={**self._environment, **(kwargs.get("env") or {})})
        if kwargs.get("strip_newline_in_stdout", True) and out.endswith("\n"):
            out = out[:-1]
        err = err.rstrip("\n")
        if code != 0 and kwargs.get("with_exceptions", True):
            raise gitpython.GitCommandError(list(command), code, err, out)
        return (code, out, err) if kwargs.get("with_extended_output") else out


class Repo(gitpython.Repo):
    """A gitpython Repo whose commands are timed; untracked_files without gitpython's untimed stream."""

    GitCommandWrapperType = _TimedGit

    @property
    def untracked_files(self) -> list[str]:  # type: ignore[override]
        return untracked_files(Path(self.working_tree_dir or self.working_dir))


@lru_cache(maxsize=32)
def _repo(root: str) -> Repo | None:
    try:
        return Repo(root, search_parent_directories=True)
    except (gitpython.InvalidGitRepositoryError, gitpython.NoSuchPathError):
        return None


def repo_for(root: Path) -> Repo | None:
    return _repo(str(root))


def top_level(root: Path) -> Path | None:
    """The working tree's top folder of the repository holding `root` (None outside git or in a bare one)."""
    repo = repo_for(root)
    return Path(repo.working_tree_dir) if repo is not None and repo.working_tree_dir else None


def head_sha(root: Path) -> str | None:
    if repo_for(root) is None:
        return None
    try:
        return git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}") or None
    except GitFailed:  # no commits yet
        return None


def untracked_files(root: Path) -> list[str]:
    """Untracked, not ignored files, relative to the repository top."""
    out = git(root, "ls-files", "-z", "--others", "--exclude-standard", "--full-name", "--", ":/", strip=False)
    return sorted(name for name in out.split("\0") if name)


def working_tree_diff(root: Path) -> str:
    """`git diff HEAD` plus the names of untracked files: the edits since the last commit."""
    if repo_for(root) is None:
        return ""
    try:
        diff = git(root, "diff", "HEAD") if head_sha(root) else git(root, "diff", "--cached")
    except GitFailed:
        diff = ""
    untracked = "\n".join(untracked_files(root))
    return diff + ("\n--untracked--\n" + untracked if untracked else "")


def diff_hash(root: Path) -> str:
    return hashlib.sha256(working_tree_diff(root).encode("utf-8", "replace")).hexdigest()[:16]


def recent_commits(root: Path, count: int = 10) -> list[str]:
    """Context for a run's report: none (rather than an error) when git itself is not installed."""
    if shutil.which("git") is None or repo_for(root) is None or head_sha(root) is None:
        return []
    return git(root, "log", "--oneline", f"-{count}").splitlines()


def changed_files(root: Path) -> list[str]:
    """Paths (relative to the repository top) changed in the working tree: staged, unstaged, untracked."""
    if repo_for(root) is None:
        return []
    names: set[str] = set()
    records = iter(git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", strip=False).split("\0"))
    for record in records:
        if len(record) < 4:
            continue
        names.add(record[3:])
        if record[0] in "RC":  # a rename or copy: the next record is its source path
            names.add(next(records, ""))
    return sorted(n for n in names if n)


def files_changed_between(root: Path, old: str, new: str) -> list[str]:
    """Paths (relative to the repository top) whose content differs between two commits (renames as two paths)."""
    return [n for n in git(root, "diff", "--name-only", "--no-renames", old, new).splitlines() if n]


def has_changes(root: Path, *paths: str) -> bool:
    """Whether `git status` shows anything (tracked edits or untracked files) under `paths` (default: root)."""
    return bool(git(root, "status", "--porcelain", "--untracked-files=normal", "--", *(paths or (".",))))


def object_at(root: Path, commit: str, path: str) -> str | None:
    """The blob id of `path` (relative to the repository top) in `commit`, None when it does not exist there."""
    try:
        return git(root, "rev-parse", "--verify", "--quiet", f"{commit}:{path}") or None
    except GitFailed:
        return None


def file_at(root: Path, commit: str, path: str) -> str | None:
    """The text of `path` (relative to the repository top) in `commit`, None when it does not exist there."""
    try:
        return git(root, "show", f"{commit}:{path}", strip=False)
    except GitFailed:
        return None


def diff_hunks(root: Path, old: str, path: str) -> tuple[int, int, int]:
    """(hunks, added lines, removed lines) of one file between a commit and the working tree."""
    text = git(root, "diff", "-U0", "--no-color", "--no-ext-diff", old, "--", f":(top){path}")
    hunks = added = removed = 0
    for line in text.splitlines():
        if line.startswith("@@"):
            hunks += 1
        elif line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return hunks, added, removed


def is_ancestor(root: Path, old: str, new: str) -> bool:
    return succeeds(root, "merge-base", "--is-ancestor", old, new)


MAX_REF_CHARS = 1_000  # longer is no ref, and past 128 KB git cannot even be started with it


def resolve_ref(root: Path, ref: str) -> str:
    """The commit sha a ref names; refuses option-like refs and refs that do not resolve."""
    if not ref or ref.startswith("-") or len(ref) > MAX_REF_CHARS or any(c in ref for c in "\x00\n\r "):
        raise UsageError(f"git ref {ref[:200]!r} is not a valid ref.", "name a branch, tag or commit (not an option)")
    if repo_for(root) is None:
        raise UsageError(f"{root} is not inside a git repository.", "run the server in a git checkout")
    try:
        return git(root, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
    except GitFailed:
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
    top = top_level(root)
    if top is None:
        return {}
    return {name: blob_sha(top / name) for name in changed_files(root)[:limit]}
