"""`rootcause init`: starter knowledge files in the format the knowledge tools read and write.

Each file gets a short header and one example entry: numbered items with a bold title and
sub-bullets under `##` sections (constraints, architecture), and a table mapping test paths
to the CI workflows that run them (testing). Existing files are the user's documents and
are never touched.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel
from rootcause.tools.core.errors import UsageError
from rootcause.tools.knowledge.starter import KNOWLEDGE_DIR, TEMPLATES


class InitResult(BaseModel):
    repo: str
    knowledge_dir: str
    created: list[str]
    skipped: list[str]

    def summary(self) -> str:
        lines = [f"knowledge files in {self.knowledge_dir}"]
        lines += [f"  created  {name}" for name in self.created]
        lines += [f"  skipped  {name} (already exists; left untouched)" for name in self.skipped]
        if self.created:
            lines.append("next: replace the example entries with your project's real constraints, architecture "
                         "and CI test wiring")
        return "\n".join(lines)


def init_knowledge(repo: str | os.PathLike[str] | None = None) -> InitResult:
    """Create the starter knowledge files that do not exist yet; never overwrite one."""
    root = Path(repo or os.getcwd()).expanduser()
    if not root.is_dir():
        raise UsageError(f"repository {str(root)!r} is not a directory.", "pass --repo PATH of an existing folder")
    root = root.resolve()
    folder = root / KNOWLEDGE_DIR
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{KNOWLEDGE_DIR} exists and is not a folder.", "move that file away and run init again")
    folder.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    skipped: list[str] = []
    for name, text in TEMPLATES.items():
        relative = str(KNOWLEDGE_DIR / name)
        try:
            # "x" mode: the existence check and the creation are one step, so a file
            # appearing meanwhile is still never overwritten.
            with open(folder / name, "x", encoding="utf-8") as fh:
                fh.write(text)
        except FileExistsError:
            skipped.append(relative)
        else:
            created.append(relative)
    return InitResult(repo=str(root), knowledge_dir=str(KNOWLEDGE_DIR), created=created, skipped=skipped)
