"""Paths the knowledge marks as generated / not hand-edited, as globs, checked against changed files.

Two sources:
- the explicit marker, anywhere in a knowledge file:
  `<!-- rootcause:generated veomni/models/*/generated/** other/path/** -->`
  (whitespace-separated globs relative to the root; `**` spans folders, `*` one name);
- prose: an entry that says its files must not be edited by hand ("must not be edited",
  "do not edit", "manual edits ... overwritten", "not hand-edited") turns the
  backticked paths of its lines into globs, except on lines that say what to edit
  instead ("edit the patch spec", "to change ...", "instead"). A path ending in `/` is
  a folder (`/**` added); `<name>` and `{name}` placeholders become `*`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel
from rootcause.tools.core import gitrepo
from rootcause.tools.knowledge.entries import Entry, ParsedFile

_CUE = re.compile(
    r"(must|should|do|does|can)\s*(not|n't)\s+(be\s+)?(hand[- ]?)?(edit|modif|chang|touch)\w*|"
    r"\bnever\s+(hand[- ]?)?(edit|modif)\w*|\b(edited|modified|changed)\s+(manually|by hand)|"
    r"\b(manual|hand)[- ]edit\w*|\bnot\s+(be\s+)?hand[- ]edited|\bdo not edit\b|\bauto-?generated\b.*\boverwrit",
    re.IGNORECASE,
)
_ALLOWED_LINE = re.compile(r"\bto change\b|\binstead\b|\bedit (the|its|their)\b|\bsource of truth\b", re.IGNORECASE)
_BACKTICK = re.compile(r"`([^`\s]+)`")
_PLACEHOLDER = re.compile(r"<[^>/]+>|\{[^}/]+\}")


@dataclass(frozen=True)
class Guard:
    glob: str
    pattern: re.Pattern[str]
    title: str
    file: str
    line: int
    source: str  # marker | prose


class GuardViolation(BaseModel):
    path: str
    glob: str
    title: str
    file: str
    line: int
    source: str


def _looks_like_path(text: str) -> bool:
    if text.startswith("-") or any(c in text for c in "()=:;,'\"") or text.startswith(("http", "<")):
        return False
    return "/" in text


def _clean(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def normalize_glob(raw: str) -> str:
    glob = _PLACEHOLDER.sub("*", _clean(raw.strip())).lstrip("/")
    if glob.endswith("/"):
        glob += "**"
    return glob


def glob_regex(glob: str) -> re.Pattern[str]:
    """Anchored at the root; a glob without '/' matches a name at any depth; `a/b` also covers `a/b/...`."""
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    body = "".join(out)
    prefix = "" if "/" in glob.rstrip("/") else "(?:.*/)?"
    return re.compile(f"^{prefix}{body}(?:/.*)?$")


def _entry_at(parsed: ParsedFile, line: int) -> str:
    for entry in parsed.entries:
        if entry.line <= line <= max(entry.end_line, entry.line):
            return entry.title
    heading = [h.title for h in parsed.headings if h.line <= line]
    return heading[-1] if heading else parsed.file


def _prose_guards(entry: Entry) -> list[Guard]:
    text = f"{entry.title}\n{entry.body}"
    if not _CUE.search(text):
        return []
    guards = []
    for line in text.splitlines():
        if _ALLOWED_LINE.search(line):
            continue
        for m in _BACKTICK.finditer(line):
            if _looks_like_path(m.group(1)):
                glob = normalize_glob(m.group(1))
                guards.append(Guard(glob, glob_regex(glob), entry.title, entry.file, entry.line, "prose"))
    return guards


def collect_guards(files: dict[str, ParsedFile]) -> list[Guard]:
    guards: list[Guard] = []
    for parsed in files.values():
        for line, globs in parsed.markers:
            title = _entry_at(parsed, line)
            for raw in globs:
                glob = normalize_glob(raw)
                guards.append(Guard(glob, glob_regex(glob), title, parsed.file, line, "marker"))
        for entry in parsed.entries:
            guards.extend(_prose_guards(entry))
    unique: dict[tuple[str, str], Guard] = {}
    for guard in guards:
        unique.setdefault((guard.glob, guard.file), guard)
    return list(unique.values())


def working_tree_changes(root: Path) -> list[str]:
    """Changed files (staged, unstaged, untracked) relative to the root."""
    repo = gitrepo.repo_for(root)
    if repo is None or repo.working_tree_dir is None:
        return []
    top = Path(repo.working_tree_dir).resolve()
    out = []
    for name in gitrepo.changed_files(root):
        path = top / name
        try:
            out.append(str(path.relative_to(root)))
        except ValueError:
            continue
    return out


def violations(guards: list[Guard], changed: list[str]) -> list[GuardViolation]:
    found = []
    for path in changed:
        clean = _clean(path)
        for guard in guards:
            if guard.pattern.match(clean):
                found.append(GuardViolation(path=clean, glob=guard.glob, title=guard.title, file=guard.file,
                                            line=guard.line, source=guard.source))
                break
    return found
