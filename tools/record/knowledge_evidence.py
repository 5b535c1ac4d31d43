"""Typed evidence of the knowledge tools: check_constraints (Phase 1) and capture_knowledge (Phase 5)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field
from rootcause.tools.record.tool_evidence import ToolEvidence, register


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EntryRef(_Loose):
    """A knowledge entry by title and place."""

    title: str = ""
    file: str = ""
    line: int | None = None
    score: float | None = None
    section: str | None = None
    number: int | None = None

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file


class GuardHit(_Loose):
    path: str = ""
    glob: str = ""
    title: str = ""


@register
class ConstraintsEvidence(ToolEvidence):
    tool: ClassVar[str] = "check_constraints"

    matches: list[EntryRef] = Field(default_factory=list)
    pitfalls: list[str] = Field(default_factory=list)
    """Built-in pitfall ids shown, best first."""
    documented_pitfalls: list[str] = Field(default_factory=list)
    """Built-in pitfall ids not shown because a project entry documents them."""
    guard_violations: list[GuardHit] = Field(default_factory=list)
    codegen_stale: bool | None = None

    def top_pitfall(self) -> str | None:
        return self.pitfalls[0] if self.pitfalls else None

    def render(self) -> str:
        lines = [f"check_constraints: {len(self.matches)} project entr{'y' if len(self.matches) == 1 else 'ies'}, "
                 f"{len(self.pitfalls)} built-in pitfall(s)."]
        lines += [f"- {m.title} ({m.where()})" for m in self.matches[:8]]
        if self.pitfalls:
            lines.append(f"- Pitfalls: {', '.join(self.pitfalls)}")
        if self.documented_pitfalls:
            lines.append(f"- Documented by the project (not listed): {', '.join(self.documented_pitfalls)}")
        lines += [f"- Guard: {g.path} matches {g.glob} ({g.title})" for g in self.guard_violations[:8]]
        if self.codegen_stale:
            lines.append("- Generated code is STALE")
        return "\n".join(lines)


class SuggestedBrief(_Loose):
    statement: str = ""
    changed_path: str | None = None


class NoneBrief(_Loose):
    reason: str = ""


@register
class CaptureEvidence(ToolEvidence):
    tool: ClassVar[str] = "capture_knowledge"

    kind: str = "?"
    written: EntryRef | None = None
    duplicate_of: EntryRef | None = None
    suggested_test: SuggestedBrief | None = None
    recorded_none: NoneBrief | None = None
    pitfall: str | None = None
    """The built-in pitfall id the written entry links to (it hides that pitfall from check_constraints)."""

    def render(self) -> str:
        if self.written is not None:
            w = self.written
            text = f"Wrote {w.title} to {w.where()} (section: {w.section or 'top level'})."
            return text + (f" Linked to built-in pitfall {self.pitfall}." if self.pitfall else "")
        if self.duplicate_of is not None:
            return f"Not written: near-duplicate of '{self.duplicate_of.title}' at {self.duplicate_of.where()}."
        if self.recorded_none is not None:
            return f"Nothing to capture ({self.kind}): {self.recorded_none.reason}"
        if self.suggested_test is not None:
            return (f"Regression guard for {self.suggested_test.changed_path or 'the change'}: "
                    f"{self.suggested_test.statement}")
        return f"capture_knowledge ({self.kind})"
