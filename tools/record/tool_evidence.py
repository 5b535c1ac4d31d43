"""The base of every tool's typed session evidence, and the registry each model adds itself to."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict
from rootcause.tools.observe.diagnosis import Diagnosis


class ToolEvidence(BaseModel):
    """Base of every tool's evidence: `protocol_lines` is its entry in the report's protocol sections."""

    model_config = ConfigDict(extra="ignore")
    tool: ClassVar[str] = ""
    section: ClassVar[str | None] = None
    """The report section (## Hypotheses, ## Fix attempts) the evidence is listed in, if any."""

    def protocol_lines(self, seq: int) -> list[str]:
        return []

    def render(self) -> str:
        """The evidence's Markdown summary in the session report."""
        return ""

    def found_diagnosis(self) -> Diagnosis | None:
        """The failure's diagnosis, for the tools that diagnose (reproduce, diagnose_log)."""
        return None

    def attachments(self) -> list[str]:
        """Markdown blocks (e.g. an image) that belong under the evidence in the report."""
        return []


_REGISTRY: dict[str, type[ToolEvidence]] = {}


def register(cls: type[ToolEvidence]) -> type[ToolEvidence]:
    _REGISTRY[cls.tool] = cls
    return cls
