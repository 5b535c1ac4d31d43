"""Tokens, a light stemmer and the concept matcher over the one symptom vocabulary.

A concept is a group of phrases that mean the same thing to someone debugging training
code ("NaN", "non-finite", "inf"), defined in data/symptoms.yaml. Text that mentions any
phrase of a group gets the group's concept token (`~nonfinite`), so a query and an entry
that use different words for one idea still meet in the index. Signals (never indexed)
are matched the same way plus their regex patterns; triage and the taxonomy read both.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache

from rootcause.tools.vocabulary.symptoms import vocabulary

# Linear-time forms (a 200 KB run of letters or digits took minutes with open-ended backtracking):
# a digit token starts only where a digit run starts, and "camelCase" is two lowercase letters then an
# uppercase one, which every match of the longer alternatives contains.
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*|(?<!\d)\d++[A-Za-z][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CAMEL_WORD = re.compile(r"[a-z]{2}[A-Z]")
_STOP = frozenset(
    """a an and are as at be been but by can do does for from has have how i if in into is it its
    no not of on or our so such that the their then there these this to was we were what when where
    which while who will with you your all any each via per than too very also only just use used
    using must should may might get gets got after before""".split()
)

CONCEPT_PREFIX = "~"


def category_concepts(category: str | None) -> tuple[str, ...]:
    """The concepts a diagnosis category pulls up (symptoms.yaml category_concepts)."""
    return vocabulary().category_concepts.get(category or "", ())


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """A deliberately small suffix stripper: the same word forms meet, nothing clever."""
    w = word
    if len(w) <= 3 or w.isdigit():
        return w
    for suffix, repl, min_len in (("ies", "y", 5), ("sses", "ss", 5), ("ing", "", 6), ("ed", "", 5),
                                  ("es", "", 5), ("s", "", 4), ("ly", "", 6)):
        if w.endswith(suffix) and len(w) >= min_len:
            if suffix == "es" and not re.search(r"(ss|x|ch|sh|z)es$", w):
                continue
            if suffix == "s" and w.endswith(("ss", "us", "sis", "xis")):
                continue
            w = w[: len(w) - len(suffix)] + repl
            if suffix in ("ing", "ed") and len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    return w


def words(text: str) -> list[str]:
    """Stemmed word tokens; identifiers also yield their parts (clip_grad_norm -> clip, grad, norm)."""
    out: list[str] = []
    for raw in _WORD.findall(text):
        lowered = raw.lower()
        if lowered not in _STOP and len(lowered) > 1:
            out.append(stem(lowered))
        parts = [p for chunk in raw.split("_") for p in (_CAMEL.findall(chunk) if _CAMEL_WORD.search(chunk)
                                                          else [chunk])]
        if len(parts) > 1:
            out.extend(stem(p.lower()) for p in parts if p.lower() not in _STOP and len(p) > 1)
    return out


_PLAIN = re.compile(r"[a-z0-9]+")


Compiled = tuple[dict[str, list[tuple[tuple[str, ...], bool, str]]], list[tuple[str, str]]]


def _compile(groups: dict[str, tuple[str, ...]]) -> Compiled:
    """Phrases keyed by their first stem (exact first words), and single-word prefixes."""
    phrases: dict[str, list[tuple[tuple[str, ...], bool, str]]] = {}
    prefixes: list[tuple[str, str]] = []
    for name, terms in groups.items():
        for term in terms:
            parts = term.split()
            is_prefix = parts[-1].endswith("*")
            stems = tuple(stem(p) for p in parts[:-1]) + ((parts[-1][:-1],) if is_prefix else (stem(parts[-1]),))
            if len(stems) == 1 and is_prefix:
                prefixes.append((stems[0], name))
            else:
                phrases.setdefault(stems[0], []).append((stems, is_prefix, name))
    return phrases, prefixes


@cache
def _concepts_compiled() -> Compiled:
    return _compile(vocabulary().concepts)


@cache
def _signals_compiled() -> tuple[Compiled, tuple[tuple[str, re.Pattern[str]], ...]]:
    signals = vocabulary().signals
    patterns = tuple((name, re.compile(p)) for name, sig in signals.items() for p in sig.patterns)
    return _compile({name: sig.terms for name, sig in signals.items()}), patterns


@lru_cache(maxsize=65_536)
def _prefix_concepts(word_stem: str) -> tuple[str, ...]:
    return tuple(name for prefix, name in _concepts_compiled()[1] if word_stem.startswith(prefix))


def _scan(text: str, compiled: Compiled | None = None) -> dict[str, str]:
    """Concept -> the first phrase of text that names it (stemmed-word matching, one pass)."""
    phrases, prefixes = compiled or _concepts_compiled()
    raw = _PLAIN.findall(text.lower())
    stems = [stem(w) for w in raw]
    found: dict[str, str] = {}
    for i, s in enumerate(stems):
        names = (_prefix_concepts(s) if compiled is None
                 else tuple(name for prefix, name in prefixes if s.startswith(prefix)))
        for name in names:
            found.setdefault(name, raw[i])
        for parts, is_prefix, name in phrases.get(s, ()):
            if name in found:
                continue
            n = len(parts)
            window = stems[i:i + n]
            if len(window) < n or window[:-1] != list(parts[:-1]):
                continue
            last = window[-1]
            if last == parts[-1] or (is_prefix and last.startswith(parts[-1])):
                found[name] = " ".join(raw[i:i + n])
    return found


def concepts(text: str) -> list[str]:
    """The concept names whose terms occur in text."""
    return list(_scan(text))


def concept_hits(text: str) -> dict[str, str]:
    """Concept name -> the words of text that triggered it (for `why`)."""
    return _scan(text)


def tokens(text: str) -> list[str]:
    """Index tokens: stemmed words plus one concept token per concept mentioned."""
    return words(text) + [CONCEPT_PREFIX + c for c in concepts(text)]


def symptom_hits(text: str) -> dict[str, str]:
    """Concepts and signals named by text -> the words that named them (triage, taxonomy, checklists)."""
    found = _scan(text)
    compiled, patterns = _signals_compiled()
    for name, phrase in _scan(text, compiled).items():
        found.setdefault(name, phrase)
    for name, pattern in patterns:
        if name not in found:
            m = pattern.search(text)
            if m:
                found[name] = m.group(0)[:60]
    return found
