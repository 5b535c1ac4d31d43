"""The starter knowledge files `rootcause init` writes: a header and one example entry each, in the format
the knowledge tools read and write (placeholders.py recognises the example entries)."""

from __future__ import annotations

from pathlib import Path

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
