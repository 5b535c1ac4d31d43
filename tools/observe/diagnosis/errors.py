"""The error record every parser produces: one exception (or error template) found in a log."""

from __future__ import annotations

from dataclasses import dataclass, field

from rootcause.tools.observe.diagnosis.models import Frame


@dataclass
class FoundError:
    type: str
    """As written (`torch.OutOfMemoryError`), or a template's name for errors without a traceback."""
    message: str
    line: int
    """Index of the error line in the log (order of first observation)."""
    rank: int | None = None
    frames: list[Frame] = field(default_factory=list)
    """Outermost first, as in a Python traceback."""
    chain: int = -1
    link: int = 0
    """Position in its chain of exceptions: 0 is the original cause, higher ones wrap it."""
    source: str = "traceback"
    """traceback | pytest | template | report | bare."""
    template: str | None = None
    """For errors without a traceback: the identity of the message template (signature text)."""
    category: str | None = None
    """Set by a template that knows its category; otherwise the rules decide."""
    start: int | None = None
    end: int | None = None
    """Span of log lines (indices) the error was read from, for the excerpt."""
    evidence: str | None = None
    """What it was read from when not its source's default (metrics: a series; keywords: a line's words)."""
    site: str | None = None
    """A template's stand-in for the call site when the line has no frames (Template.site)."""
    ignored: bool = False
    """Python reported it as "Exception ignored in: ..." (a destructor at exit): never the failure."""

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1].rsplit("::", 1)[-1]

    def headline(self) -> str:
        first = self.message.strip().split("\n", 1)[0]
        return f"{self.type}: {first}" if first else self.type
