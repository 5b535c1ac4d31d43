"""Confinement to the server's root and the `.rootcause/` state folder inside it."""

from __future__ import annotations

import os
from pathlib import Path

from rootcause.tools.core.errors import UsageError

STATE_DIR = ".rootcause"


class Workspace:
    """The debugged repository: every path a tool reads or writes resolves inside it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise UsageError(f"root {self.root} is not a directory.", "pass --root DIR of your repository")

    def resolve(self, path: str | os.PathLike[str], *, must_exist: bool = False, what: str = "path") -> Path:
        """An absolute path inside the root; symlinks are resolved before the check."""
        raw = os.fspath(path)
        if not raw or "\x00" in raw:
            raise UsageError(f"{what} {raw!r} is empty or contains a NUL byte.", "give a path inside the root")
        try:
            candidate = Path(raw).expanduser()
            if not candidate.is_absolute():
                candidate = self.root / candidate
            resolved = candidate.resolve()
            os.lstat(resolved)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except (OSError, RuntimeError) as exc:  # a name too long, a symlink loop, ~unknown-user
            raise UsageError(f"{what} {raw[:200]!r} cannot be used: {getattr(exc, 'strerror', None) or exc}.",
                             "give an existing path inside the root") from None
        if resolved != self.root and self.root not in resolved.parents:
            raise UsageError(
                f"{what} {raw[:200]!r} resolves to {resolved}, outside the root {self.root}.",
                "give a path inside the repository the server was started in (rootcause serve --root DIR)",
            )
        if must_exist and not resolved.exists():
            raise UsageError(f"{what} {raw!r} does not exist under {self.root}.", "check the spelling")
        return resolved

    def relative(self, path: Path) -> str:
        try:
            return str(Path(path).resolve().relative_to(self.root))
        except ValueError:
            return str(path)

    def state_dir(self, *parts: str) -> Path:
        """`<root>/.rootcause/<parts>`, created on demand; the folder ignores itself in git."""
        base = self.root / STATE_DIR
        # A symlinked state folder (e.g. committed into a cloned repository) would carry every write
        # out of the root: refuse it, whichever level of the path it is at.
        for level in range(len(parts) + 1):
            here = base.joinpath(*parts[:level])
            if here.is_symlink():
                raise UsageError(f"{self.relative(here)} is a symlink (to {os.readlink(here)}); rootcause keeps "
                                 "its state inside the root only.", f"remove the symlink: rm {here}")
        if not base.is_dir():
            base.mkdir(parents=True, exist_ok=True)
        ignore = base / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n", encoding="utf-8")
        target = base.joinpath(*parts)
        target.mkdir(parents=True, exist_ok=True)
        return target
