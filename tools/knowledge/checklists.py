"""The domain checklists: chosen by the one symptom vocabulary, rendered into prompts/ from the data.

`python -m rootcause.tools.knowledge.checklists --write` regenerates prompts/<name>.md; a test asserts
the files equal the rendering, so the prompts and the pitfall library cannot drift apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel
from rootcause.tools.knowledge.pitfalls import pitfall
from rootcause.tools.vocabulary.symptoms import vocabulary

PROMPTS = Path(__file__).resolve().parents[2] / "prompts"


class Checklist(BaseModel):
    name: str
    why: str
    items: list[str]


def checklist_names() -> list[str]:
    return list(vocabulary().checklists)


def selected_checklists(hits: dict[str, str], category: str | None) -> dict[str, str]:
    """Checklist name -> why it applies, for a symptom's concept/signal hits and a category."""
    out: dict[str, str] = {}
    for name, spec in vocabulary().checklists.items():
        reasons = [f"{c} ('{hits[c]}')" for c in spec.any if c in hits]
        if category and category in spec.categories:
            reasons.append(f"category {category}")
        if reasons:
            out[name] = "; ".join(reasons)
    return out


def applicable_checklists(hits: dict[str, str], category: str | None, named: list[str]) -> list[Checklist]:
    selected = selected_checklists(hits, category)
    out = []
    for name, spec in vocabulary().checklists.items():
        reasons = [selected[name]] if name in selected else []
        if name in named:
            reasons.append("named by the session's triage")
        if reasons:
            out.append(Checklist(name=name, why="; ".join(reasons), items=[item.ask for item in spec.items]))
    return out


def render_markdown(name: str) -> str:
    spec = vocabulary().checklists[name]
    lines = [f"# {spec.title}", "",
             "<!-- Generated from tools/vocabulary/data/symptoms.yaml and tools/knowledge/data/pitfalls.yaml by",
             "     `python -m rootcause.tools.knowledge.checklists --write`; edit the data, not this file. -->", "",
             "Go through each question and write down the answer with the evidence for it.", ""]
    for item in spec.items:
        lines.append(f"- {item.ask}")
        for pitfall_id in item.pitfalls:
            p = pitfall(pitfall_id)
            lines.append(f"  - {p.title}: {p.check}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name in checklist_names():
        path = PROMPTS / f"{name}.md"
        text = render_markdown(name)
        if path.read_text(encoding="utf-8") != text:
            stale.append(path.name)
            if "--write" in argv:
                path.write_text(text, encoding="utf-8")
    if stale and "--write" not in argv:
        print(f"stale: {', '.join(stale)} (run with --write)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
