"""The session as a Markdown report: symptom, path, phases, hypotheses, fix attempts, evidence.

Each evidence entry renders through its tool's typed model (tools/record/registry.py); this module
reads no tool's data keys.
"""

from __future__ import annotations

from rootcause.tools.record.registry import protocol_sections, render_evidence
from rootcause.tools.record.store import SessionState


def _protocol_sections(state: SessionState) -> list[str]:
    """Hypotheses in order with their results, then fix attempts: each tool's typed evidence renders itself."""
    return protocol_sections(state.evidence)


def render_report(state: SessionState) -> str:
    lines = [
        f"# rootcause session {state.session_id}",
        "",
        f"- **Symptom:** {state.symptom}",
        f"- **Path:** {state.path} ({'; '.join(state.reasons)})",
        f"- **Category:** {state.category}",
        f"- **Keywords:** {', '.join(state.keywords) or '-'}",
        f"- **Checklists:** {', '.join(state.checklists) or '-'}",
        f"- **Started:** {state.created_at} at HEAD {state.head[:10] if state.head else '(no git)'}",
        f"- **Status:** {state.status}",
    ]
    for change in state.path_changes:
        lines.append(f"- **Path change:** {change}")
    lines += ["", "## Phases", ""]
    marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]", "skipped": "[-]"}
    for phase in state.phases:
        lines.append(f"- {marks[phase.status]} Phase {phase.number}: {phase.name} — {phase.status}")
    lines += _protocol_sections(state)
    lines += ["", "## Evidence", ""]
    if not state.evidence:
        lines.append("_No evidence recorded yet._")
    for ev in state.evidence:
        where = f" (Phase {ev.phase})" if ev.phase else ""
        lines += [f"### {ev.seq}. {ev.tool}{where} — {ev.at}", "", render_evidence(ev.tool, ev.data, ev.summary), ""]
    return "\n".join(lines).rstrip() + "\n"

