"""The built-in pitfall library (data/pitfalls.yaml): validated models and their ranking.

Pitfalls are ranked against a symptom with the same BM25 index and concept vocabulary as
the project's own knowledge (an entry per pitfall: its title, its category as section, its
symptom phrases and cause as body), so the two meet the same words the same way.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator
from rootcause.tools.knowledge.context import RunFacts, weight
from rootcause.tools.knowledge.entries import Entry, ParsedFile
from rootcause.tools.knowledge.index import Index
from rootcause.tools.vocabulary.categories import Category
from rootcause.tools.vocabulary.symptoms import read_data, vocabulary

PITFALLS_FILE = "pitfalls.yaml"
DATA = "rootcause.tools.knowledge.data"
PITFALL_LINK = re.compile(r"\bpitfall:\s*`?([a-z0-9_]+)`?", re.IGNORECASE)
"""A knowledge entry names a built-in pitfall it documents: a sub-bullet `- Pitfall: `lr_warmup_uncapped``
(or an inline `[pitfall:lr_warmup_uncapped]`). Only known ids count, so prose such as "a common pitfall: the..."
links nothing."""
SOURCE = re.compile(r"^(https://\S+|[\w.-]+/[\w.-]+#\d+)$")
MIN_SHARE_OF_TOP = 0.3
"""A pitfall is listed when its score is at least this share of the best pitfall's score."""


Fact = Literal["backend", "device", "distributed", "exit"]


class Pitfall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9_]+$")
    title: str
    category: Category
    symptoms: tuple[str, ...] = Field(min_length=1)
    cause: str
    check: str
    fix: str
    source: str
    concepts: tuple[str, ...] = ()
    prior: float = Field(1.0, ge=0.5, le=2.0)
    """How common the cause is: a short symptom that fits several pitfalls lists the common ones first."""
    requires: dict[Fact, tuple[str | bool, ...]] = {}
    """The run facts the cause needs: a known fact outside its list drops the pitfall (NCCL on a gloo job)."""

    @field_validator("source")
    @classmethod
    def _public_source(cls, value: str) -> str:
        if not SOURCE.match(value):
            raise ValueError(f"source {value!r} must be an https URL or owner/repo#number")
        return value

    @property
    def source_url(self) -> str:
        if self.source.startswith("https://"):
            return self.source
        repo, number = self.source.split("#")
        return f"https://github.com/{repo}/issues/{number}"


class PitfallMatch(BaseModel):
    name: str
    title: str
    text: str
    why: str
    category: str = ""
    score: float = 0.0
    check: str = ""
    fix: str = ""
    source: str = ""


@cache
def load_pitfalls() -> tuple[Pitfall, ...]:
    import yaml

    pitfalls = TypeAdapter(tuple[Pitfall, ...]).validate_python(yaml.safe_load(read_data(PITFALLS_FILE, DATA)))
    ids = [p.id for p in pitfalls]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{PITFALLS_FILE}: duplicate pitfall ids {duplicates}")
    known = set(vocabulary().concepts)
    for p in pitfalls:
        unknown = set(p.concepts) - known
        if unknown:
            raise ValueError(f"{PITFALLS_FILE}: pitfall {p.id} names unknown concepts {sorted(unknown)}")
    referenced = {i for spec in vocabulary().checklists.values() for item in spec.items for i in item.pitfalls}
    missing = referenced - set(ids)
    if missing:
        raise ValueError(f"symptoms.yaml checklists name unknown pitfalls {sorted(missing)}")
    return pitfalls


def pitfall(pitfall_id: str) -> Pitfall:
    return next(p for p in load_pitfalls() if p.id == pitfall_id)


@cache
def pitfall_index() -> Index:
    pitfalls = load_pitfalls()
    entries = [Entry(p.title, p.category, "builtin:pitfalls", n, n,
                     "\n".join(p.symptoms) + "\n" + p.cause + ("\n" + " ".join(p.concepts) if p.concepts else ""),
                     "bullet")
               for n, p in enumerate(pitfalls)]
    return Index.build({"builtin:pitfalls": ParsedFile("builtin:pitfalls", entries, [], None, 0)},  # type: ignore[arg-type]
                       [])


def rank_pitfalls(symptom: str, category: str | None, limit: int = 5,
                  facts: RunFacts | None = None) -> list[PitfallMatch]:
    """The built-in pitfalls that fit the symptom, best first (BM25 + concepts + category boost), weighed by the
    run facts: a pitfall whose preconditions a known fact contradicts is dropped (tools/knowledge/context.py)."""
    if not symptom.strip():
        return []
    pitfalls = load_pitfalls()
    facts = facts or RunFacts()
    weighed = []
    for hit in pitfall_index().search(symptom, len(pitfalls), category):
        p = pitfalls[hit.entry.line]
        factor = weight(p.requires, p.category, facts)
        if factor is not None:
            weighed.append((hit.score * p.prior * factor, hit, factor))
    scored = sorted(weighed, key=lambda t: (-t[0], t[1].entry.line))[:limit]
    if not scored:
        return []
    floor = scored[0][0] * MIN_SHARE_OF_TOP
    out = []
    for score, hit, factor in scored:
        if score < floor:
            break
        p = pitfalls[hit.entry.line]
        why = "; ".join(hit.why) or "ranked match"
        if factor != 1.0:
            why += f"; weighed x{factor:g} by the run facts ({facts.describe()})"
        out.append(PitfallMatch(name=p.id, title=p.title, text=p.cause, why=why, category=p.category,
                                score=round(score, 3), check=p.check, fix=p.fix, source=p.source_url))
    return out


def linked_pitfalls(text: str) -> list[str]:
    """The built-in pitfall ids a knowledge text links to (see PITFALL_LINK), in order."""
    known = {p.id for p in load_pitfalls()}
    return [i for i in dict.fromkeys(m.lower() for m in PITFALL_LINK.findall(text)) if i in known]


def link_line(pitfall_id: str) -> str:
    """The sub-bullet capture_knowledge writes to link an entry to a built-in pitfall."""
    return f"Pitfall: `{pitfall_id}`"
