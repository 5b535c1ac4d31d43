"""The one symptom vocabulary (data/symptoms.yaml) as validated models.

Triage, check_constraints (ranking, pitfalls, checklists) and the prose fallback of
tools/taxonomy.py all read this file; nothing else defines symptom words.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from rootcause.tools.vocabulary.categories import CATEGORIES

DATA_PACKAGE = "rootcause.tools.vocabulary.data"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Signal(_Strict):
    terms: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            re.compile(pattern)
        return value


class ProseRule(_Strict):
    category: str
    any: tuple[str, ...] = ()
    all: tuple[str, ...] = ()
    none: tuple[str, ...] = ()
    why: str

    def matches(self, named: set[str]) -> bool:
        return ((not self.all or set(self.all) <= named) and (not self.any or bool(set(self.any) & named))
                and not set(self.none) & named)


class Negation(_Strict):
    cues: tuple[str, ...] = Field(min_length=1)
    window: int = Field(4, ge=1, le=12)
    keep: tuple[str, ...] = ()
    stops: tuple[str, ...] = ()


class TriageRule(_Strict):
    any: tuple[str, ...]
    categories: tuple[str, ...] = ()
    reason: str


class TriageRules(_Strict):
    distributed: TriageRule
    numerical: TriageRule
    failed_fixes: TriageRule
    unclear: TriageRule
    regression: TriageRule
    clear_error: tuple[str, ...]


class ChecklistItem(_Strict):
    ask: str
    pitfalls: tuple[str, ...] = ()


class ChecklistSpec(_Strict):
    title: str
    any: tuple[str, ...]
    categories: tuple[str, ...] = ()
    items: tuple[ChecklistItem, ...] = Field(min_length=1)


class SymptomVocabulary(_Strict):
    concepts: dict[str, tuple[str, ...]]
    signals: dict[str, Signal]
    category_concepts: dict[str, tuple[str, ...]]
    prose: tuple[ProseRule, ...]
    negation: Negation
    prose_over_rules: dict[str, tuple[str, ...]] = {}
    """Without an exception line: error-rule category -> prose categories that take precedence over it."""
    triage: TriageRules
    checklists: dict[str, ChecklistSpec]
    keywords: tuple[str, ...] = Field(min_length=1)
    """Terms of the field worth picking as search keywords whenever they appear, most telling first."""
    keyword_stopwords: frozenset[str] = frozenset()
    """Prose words never picked as a keyword (lowercase)."""

    @model_validator(mode="after")
    def _names_exist(self) -> SymptomVocabulary:
        names = set(self.concepts) | set(self.signals)
        overlap = set(self.concepts) & set(self.signals)
        if overlap:
            raise ValueError(f"names used both as concept and signal: {sorted(overlap)}")
        used: list[tuple[str, tuple[str, ...]]] = [(f"category_concepts.{k}", v) for k, v in
                                                   self.category_concepts.items()]
        used += [(f"prose[{r.category}]", r.any + r.all + r.none) for r in self.prose]
        used += [(f"triage.{k}", getattr(self.triage, k).any) for k in
                 ("distributed", "numerical", "failed_fixes", "unclear", "regression")]
        used += [("triage.clear_error", self.triage.clear_error), ("negation.keep", self.negation.keep)]
        used += [(f"checklists.{k}", c.any) for k, c in self.checklists.items()]
        for where, refs in used:
            unknown = set(refs) - names
            if unknown:
                raise ValueError(f"{where} names unknown concepts {sorted(unknown)}")
        categories = ([r.category for r in self.prose] + list(self.category_concepts)
                      + [c for k in ("distributed", "numerical", "failed_fixes", "unclear", "regression")
                         for c in getattr(self.triage, k).categories]
                      + [c for spec in self.checklists.values() for c in spec.categories])
        unknown = set(categories) - set(CATEGORIES)
        if unknown:
            raise ValueError(f"unknown categories {sorted(unknown)}; the taxonomy is {', '.join(CATEGORIES)}")
        return self


def read_data(name: str, package: str = DATA_PACKAGE) -> str:
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


@cache
def vocabulary() -> SymptomVocabulary:
    import yaml

    return SymptomVocabulary.model_validate(yaml.safe_load(read_data("symptoms.yaml")))
