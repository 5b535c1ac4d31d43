"""Negation in free text: a cue and the few words after it, up to a clause boundary, name what did NOT happen
("no OOM, it just hangs", "nothing crashes"); those words name no concept. The vocabulary is the `negation`
section of data/symptoms.yaml. Used by the triage's classifier and by the diagnosis of a log that raised nothing.
"""

from __future__ import annotations

import re
from functools import cache

from rootcause.tools.vocabulary.symptoms import ProseRule, vocabulary
from rootcause.tools.vocabulary.words import symptom_hits

_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:['’][A-Za-z]+)?|[^\sA-Za-z0-9_]")
_BOUNDARY = frozenset(",.;:!?()[]")


@cache
def _cues() -> tuple[frozenset[str], frozenset[str], int]:
    neg = vocabulary().negation
    return frozenset(neg.cues), frozenset(neg.stops), neg.window


def _is_cue(word: str, cues: frozenset[str]) -> bool:
    low = word.lower().replace("’", "'")
    return low in cues or (low.endswith("n't") and "n't" in cues)


def _phrase(text: str) -> set[str]:
    """The concepts and signals a text names, other than those about what did not happen (negation.keep)."""
    return set(symptom_hits(text)) - set(vocabulary().negation.keep)


def negation_scopes(text: str, protect: tuple[int, int] | None = None) -> list[tuple[int, int]]:
    """Character spans (cue included) that the text negates; a cue that starts a vocabulary phrase
    ("no module named", "no progress") is not a negation."""
    cues, stops, window = _cues()
    tokens = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(tokens):
        word, start, end = tokens[i]
        if not _is_cue(word, cues) or (protect and protect[0] <= start < protect[1]):
            i += 1
            continue
        j, last = i + 1, end
        while j < len(tokens) and j - i <= window:
            nxt = tokens[j][0]
            if nxt in _BOUNDARY or nxt.lower() in stops or _is_cue(nxt, cues):
                break
            last = tokens[j][2]
            j += 1
        if last > end and _phrase(text[start:last]) - _phrase(text[end:last]):
            i += 1  # the cue belongs to a phrase of the vocabulary
            continue
        spans.append((start, last))
        i = max(j, i + 1)
    return spans


def named_outside_negations(text: str, protect: tuple[int, int] | None = None) -> tuple[str, list[str], frozenset[str]]:
    """(the text with its negated spans blanked, the negated spans, the concepts and signals named outside them
    plus the signals read from the whole text)."""
    masked, negated, cursor = [], [], 0
    for start, end in negation_scopes(text, protect):
        masked.append(text[cursor:start])
        masked.append(" " * (end - start))
        negated.append(text[start:end])
        cursor = end
    masked.append(text[cursor:])
    plain = "".join(masked)
    kept = set(vocabulary().negation.keep)
    return plain, negated, frozenset(set(symptom_hits(plain)) | (set(symptom_hits(text)) & kept))


def prose_rule(text: str, among: tuple[str, ...] | None = None) -> ProseRule | None:
    """The first `prose` rule of the vocabulary (of a category `among`, if given) that the text's words outside
    negations satisfy."""
    _, _, named = named_outside_negations(text)
    return next((rule for rule in vocabulary().prose if rule.matches(set(named))
                 and (among is None or rule.category in among)), None)
