"""Reading a session entry back as its tool's typed evidence: every model module is imported here, so the
registry is complete wherever this is used (the report, the baseline, later tools)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from rootcause.tools.record import evidence as evidence
from rootcause.tools.record import findings as findings
from rootcause.tools.record import knowledge_evidence as knowledge_evidence
from rootcause.tools.record.tool_evidence import _REGISTRY, ToolEvidence


def evidence_of(tool: str, data: dict[str, Any]) -> ToolEvidence | None:
    """The typed evidence of one session entry (None for a tool without a model, or unreadable data)."""
    model = _REGISTRY.get(tool)
    if model is None:
        return None
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def protocol_sections(evidence: list[Any]) -> list[str]:
    """The report's protocol sections (## Hypotheses, ## Fix attempts) from the typed evidence, in order."""
    lines: list[str] = []
    for section in dict.fromkeys(m.section for m in _REGISTRY.values() if m.section):
        entries = [(ev.seq, evidence_of(ev.tool, ev.data)) for ev in evidence
                   if _REGISTRY.get(ev.tool) is not None and _REGISTRY[ev.tool].section == section]
        if not entries:
            continue
        lines += ["", f"## {section}", ""]
        for seq, typed in entries:
            if typed is not None:
                lines += typed.protocol_lines(seq)
    return lines




def render_evidence(tool: str, data: dict[str, Any], recorded: str) -> str:
    """An evidence entry's report text: the text recorded with it (each tool records its typed model's
    rendering), else that rendering now, plus the model's attachments the text lacks (a session recorded
    before the attachment was part of the rendering still shows it)."""
    typed = evidence_of(tool, data)
    text = recorded.strip() or (typed.render().strip() if typed is not None else "")
    extra = [a for a in (typed.attachments() if typed is not None else []) if a not in text]
    return "\n\n".join([t for t in (text, *extra) if t])
