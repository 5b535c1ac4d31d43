"""The session as a Markdown report: symptom, path, phases, hypotheses, fix attempts, evidence."""

from __future__ import annotations

from tools.sessions.store import SessionState


def _protocol_sections(state: SessionState) -> list[str]:
    """Hypotheses in order with their results, then fix attempts: the spine of the investigation."""
    lines: list[str] = []
    hypotheses = [e for e in state.evidence if e.tool == "verify_hypothesis"]
    if hypotheses:
        lines += ["", "## Hypotheses", ""]
    for ev in hypotheses:
        d = ev.data
        gate = d.get("gate") or {}
        failed = [c.get("name") for c in gate.get("checks", []) if not c.get("passed")]
        review = "; needs review" if d.get("needs_review") else ""
        lines.append(
            f"{d.get('number', '?')}. **{str(d.get('result', '?')).upper()}** — {d.get('hypothesis', '')} "
            f"_(expect {d.get('expect')}; confidence {d.get('confidence')}; gate "
            f"{'passed' if gate.get('passed') else 'failed: ' + ', '.join(map(str, failed))}{review}; "
            f"evidence {ev.seq})_"
        )
        lines.append(f"   - {d.get('reason', '')}")
    fixes = [e for e in state.evidence if e.tool == "record_fix_attempt"]
    if fixes:
        lines += ["", "## Fix attempts", ""]
    for ev in fixes:
        d = ev.data
        verdict = "fixed" if d.get("fixed") else ("STOP" if d.get("stop") else "not fixed")
        lines.append(f"{d.get('attempt', '?')}. **{verdict}** — {d.get('description', '')} "
                     f"_(`{d.get('command', '')}`; consecutive failures {d.get('consecutive_failures')}; "
                     f"evidence {ev.seq})_")
        lines.append(f"   - {d.get('reason', '')}")
    return lines


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
        lines += [f"### {ev.seq}. {ev.tool}{where} — {ev.at}", "", ev.summary.strip(), ""]
    return "\n".join(lines).rstrip() + "\n"

