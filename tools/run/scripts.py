"""The scripts a command runs, read once for every reader: the words of a command (a `/bin/sh -c` string split as
the shell would, comments dropped) and the text of a script file (its head, undecodable bytes replaced).

Used by the experiment-tree judge (observe/evidence/trees.py: what a driver script reaches) and by
check_constraints (the backend a script names).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rootcause.tools.run.command import split_words


def command_words(argv: Sequence[str]) -> list[str]:
    """argv, or the words of the string a `/bin/sh -c` command hands to the shell (a shell-quoting error: its
    whitespace-separated words)."""
    if list(argv[:2]) == ["/bin/sh", "-c"] and len(argv) > 2:
        return shell_words(argv[2])
    return list(argv)


def shell_words(text: str) -> list[str]:
    """The words of a shell script or command line, comments dropped, in linear time (run.command.split_words)."""
    try:
        return split_words(text, comments=True)
    except ValueError:
        return text.split()


def script_text(path: Path, max_bytes: int) -> str | None:
    """The first max_bytes of a script decoded as UTF-8 (undecodable bytes replaced); None when unreadable."""
    try:
        with open(path, "rb") as fh:
            return fh.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return None


def scripts_inside(argv: Sequence[str], root: Path, suffix: str = ".py", words: int = 20) -> list[Path]:
    """The files ending in suffix inside the root that the command's first words name (relative to the root)."""
    top = root.resolve()
    found = []
    for word in command_words(argv)[:words]:
        path = Path(word) if Path(word).is_absolute() else root / word
        if word.endswith(suffix) and path.is_file() and path.resolve().is_relative_to(top):
            found.append(path)
    return found
