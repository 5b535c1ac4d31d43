"""Base class of every tool result: structured data plus a short human summary."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict

MAX_RESULT_CHARS = 25_000


class ToolResult(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    def summary(self) -> str:
        """A few lines for a human; subclasses override."""
        return self.__class__.__name__

    def images(self) -> list[Path]:
        """PNG files to show beside the text (e.g. a plot); the server sends each as image content."""
        return []


def bounded(text: str, limit: int = 4_000, marker: str = "\n… [truncated] …\n") -> str:
    """Keep the head and tail of text within limit characters."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(marker))
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head):]
