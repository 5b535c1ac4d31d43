"""Markdown knowledge files -> entries with 1-based line numbers (markdown-it-py).

Three entry formats are recognised, per file:

- numbered: `N. **Bold title**` items with sub-bullets (the usual constraints.md shape).
  Sub-bullets indented less than the item's content column parse as a sibling list in
  CommonMark; an indented list right after an item still belongs to it. Prose a section
  holds outside its numbered entries (e.g. a "Core files:" list) becomes a `section` entry.
- bullets: a file dominated by top-level bullets; each bullet is an entry.
- heading: otherwise every heading with content of its own is an entry.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import lru_cache

_BOLD = re.compile(r"^\s*(\*\*|__)(.+?)\1\s*[:.\u2014-]?\s*")
_NUMBERED_HEADING = re.compile(r"^(\d+)[.)]\s+")
_SENTENCE = re.compile(r"^(.{8,120}?)(?:[.:;](?:\s|$)|\s[\u2014-]\s)")
MIN_SECTION_WORDS = 6
MAX_TITLE = 90
MARKER = re.compile(r"<!--\s*rootcause:generated\s+(.+?)\s*-->")


@dataclass(slots=True)
class Entry:
    title: str
    section: str
    file: str
    line: int
    end_line: int
    body: str
    kind: str
    number: int | None = None

    def excerpt(self, limit: int = 300) -> str:
        text = re.sub(r"\s+", " ", self.body).strip()
        return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(slots=True)
class Heading:
    level: int
    title: str
    line: int
    """1-based line of the heading."""
    path: tuple[str, ...]
    end_line: int = 0
    """1-based last line of the section including its subsections."""
    direct_end: int = 0
    """1-based last line before the first subheading."""


@dataclass(slots=True)
class Layout:
    """What the appender needs to follow a file's own format."""

    kind: str
    delimiter: str = "."
    bullet: str = "-"
    indents: dict[int, list[int]] = field(default_factory=dict)
    """Width of the number marker -> sub-bullet indents seen for it."""
    heading_level: int = 2


@dataclass(slots=True)
class ParsedFile:
    file: str
    entries: list[Entry]
    headings: list[Heading]
    layout: Layout
    line_count: int
    markers: list[tuple[int, list[str]]] = field(default_factory=list)
    """(1-based line, globs) of every `<!-- rootcause:generated ... -->` marker."""


@lru_cache(maxsize=1)
def _md():
    from markdown_it import MarkdownIt

    # Block structure only: inline tokens keep their raw `content`, which is all the parser reads.
    return MarkdownIt("commonmark").enable("table").disable("inline")


def parse_tokens(text: str) -> list:
    return _md().parse(text)


@dataclass(slots=True)
class _Block:
    type: str
    start: int
    end: int
    index: int


def _blocks(tokens: list) -> list[_Block]:
    out = []
    for i, tok in enumerate(tokens):
        if tok.level == 0 and tok.nesting >= 0 and tok.map is not None:
            out.append(_Block(tok.type, tok.map[0], tok.map[1], i))
    return out


def _inline_after(tokens: list, index: int) -> str:
    for tok in tokens[index:index + 4]:
        if tok.type == "inline":
            return tok.content
    return ""


def _items(tokens: list, list_index: int) -> list[tuple[int, object]]:
    """(token index, token) of the list items of the level-0 list opened at list_index."""
    items = []
    for j in range(list_index + 1, len(tokens)):
        tok = tokens[j]
        if tok.level == 0 and tok.nesting == -1:
            break
        if tok.type == "list_item_open" and tok.level == 1:
            items.append((j, tok))
    return items


def _first_sentence(text: str) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    m = _SENTENCE.match(flat)
    title = m.group(1) if m else flat
    if len(title) > MAX_TITLE:
        title = title[:MAX_TITLE].rsplit(" ", 1)[0] + "…"
    title = title.strip().strip("*_ ")
    if title.count("`") % 2:
        title += "`"
    return title or flat[:MAX_TITLE]


def _text(lines: list[str], start: int, end: int) -> str:
    return "\n".join(lines[start:end]).strip("\n")


def parse_markdown(text: str, file: str) -> ParsedFile:
    lines = text.splitlines()
    tokens = parse_tokens(text)
    blocks = _blocks(tokens)

    headings: list[Heading] = []
    stack: list[Heading] = []
    for b in blocks:
        if b.type != "heading_open":
            continue
        level = int(tokens[b.index].tag[1])
        title = _inline_after(tokens, b.index).strip()
        while stack and stack[-1].level >= level:
            stack.pop()
        heading = Heading(level, title, b.start + 1, (*(h.title for h in stack), title))
        stack.append(heading)
        headings.append(heading)
    heading_lines = [h.line - 1 for h in headings]
    for i, h in enumerate(headings):
        nxt_any = headings[i + 1].line - 1 if i + 1 < len(headings) else len(lines)
        h.direct_end = nxt_any
        h.end_line = next((g.line - 1 for g in headings[i + 1:] if g.level <= h.level), len(lines))

    def section_at(line0: int) -> tuple[str, ...]:
        i = bisect_right(heading_lines, line0)
        return headings[i - 1].path if i else ()

    layout = Layout(kind="heading")
    numbered: list[tuple[int, int, int, str, str, int]] = []  # start, end, number, title, rest, block pos
    for pos, b in enumerate(blocks):
        if b.type != "ordered_list_open":
            continue
        layout.delimiter = tokens[b.index].markup or "."
        for j, item in _items(tokens, b.index):
            lead = _inline_after(tokens, j + 1)
            m = _BOLD.match(lead)
            if not m:
                continue
            number = int(item.info) if item.info.isdigit() else 0
            numbered.append((item.map[0], item.map[1], number, m.group(2).strip(), lead[m.end():], pos))

    entries: list[Entry] = []
    claimed: set[int] = set()  # block positions that belong to an entry

    def boundary(after: int) -> int:
        """First heading line (0-based) at or after `after`, else end of file."""
        i = bisect_left(heading_lines, after)
        return heading_lines[i] if i < len(heading_lines) else len(lines)

    if numbered:
        layout.kind = "numbered"
        starts = sorted(s for s, *_ in numbered)
        for start, end, number, title, _rest, pos in numbered:
            claimed.add(pos)
            following = bisect_right(starts, start)
            stop = min(starts[following] if following < len(starts) else len(lines), boundary(start + 1))
            # Extend over following level-0 blocks that are indented (sub-bullets that lost their parent).
            for later in range(pos + 1, len(blocks)):
                b = blocks[later]
                if b.start < end:
                    continue
                if b.start >= stop or not lines[b.start][:1].isspace():
                    break
                end = b.end
                claimed.add(later)
            end = min(end, stop)
            while end > start + 1 and not lines[end - 1].strip():
                end -= 1
            first = lines[start]
            body = (first[first.find("**", first.find("**") + 2) + 2:].strip(" :.-") + "\n"
                    + _text(lines, start + 1, end)).strip()
            sub = [ln for ln in lines[start + 1:end] if ln.strip().startswith(("- ", "* ", "+ "))]
            if sub:
                marker = re.match(r"^(\d+)[.)]", first.lstrip())
                width = len(marker.group(0)) + 1 if marker else 3
                indent = min(len(ln) - len(ln.lstrip()) for ln in sub)
                layout.indents.setdefault(width, []).append(indent)
                layout.bullet = sub[0].strip()[0]
            entries.append(Entry(title, " > ".join(section_at(start)), file, start + 1, end, body, "numbered",
                                 number))
    else:
        bullet_items = [pair for b in blocks if b.type == "bullet_list_open" for pair in _items(tokens, b.index)]
        content_headings = [h for h in headings if h.level >= 2]
        if bullet_items and len(bullet_items) > 2 * max(1, len(content_headings)):
            layout.kind = "bullets"
            for pos, b in enumerate(blocks):
                if b.type != "bullet_list_open":
                    continue
                claimed.add(pos)
                for j, item in _items(tokens, b.index):
                    layout.bullet = item.markup or "-"
                    start, end = item.map
                    while end > start + 1 and not lines[end - 1].strip():
                        end -= 1
                    raw = _text(lines, start, end)
                    lead = _inline_after(tokens, j + 1)
                    m = _BOLD.match(lead)
                    title = m.group(2).strip() if m else _first_sentence(lead)
                    body = re.sub(r"^\s*[-*+]\s+", "", raw, count=1)
                    entries.append(Entry(title, " > ".join(section_at(start)), file, start + 1, end, body, "bullet"))
    # Headings: an entry per heading (heading format), or a `section` entry for prose outside entries.
    for h in headings:
        own = [b for pos, b in enumerate(blocks)
               if pos not in claimed and b.type != "heading_open" and h.line - 1 < b.start < h.direct_end]
        body = "\n".join(_text(lines, b.start, b.end) for b in own)
        if layout.kind == "heading":
            if not body.strip():
                continue
            m = _NUMBERED_HEADING.match(h.title)
            title = h.title[m.end():] if m else h.title
            last = max(b.end for b in own)
            entries.append(Entry(title, " > ".join(h.path[:-1]), file, h.line, last, body, "heading",
                                 int(m.group(1)) if m else None))
            layout.heading_level = h.level
        elif len(body.split()) >= MIN_SECTION_WORDS:
            last = max(b.end for b in own)
            entries.append(Entry(h.title, " > ".join(h.path[:-1]), file, h.line, last, body, "section"))
    entries.sort(key=lambda e: e.line)
    markers = [(n, m.group(1).split()) for n, line in enumerate(lines, start=1) for m in MARKER.finditer(line)]
    return ParsedFile(file, entries, headings, layout, len(lines), markers)
