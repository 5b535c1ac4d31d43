"""Near-duplicate knowledge: the same point with a reworded title or body (rapidfuzz on stemmed tokens).

A built-in pitfall counts as documented by the project when an entry links it by id (`- Pitfall: `id``)
or, failing that, when a ranked project entry is a near-duplicate of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from rootcause.tools.knowledge.entries import Entry
from rootcause.tools.vocabulary.words import concepts, words

TITLE_ALONE = 88.0
BODY_ALONE = 85.0
# (title, body) pairs that together make a duplicate: a close title with a related body, or the reverse.
TITLE_WITH_BODY = ((72.0, 70.0), (80.0, 55.0))
MIN_BODY_WORDS = 6


@dataclass
class Duplicate:
    entry: Entry
    score: float
    title_score: float
    body_score: float


@lru_cache(maxsize=16_384)
def normalize(text: str) -> str:
    """Sorted unique stems plus concept names: word order, inflection and markup stop mattering."""
    plain = re.sub(r"[`*_#>\[\]()]", " ", text)
    return " ".join(sorted(set(words(plain)) | {f"~{c}" for c in concepts(plain)}))


def similarity(a: str, b: str) -> float:
    from rapidfuzz import fuzz

    if not a or not b:
        return 0.0
    # token_set alone calls a short text a perfect match of any text containing it; the sort ratio tempers that.
    return (fuzz.token_set_ratio(a, b) + fuzz.token_sort_ratio(a, b)) / 2


def find_duplicate(title: str, body: str, entries: list[Entry]) -> Duplicate | None:
    new_title, new_body = normalize(title), normalize(body)
    body_words = len(new_body.split())
    best: Duplicate | None = None
    for entry in entries:
        if entry.kind == "section":
            continue
        t = similarity(new_title, normalize(entry.title))
        b = similarity(new_body, normalize(entry.body)) if body_words else 0.0
        is_dup = (t >= TITLE_ALONE or (b >= BODY_ALONE and body_words >= MIN_BODY_WORDS)
                  or any(t >= tt and b >= bb for tt, bb in TITLE_WITH_BODY))
        if is_dup:
            score = round(max(t, b, (t + b) / 2), 1)
            if best is None or score > best.score:
                best = Duplicate(entry, score, round(t, 1), round(b, 1))
    return best


def pitfall_links(entries: list[Entry]) -> dict[str, Entry]:
    """Built-in pitfall id -> the first entry that links it (a `Pitfall: `id`` line)."""
    from rootcause.tools.knowledge.pitfalls import linked_pitfalls

    links: dict[str, Entry] = {}
    for entry in entries:
        if entry.kind != "section" and "pitfall:" in (text := f"{entry.title}\n{entry.body}").lower():
            for pitfall_id in linked_pitfalls(text):
                links.setdefault(pitfall_id, entry)
    return links


def documenting_entry(pitfall_id: str, title: str, body: str, links: dict[str, Entry],
                      ranked: list[Entry]) -> Entry | None:
    """The project entry that documents a built-in pitfall: the one that links its id (see pitfall_links),
    else a near-duplicate among the `ranked` entries."""
    if pitfall_id in links:
        return links[pitfall_id]
    duplicate = find_duplicate(title, body, ranked) if ranked else None
    return duplicate.entry if duplicate is not None else None
