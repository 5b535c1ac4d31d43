"""Entries that `rootcause init` writes as examples: never a match, never a duplicate target."""

from __future__ import annotations

from functools import cache

from rootcause.tools.knowledge.entries import Entry, parse_markdown


@cache
def placeholder_keys() -> frozenset[tuple[str, str]]:
    """(title, whitespace-normalised body) of every entry of the init templates."""
    from rootcause.tools.knowledge.starter import TEMPLATES

    return frozenset(_key(e) for name, text in TEMPLATES.items() for e in parse_markdown(text, name).entries)


def _key(entry: Entry) -> tuple[str, str]:
    return entry.title.strip(), " ".join(entry.body.split())


def is_placeholder(entry: Entry) -> bool:
    return _key(entry) in placeholder_keys()
