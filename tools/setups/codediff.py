"""Code differences between two trees (a commit or the working tree) from git: every hunk, and the diff stat."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rootcause.tools.core import gitrepo
from rootcause.tools.setups.models import Difference

MAX_FILE_BYTES = 2_000_000
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


@dataclass
class CodeDiff:
    differences: list[Difference] = field(default_factory=list)
    stat: str = ""
    files: list[str] = field(default_factory=list)


def _top(repo: gitrepo.Repo, root: Path) -> Path:
    return Path(repo.working_tree_dir or root)


def _subdir(repo: gitrepo.Repo, root: Path) -> str:
    rel = root.resolve().relative_to(_top(repo, root).resolve())
    return "" if str(rel) == "." else rel.as_posix()


def _diff_args(good: str | None, bad: str | None) -> list[str]:
    """git diff arguments so that '-' is the good side and '+' the bad side (None = the working tree)."""
    if good and bad:
        return [good, bad]
    if good:
        return [good]
    assert bad is not None
    return ["-R", bad]


def code_diff(repo: gitrepo.Repo, root: Path, good: str | None, bad: str | None) -> CodeDiff:
    """Every changed hunk between the good and the bad tree, confined to the root's folder of the repository."""
    sub = _subdir(repo, root)
    scope = [f"--relative={sub}"] if sub else []
    args = ["--no-color", "--no-ext-diff", "--no-prefix", "-M", *scope, *_diff_args(good, bad)]
    result = CodeDiff()
    top = _top(repo, root)
    result.stat = gitrepo.git(top, "diff", "--stat=200", *args, strip=False).rstrip("\n")
    _parse(gitrepo.git(top, "diff", "-U3", *args, strip=False), result)
    if good is None or bad is None:
        _untracked(repo, root, sub, result, working_side="good" if good is None else "bad")
    return result


def _parse(text: str, result: CodeDiff) -> None:
    path = ""
    hunk: list[str] | None = None
    header = ""

    def flush() -> None:
        if hunk is None:
            return
        removed = [line[1:] for line in hunk if line.startswith("-")]
        added = [line[1:] for line in hunk if line.startswith("+")]
        result.differences.append(Difference(kind="code", key=f"{path} {header}".rstrip(), file=path,
                                             good="\n".join(removed) if removed else None,
                                             bad="\n".join(added) if added else None))

    old = new = ""
    for line in text.splitlines():
        if line.startswith("diff --git "):
            flush()
            hunk, old, new = None, "", ""
            both = line[len("diff --git "):]
            path = both[len(both) // 2 + 1:] if len(both) % 2 == 1 else both  # "<path> <path>" without prefixes
            result.files.append(path)
        elif hunk is None and line.startswith("--- "):
            old = line[4:]
        elif hunk is None and line.startswith("+++ "):
            new = line[4:]
            path = new if new != "/dev/null" else old
            result.files[-1] = path
        elif hunk is None and line.startswith("rename from "):
            old = line[len("rename from "):]
        elif hunk is None and line.startswith("rename to "):
            new = line[len("rename to "):]
            result.differences.append(Difference(kind="code", key=f"{old} -> {new} (renamed)", file=new,
                                                 good=old, bad=new))
            path = new
            result.files[-1] = path
        elif hunk is None and line.startswith(("new file mode", "deleted file mode")):
            continue
        elif hunk is None and line.startswith("Binary files"):
            result.differences.append(Difference(kind="code", key=f"{path} (binary)", file=path,
                                                 good=None if "/dev/null and" in line else "binary",
                                                 bad=None if line.rstrip().endswith("/dev/null differ") else "binary"))
        elif _HUNK.match(line):
            flush()
            match = _HUNK.match(line)
            assert match is not None
            header = line
            hunk = []
        elif hunk is not None and line[:1] in {"-", "+", " ", "\\"}:
            hunk.append(line)
    flush()


def _untracked(repo: gitrepo.Repo, root: Path, sub: str, result: CodeDiff, working_side: str) -> None:
    """Untracked files exist only in the working tree: each is a whole-file difference on that side."""
    top = _top(repo, root)
    for name in gitrepo.untracked_files(top):
        if sub and not name.startswith(sub + "/"):
            continue
        rel = name[len(sub) + 1:] if sub else name
        path = top / name
        try:
            data = path.read_bytes()[:MAX_FILE_BYTES]
        except OSError:
            continue
        text = data.decode("utf-8", "replace") if b"\x00" not in data else "binary"
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        key = f"{rel} (untracked, {lines} lines)"
        good, bad = (text, None) if working_side == "good" else (None, text)
        result.files.append(rel)
        result.differences.append(Difference(kind="code", key=key, file=rel, good=good, bad=bad))
        result.stat += f"\n {rel} | untracked"


def read_at(repo: gitrepo.Repo | None, root: Path, sha: str | None, path: Path) -> str | None:
    """A file's text at a commit (None: absent there) or on disk when sha is None."""
    if sha is None:
        if not path.is_file():
            return None
        return path.read_bytes()[:MAX_FILE_BYTES].decode("utf-8", "replace")
    top = (_top(repo, root) if repo is not None else root).resolve()
    rel = path.resolve().relative_to(top).as_posix() if path.is_absolute() else path.as_posix()
    return gitrepo.file_at(top, sha, rel)
