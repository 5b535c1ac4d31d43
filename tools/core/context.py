"""What an engine needs from its caller: the root it is confined to and a progress sink."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from rootcause.tools.core.workspace import Workspace

ProgressSink = Callable[[float, float | None, str], Awaitable[None]]


async def _no_progress(progress: float, total: float | None, message: str) -> None:
    return None


AMBIENT_PROGRESS: ContextVar[ProgressSink | None] = ContextVar("rootcause_progress", default=None)
"""The progress sink of the tool call in flight: runs started without an explicit sink (internal uv, git
or make steps) still report their elapsed time and last output line through it."""


@dataclass
class ToolContext:
    workspace: Workspace
    progress: ProgressSink = field(default=_no_progress)

    @classmethod
    def for_root(cls, root: str | Path, progress: ProgressSink | None = None) -> ToolContext:
        return cls(Workspace(Path(root)), progress or _no_progress)

    @property
    def root(self) -> Path:
        return self.workspace.root
