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

from tools.errors import UsageError

KNOWLEDGE_DIR = Path(".agents") / "knowledge"

CONSTRAINTS = """\
# Hard constraints

Rules that, when broken, cause silent bugs, crashes or wrong results. Check them before
every change. Add one with `capture_knowledge` (kind `constraint`) after a debugging session.

## Example section

1. **Replace this example with your first real constraint**
   - Rename the section after the area it covers (e.g. Data loading, Distributed training).
   - State the rule in one line, then where it lives (`path/to/module.py`).
   - Say what breaks when it is violated, and how that failure looks (the error or the symptom).
"""

ARCHITECTURE = """\
# Architecture

Where code lives and how the parts interact, written for coding agents. Add an insight with
`capture_knowledge` (kind `architecture`) when debugging taught you how something really works.

## Example section

1. **Replace this example with a component and its responsibility**
   - Rename the section after the part of the system it describes (e.g. Training loop, Checkpointing).
   - Entry point: `path/to/entry.py` (`main()`), and what calls it.
   - Which data it owns, what it hands to the next component, and the invariant between them.
"""

TESTING = """\
# Testing

Which tests CI runs, and where a new regression test belongs. `capture_knowledge` (kind
`regression_guard`) reads the table below to suggest the test that owns a changed path.

## CI selects tests by path

| Path | How CI picks it up |
|------|--------------------|
| `tests/` | whole directory, in `.github/workflows/tests.yml` (replace with your workflow) |

## Decision rule

1. **Extend a test CI already runs before adding a new file**
   - Find the row of the table above that covers the code you changed.
   - A new file outside every listed path is invisible to CI until a workflow lists it.
"""

TEMPLATES: dict[str, str] = {
    "constraints.md": CONSTRAINTS,
    "architecture.md": ARCHITECTURE,
    "testing.md": TESTING,
}


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
