"""Which tree an experiment's code came from: the root's working tree, another git tree inside the root
(a worktree, a copy), or a place outside the root that rootcause cannot see (a patched copy in /tmp).

Decided from what the command runs: its folder, the code files and folders its words name, and for a
driver script outside the root what that driver reaches inside it (the project modules it imports,
the paths it names). After the run, the tracebacks' frames settle what the words could not.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from rootcause.tools.core import gitrepo
from rootcause.tools.observe.evidence.declaration import RunDeclaration
from rootcause.tools.run.scripts import command_words, script_text, shell_words

_CODE_SUFFIXES = (".py", ".sh")
_SYSTEM = ("/usr/", "/bin/", "/lib", "/etc/", "/dev/", "/proc/", "/sys/", "/opt/")
_MAX_DRIVER_BYTES = 1_000_000
_MAX_LITERAL_CHARS = 4_096


class ExperimentTree(BaseModel):
    kind: Literal["root", "other_tree", "unseen"]
    path: Path | None = None
    why: str = ""
    scripts: list[str] = Field(default_factory=list, description="The code files the command names inside the "
                                                                 "tree, relative to its top: its own entry points.")
    driver: str | None = Field(None, description="A script outside the root that runs the root's code.")


def _candidates(words: list[str]) -> list[tuple[str, bool]]:
    """(word, is_folder_hint) for every word that names code or a folder the command runs from."""
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
        "site-packages" in path.parts or "dist-packages" in path.parts


def _resolve(word: str, base: Path) -> Path | None:
    try:
        path = (Path(word) if os.path.isabs(word) else base / word).resolve()
        return path if path.exists() and not _ignored(path) else None
    except (OSError, RuntimeError, ValueError):
        return None


def _driver_reach(script: Path, decl: RunDeclaration, root: Path) -> list[tuple[Path, str]]:
    """What a script outside the root runs inside it: (file or folder, how) for every project module it imports
    and every path it names there. Empty: the script runs its own code (a patched copy)."""
    try:
        if script.stat().st_size > _MAX_DRIVER_BYTES:
            return []
    except OSError:
        return []
    text = script_text(script, _MAX_DRIVER_BYTES)
    if text is None:
        return []
    literals: list[str] = []
    modules: list[str] = []
    if script.suffix == ".py":
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            return []
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < _MAX_LITERAL_CHARS:
                literals.append(node.value)
            elif isinstance(node, ast.Import):
                modules += [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.append(node.module.split(".")[0])
    else:
        literals = shell_words(text)
    reached: list[tuple[Path, str]] = []
    for value in literals:
        if os.sep not in value and not value.endswith(_CODE_SUFFIXES):
            continue
        for base in (decl.cwd, root):
            path = _resolve(value, base)
            if path is not None and path.is_relative_to(root):
                reached.append((path, f"names {value}"))
                break
    folders = [p for p, _ in reached if p.is_dir()]
    python_path = [Path(p) for p in decl.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    bases = [script.parent, *folders, *python_path, root, root / "src"]
    for name in dict.fromkeys(modules):
        if name in sys.stdlib_module_names:
            continue
        for base in bases:
            hit = next((c for c in (base / f"{name}.py", base / name) if c.exists()), None)
            if hit is not None:
                if hit.resolve().is_relative_to(root) and not _ignored(hit.resolve()):
                    reached.append((hit.resolve(), f"imports {name}"))
                break
    return reached


def experiment_tree(decl: RunDeclaration, root: Path) -> ExperimentTree:
    """The tree whose code the command runs: judged from its folder, the paths its words name and what a driver
    script outside the root reaches inside it."""
    root = root.resolve()
    top = gitrepo.top_level(root)
    queue: list[tuple[str, bool]] = [(str(decl.cwd), True), *_candidates(command_words(decl.argv))]
    seen: set[Path] = set()
    other: Path | None = None
    scripts: list[Path] = []
    driver: Path | None = None
    how: list[str] = []
    own_code: Path | None = None
    outside_folder: Path | None = None
    while queue:
        word, folder = queue.pop(0)
        path = _resolve(word, decl.cwd)
        if path is None or path in seen:
            continue
        seen.add(path)
        if not path.is_relative_to(root):
            if folder and path.is_dir():
                outside_folder = outside_folder or path
            elif path.suffix in _CODE_SUFFIXES:
                reach = _driver_reach(path, decl, root)
                if not reach:
                    own_code = own_code or path
                    continue
                driver = driver or path
                how += [h for _, h in reach if h not in how]
                queue += [(str(p), False) for p, _ in reach]
            continue
        tree = gitrepo.top_level(path if path.is_dir() else path.parent)
        if tree is not None and top is not None and tree.resolve() != top.resolve():
            other = tree.resolve()
        if path.is_file() and path.suffix in _CODE_SUFFIXES and driver is None:
            scripts.append(path)
    if own_code is not None:
        return ExperimentTree(kind="unseen", path=own_code,
                              why=f"the experiment runs {own_code}, outside the root, and that script reaches "
                                  "no code inside it (it imports no project module, names no file there): "
                                  "rootcause cannot see what it changed")
    if outside_folder is not None and driver is None:
        return ExperimentTree(kind="unseen", path=outside_folder,
                              why=f"the experiment runs from {outside_folder}, outside the root: rootcause cannot "
                                  "see what it changed")
    drove = (f"; its driver {driver} is outside the root and runs the project's code ({', '.join(how[:4])}), "
             "the driver itself is not checked") if driver is not None else ""
    if other is not None:
        return ExperimentTree(kind="other_tree", path=other, scripts=_relative(scripts, other),
                              driver=str(driver) if driver else None,
                              why=f"the experiment runs in the git tree {other}{drove}")
    return ExperimentTree(kind="root", path=root, scripts=_relative(scripts, top or root),
                          driver=str(driver) if driver else None, why=f"the experiment runs the working tree{drove}")


def settle_tree(tree: ExperimentTree, root: Path, cwd: Path, frame_files: list[str],
                outside_root: list[str]) -> ExperimentTree:
    """The tree once the run is over: project code it imported from outside the root means the tree's changes are
    not what ran; a traceback naming files inside the root shows which tree code the words did not reveal ran."""
    root = root.resolve()
    if outside_root:
        return ExperimentTree(kind="unseen", path=Path(outside_root[0]),
                              why=f"the run imported the project's code from outside the root ({outside_root[0]}): "
                                  "what changed there cannot be seen")
    if tree.kind != "unseen":
        return tree
    inside = [p for p in (_resolve(f, cwd) for f in frame_files) if p is not None and p.is_relative_to(root)]
    if not inside:
        return tree
    top = gitrepo.top_level(root)
    found = gitrepo.top_level(inside[0].parent)
    shown = f"; the run's traceback names {inside[0]}, inside the root ({tree.why})"
    if found is not None and top is not None and found.resolve() != top.resolve():
        return ExperimentTree(kind="other_tree", path=found.resolve(), why=f"the experiment runs in the git tree "
                                                                           f"{found.resolve()}{shown}")
    return ExperimentTree(kind="root", path=root, why=f"the experiment runs the working tree{shown}")


def _relative(paths: list[Path], top: Path) -> list[str]:
    top = top.resolve()
    return [str(p.relative_to(top)) for p in paths if p.is_relative_to(top)]
