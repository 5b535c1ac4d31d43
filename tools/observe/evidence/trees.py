"""Which tree an experiment's code came from: the root's working tree, another git tree inside the root
(a worktree, a copy), or a place outside the root that rootcause cannot see (a patched copy in /tmp)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from rootcause.tools.core import gitrepo
from rootcause.tools.observe.evidence.declaration import RunDeclaration

_CODE_SUFFIXES = (".py", ".sh")
_SYSTEM = ("/usr/", "/bin/", "/lib", "/etc/", "/dev/", "/proc/", "/sys/", "/opt/")


class ExperimentTree(BaseModel):
    kind: Literal["root", "other_tree", "unseen"]
    path: Path | None = None
    why: str = ""


def _words(decl: RunDeclaration) -> list[str]:
    if decl.argv[:2] == ["/bin/sh", "-c"] and len(decl.argv) > 2:
        try:
            return shlex.split(decl.argv[2], comments=True)
        except ValueError:
            return decl.argv[2].split()
    return decl.argv


def _candidates(decl: RunDeclaration) -> list[tuple[str, bool]]:
    """(word, is_folder_hint) for every word that names code or a folder the command runs from."""
    words = _words(decl)
    found: list[tuple[str, bool]] = []
    for i, word in enumerate(words):
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        after_cd = i > 0 and words[i - 1] in {"cd", "pushd", "-C", "--rootdir", "--chdir"}
        if after_cd or value.endswith(_CODE_SUFFIXES) or (os.sep in value and not value.startswith("-")):
            found.append((value, after_cd))
    return found


def _ignored(path: Path) -> bool:
    text = str(path)
    prefixes = {sys.prefix, sys.base_prefix}
    return text.startswith(_SYSTEM) or any(text.startswith(p + os.sep) for p in prefixes) or \
        "site-packages" in path.parts


def experiment_tree(decl: RunDeclaration, root: Path) -> ExperimentTree:
    """The tree whose code the command runs: judged from its folder and the paths its words name."""
    root = root.resolve()
    top = gitrepo.top_level(root)
    places = [(str(decl.cwd), True), *_candidates(decl)]
    other: Path | None = None
    for word, folder in places:
        path = Path(word) if os.path.isabs(word) else decl.cwd / word
        try:
            path = path.resolve()
        except (OSError, RuntimeError):
            continue
        if not path.exists() or _ignored(path):
            continue
        if not path.is_relative_to(root):
            if folder or path.suffix in _CODE_SUFFIXES:
                return ExperimentTree(kind="unseen", path=path,
                                      why=f"the experiment runs {path}, outside the root: rootcause cannot see "
                                          "what it changed")
            continue
        tree = gitrepo.top_level(path if path.is_dir() else path.parent)
        if tree is not None and top is not None and tree.resolve() != top.resolve():
            other = tree.resolve()
    if other is not None:
        return ExperimentTree(kind="other_tree", path=other, why=f"the experiment runs in the git tree {other}")
    return ExperimentTree(kind="root", path=root, why="the experiment runs the working tree")
