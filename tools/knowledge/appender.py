"""Append one entry to a knowledge file in the file's own format, keeping every existing byte.

The new text is always `old[:offset] + inserted + old[offset:]`: nothing before or after
the insertion point changes. Numbered files get the next number (highest + 1), a bold
title and sub-bullets with the indent the file uses for numbers of that width; the entry
goes after the last entry of the given section, else of the best-matching section, else
into a new section at the end. Writers hold a lock under `.rootcause/locks/` and replace
the file atomically (temp file in the same folder, fsync, rename, fsync of the folder).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.knowledge.entries import Entry, Heading, ParsedFile, parse_markdown

LOCK_TIMEOUT_S = 60.0
_BULLET = re.compile(r"^\s*[-*+]\s+")
_INJECT = re.compile(r"^\s{0,3}(#{1,6}(\s|$)|```|~~~|={3,}\s*$|-{3,}\s*$|<!--)")


@dataclass
class Insertion:
    text: str
    offset: int
    number: int | None
    section: str
    new_section: bool


def validate_section(section: str | None) -> str | None:
    if section is None:
        return None
    name = section.strip()
    if not name:
        return None
    if any(c in section for c in "\r\n\x00") or name.startswith("#") or len(name) > 150:
        raise UsageError(f"section {section!r} would change the file's Markdown structure (newline, NUL, leading "
                         "'#', or over 150 characters).",
                         "give the plain heading text, e.g. section='Checkpoint' or 'Distributed Training > FSDP2'")
    if any(ord(c) < 32 for c in name):
        raise UsageError(f"section {section!r} contains control characters.", "give the plain heading text")
    return name


def validate_title(title: str | None, kind: str) -> str:
    name = (title or "").strip()
    if not name:
        raise UsageError(f"title is empty: kind {kind!r} writes an entry and needs one.",
                         "give a one-line title, e.g. 'DCP checkpoint keys must match the model state dict'")
    if any(c in name for c in "\r\n\x00") or len(name) > 300:
        raise UsageError("title must be one line of at most 300 characters.", "move details into body")
    return name.strip("*").strip()


def body_bullets(body: str | None, kind: str) -> list[str]:
    """The body as bullet texts: existing bullets stay bullets, each other paragraph becomes one."""
    text = (body or "").strip()
    if not text:
        raise UsageError(f"body is empty: kind {kind!r} needs the content of the entry.",
                         "give what must hold, what breaks otherwise, and the files involved")
    if "\x00" in text:
        raise UsageError("body contains a NUL byte.", "remove it")
    bullets: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [ln for ln in paragraph.splitlines() if ln.strip()]
        for line in lines:
            if _INJECT.match(_BULLET.sub("", line)):
                raise UsageError(f"body line {line.strip()[:60]!r} would add Markdown structure (a heading, fence, "
                                 "rule or comment) to the knowledge file.", "write it as plain text or inline code")
        if not any(_BULLET.match(ln) for ln in lines):
            bullets.append(" ".join(ln.strip() for ln in lines))
            continue
        for line in lines:
            if _BULLET.match(line) or not bullets:
                bullets.append(_BULLET.sub("", line).strip())
            else:
                bullets[-1] += " " + line.strip()
    return bullets


def _line_end_offsets(text: str) -> list[int]:
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    return offsets


def _indent_for(parsed: ParsedFile, width: int) -> int:
    seen = parsed.layout.indents
    if seen.get(width):
        return Counter(seen[width]).most_common(1)[0][0]
    if seen:
        # Files that align sub-bullets with the item text keep doing so for wider numbers.
        aligned = sum(1 for w, ind in seen.items() for i in ind if i == w)
        total = sum(len(ind) for ind in seen.values())
        if aligned * 2 >= total:
            return width
        return Counter(i for ind in seen.values() for i in ind).most_common(1)[0][0]
    return width


def _find_section(parsed: ParsedFile, name: str) -> Heading | None:
    wanted = name.lower()
    for h in parsed.headings:
        if " > ".join(h.path).lower() == wanted:
            return h
    parts = [p.strip().lower() for p in wanted.split(">")]
    for h in parsed.headings:
        if h.title.lower() == parts[-1]:
            return h
    return None


def _best_section(parsed: ParsedFile, kind: str, title: str, body: str) -> Heading | None:
    """The heading whose own entries are closest to the new one (at least two shared terms)."""
    from rootcause.tools.knowledge.index import Index

    holders: dict[str, Heading] = {" > ".join(h.path): h for h in parsed.headings}
    groups: dict[str, list[Entry]] = {}
    for e in parsed.entries:
        if e.kind == kind and e.section in holders:
            groups.setdefault(e.section, []).append(e)
    if not groups:
        return None
    pseudo = {name: [Entry(name.split(" > ")[-1], name, parsed.file, holders[name].line, holders[name].line,
                           "\n".join(f"{e.title}\n{e.body}" for e in group), "section")]
              for name, group in groups.items()}
    index = Index.build({name: ParsedFile(name, entries, [], parsed.layout, 0) for name, entries in pseudo.items()},
                        [])
    hits = index.search(f"{title}\n{title}\n{body}", top_k=1)
    if hits and len(set(hits[0].terms)) >= 2:
        return holders[hits[0].entry.section]
    return None


def _new_section_level(parsed: ParsedFile, kind: str) -> int:
    holders = {e.section for e in parsed.entries if e.kind == kind}
    levels = [h.level for h in parsed.headings if " > ".join(h.path) in holders]
    if levels:
        return min(levels)
    return 2 if any(h.level == 1 for h in parsed.headings) or not parsed.headings else parsed.headings[0].level


def effective_kind(parsed: ParsedFile) -> str:
    """A file with only a title heading (e.g. one we created) is written as a numbered file."""
    if parsed.layout.kind == "heading" and not any(h.level >= 2 for h in parsed.headings):
        return "numbered"
    return parsed.layout.kind


def render(parsed: ParsedFile, kind: str, number: int | None, title: str, bullets: list[str], level: int) -> str:
    layout = parsed.layout
    if kind == "numbered":
        marker = f"{number}{layout.delimiter} "
        pad = " " * _indent_for(parsed, len(marker))
        return f"{marker}**{title}**\n" + "".join(f"{pad}{layout.bullet} {b}\n" for b in bullets)
    if kind == "bullets":
        return f"{layout.bullet} **{title}**: {' '.join(bullets)}\n"
    prefix = f"{number}. " if number is not None else ""
    return f"{'#' * level} {prefix}{title}\n\n" + "".join(f"- {b}\n" for b in bullets)


def plan(text: str, parsed: ParsedFile, title: str, bullets: list[str], section: str | None,
         default_section: str) -> Insertion:
    kind = effective_kind(parsed)
    entry_kind = {"numbered": "numbered", "bullets": "bullet", "heading": "heading"}[kind]
    numbers = [e.number for e in parsed.entries if e.kind == entry_kind and e.number is not None]
    number = (max(numbers) + 1 if numbers else 1) if kind == "numbered" or numbers else None
    offsets = _line_end_offsets(text)
    lines_total = len(offsets) - 1
    heading = _find_section(parsed, section) if section else (
        _best_section(parsed, entry_kind, title, " ".join(bullets)) or _find_section(parsed, default_section))
    if heading is None and section is None and not any(h.level >= 2 for h in parsed.headings):
        # A file without sections: the entry goes at the end, no section is invented.
        return _at(text, lines_total, offsets, render(parsed, kind, number, title, bullets, 2), number, "", False,
                   blank_before=bool(text.strip()))
    if heading is None and section is None and kind == "heading":
        # In a heading-per-entry file the new heading is the new section: no wrapper is invented.
        levels = Counter(h.level for h in parsed.headings if h.level >= 2 and h.line in
                         {e.line for e in parsed.entries if e.kind == "heading"})
        level = levels.most_common(1)[0][0] if levels else 2
        return _at(text, lines_total, offsets, render(parsed, kind, number, title, bullets, level), number, "",
                   False, blank_before=bool(text.strip()))
    if heading is None:
        name = section or default_section
        level = _new_section_level(parsed, entry_kind)
        entry_level = level + 1 if kind == "heading" else level
        block = f"{'#' * level} {name}\n\n" + render(parsed, kind, number, title, bullets, entry_level)
        return _at(text, lines_total, offsets, block, number, name, True, blank_before=bool(text.strip()))
    path = " > ".join(heading.path)
    own = [e for e in parsed.entries if e.kind == entry_kind and e.section == path]
    if kind == "heading":
        own = [e for e in parsed.entries if e.kind == "heading" and e.section == path]
        after = heading.end_line
        level = heading.level + 1
    elif own:
        after = max(e.end_line for e in own)
        level = heading.level
    else:
        after = heading.direct_end
        level = heading.level
    lines = text.splitlines()
    while after > heading.line and not lines[after - 1].strip():
        after -= 1
    blank = kind != "bullets" or not own
    return _at(text, after, offsets, render(parsed, kind, number, title, bullets, level), number, path, False,
               blank_before=blank)


def _at(text: str, after_line: int, offsets: list[int], block: str, number: int | None, section: str,
        new_section: bool, blank_before: bool) -> Insertion:
    offset = offsets[min(after_line, len(offsets) - 1)]
    prefix = ""
    if offset > 0 and not text[:offset].endswith("\n"):
        prefix = "\n"
    if blank_before:
        prefix += "\n"
    suffix = ""
    rest = text[offset:]
    if rest.strip() and not rest.startswith("\n"):
        suffix = "\n"
    return Insertion(prefix + block + suffix, offset, number, section, new_section)


@contextmanager
def locked(workspace: Workspace, path: Path) -> Iterator[None]:
    """The writers' lock of one knowledge file (kept under .rootcause/, never beside the user's file)."""
    from filelock import FileLock, Timeout

    digest = hashlib.sha1(str(path).encode()).hexdigest()[:16]
    lock = FileLock(str(workspace.state_dir("locks") / f"knowledge-{digest}.lock"), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except Timeout:
        raise UsageError(f"another writer has held the lock of {workspace.relative(path)} for {LOCK_TIMEOUT_S:.0f}s; "
                         "nothing was written.", "retry the call") from None
    try:
        yield
    finally:
        lock.release()


def atomic_write(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def apply(text: str, insertion: Insertion) -> str:
    new = text[: insertion.offset] + insertion.text + text[insertion.offset:]
    # The promise to the user, checked rather than assumed.
    assert new.startswith(text[: insertion.offset]) and new.endswith(text[insertion.offset:])
    return new


def locate(new_text: str, file: str, title: str, number: int | None) -> Entry | None:
    parsed = parse_markdown(new_text, file)
    for entry in parsed.entries:
        if entry.title == title and (number is None or entry.number == number):
            return entry
    return None
