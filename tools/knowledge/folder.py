"""Where the knowledge lives and how its files are read (strict UTF-8, confined to the root)."""

from __future__ import annotations

import os
from pathlib import Path

from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace

DEFAULT_DIR = ".agents/knowledge"
ENV_VAR = "ROOTCAUSE_KNOWLEDGE_DIR"


def knowledge_dir(workspace: Workspace, configured: str | None = None) -> Path:
    """The knowledge folder: the argument, else $ROOTCAUSE_KNOWLEDGE_DIR, else .agents/knowledge/."""
    raw = configured or os.environ.get(ENV_VAR) or DEFAULT_DIR
    path = workspace.resolve(raw, what="knowledge folder")
    if path.exists() and not path.is_dir():
        raise UsageError(f"knowledge folder {raw!r} is a file, not a folder.",
                         f"pass knowledge_dir naming a folder (default {DEFAULT_DIR})")
    return path


def markdown_files(folder: Path, root: Path | None = None) -> list[Path]:
    """The folder's Markdown files; with `root`, a symlink that resolves outside it is left out (never read)."""
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.glob("*.md") if p.is_file())
    if root is not None:
        root = root.resolve()
        files = [p for p in files if p.resolve().is_relative_to(root)]
    return files


def read_strict(path: Path, workspace: Workspace) -> str:
    """The file's text; a file that is not UTF-8 is the caller's to fix, never silently altered."""
    workspace.resolve(path, what="knowledge file")  # a symlink out of the root is refused, not followed
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(
            f"{workspace.relative(path)} is not valid UTF-8 (byte {exc.start}, line {line}); it was left untouched.",
            "re-save the file as UTF-8, then call again",
        ) from None
