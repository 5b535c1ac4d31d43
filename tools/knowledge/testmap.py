"""Regression guards: which CI-enumerated test owns a changed path, read from the knowledge's tables.

Tables anywhere in the knowledge folder are read (testing.md is the usual home):
- CI rows name a workflow file (`*.yml`): their backticked paths are collected by those
  workflows (a path ending in `/` is a whole directory); a row without a path that says
  "everything else" is the rule for new files;
- ownership rows map a change (a description, or a source path) to test files.
A test file nobody collects must be wired into CI: the answer says so and names where.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel
from rootcause.tools.knowledge.entries import Entry, ParsedFile, parse_tokens
from rootcause.tools.vocabulary.words import words

_TICK = re.compile(r"`([^`]+)`")
_WORKFLOW = re.compile(r"[\w.-]+\.ya?ml\b")
_BARE_PATH = re.compile(r"(?<![\w/.*-])(?:[\w.*-]+/)+(?:[\w*-]+\.\w+)?(?![\w/])|(?<![\w/.*-])[\w*-]+\.py\b")


class SuggestedTest(BaseModel):
    changed_path: str | None = None
    test: str | None = None
    """The test file or directory to extend (or to wire into CI)."""
    workflows: list[str] = []
    wired: bool = False
    """True when CI already runs `test`."""
    statement: str
    source: str | None = None
    """Knowledge file:line of the table row the answer comes from."""


@dataclass
class Row:
    cells: list[str]
    file: str
    line: int

    def paths(self, cell: int) -> list[str]:
        """Path-like words inside backticks (`pytest tests/data/` gives tests/data/), else bare path-shaped words."""
        if cell >= len(self.cells):
            return []
        spans = _TICK.findall(self.cells[cell])
        if not spans:
            # Tables are written without backticks too: then only words shaped like a path count
            # (`data/`, `data/collate.py`), not prose such as "New/changed" or "registration/build".
            return _BARE_PATH.findall(self.cells[cell])
        return [w for span in spans for w in span.split()
                if ("/" in w or w.endswith(".py")) and not w.startswith("-")]


@dataclass
class TestMap:
    ci_rows: list[Row] = field(default_factory=list)
    default_rule: Row | None = None
    owners: list[Row] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.ci_rows or self.owners)


def _tables(text: str, file: str) -> list[Row]:
    """Body rows of every table, in the (change, test, workflow...) order the map reads.

    A table whose header names a source column, a test column and a workflow column in any
    order (`Source path | CI workflow | Test file`) yields two rows per line: source -> test
    (ownership) and test -> workflow (CI). Other tables keep their own column order.
    """
    rows: list[Row] = []
    tokens = parse_tokens(text)
    current: list[str] | None = None
    header: list[str] = []
    line = 0
    in_body = in_head = False
    for tok in tokens:
        if tok.type == "thead_open":
            in_head, header = True, []
        elif tok.type == "thead_close":
            in_head = False
        elif tok.type == "tbody_open":
            in_body = True
        elif tok.type == "tbody_close":
            in_body = False
        elif tok.type == "tr_open" and in_body:
            current, line = [], (tok.map[0] + 1 if tok.map else 0)
        elif tok.type == "inline" and in_head:
            header.append(tok.content)
        elif tok.type == "inline" and current is not None:
            current.append(tok.content)
        elif tok.type == "tr_close" and current is not None:
            rows.extend(_by_header(header, Row(current, file, line)))
            current = None
    return rows


_SOURCE_HEAD = re.compile(r"\b(source|module|code|package|change[sd]?|area|owns?|covers?|paths?|files?)\b",
                          re.IGNORECASE)
_TEST_HEAD = re.compile(r"\btests?\b", re.IGNORECASE)
_WORKFLOW_HEAD = re.compile(r"\b(workflows?|ci|jobs?|pipelines?|runs? in|runner)\b", re.IGNORECASE)


def _by_header(header: list[str], row: Row) -> list[Row]:
    """Rows of a three-role table (source, test, workflow columns in any order) as ownership + CI rows."""
    def column(pattern: re.Pattern[str], taken: set[int]) -> int | None:
        return next((i for i, h in enumerate(header) if i not in taken and pattern.search(h)), None)

    workflow = column(_WORKFLOW_HEAD, set())
    test = column(_TEST_HEAD, {workflow} if workflow is not None else set())
    source = column(_SOURCE_HEAD, {i for i in (workflow, test) if i is not None})
    if None in (workflow, test, source) or max(workflow, test, source) >= len(row.cells):  # type: ignore[type-var]
        return [row]
    cells = row.cells
    return [Row([cells[source], cells[test]], row.file, row.line),  # type: ignore[index]
            Row([cells[test], cells[workflow]], row.file, row.line)]  # type: ignore[index]


def load_testmap(texts: dict[str, str]) -> TestMap:
    """texts: knowledge file (relative) -> its text."""
    tm = TestMap()
    for file, text in sorted(texts.items(), key=lambda kv: (not kv[0].endswith("testing.md"), kv[0])):
        for row in _tables(text, file):
            if len(row.cells) < 2:
                continue
            if _WORKFLOW.search(" ".join(row.cells[1:])):
                if row.paths(0):
                    tm.ci_rows.append(row)
                elif re.search(r"everything else|any other|otherwise|\bother\b", row.cells[0], re.IGNORECASE):
                    tm.default_rule = row
            elif any("test" in p for p in row.paths(1)) or re.search(r"\btests?/", row.cells[1]):
                tm.owners.append(row)
    return tm


def _workflows(row: Row) -> list[str]:
    return list(dict.fromkeys(_WORKFLOW.findall(" ".join(row.cells[1:]))))


def _is_test(path: str) -> bool:
    name = Path(path).name
    return path.startswith(("tests/", "test/")) or name.startswith("test_") or name.endswith("_test.py")


def _collected_by(tm: TestMap, test: str) -> Row | None:
    """The CI row that runs `test` (its exact path, or a directory that contains it)."""
    best: tuple[int, Row] | None = None
    for row in tm.ci_rows:
        for p in row.paths(0):
            p = p.rstrip("*")
            hit = test == p or (p.endswith("/") and (test + "/").startswith(p))
            if hit and (best is None or len(p) > best[0]):
                best = (len(p), row)
    return best[1] if best else None


def _enumerated(tm: TestMap, test: str) -> Row | None:
    """The ownership row naming this very test file (or a file pattern it fits); folders do not count."""
    from fnmatch import fnmatchcase

    for row in tm.owners:
        for p in row.paths(1):
            if not p.endswith("/") and (p == test or ("*" in p and fnmatchcase(test, p))):
                return row
    return None


def _wiring(tm: TestMap, test: str) -> tuple[bool, list[str], str]:
    row = _collected_by(tm, test)
    if row is not None:
        return True, _workflows(row), f"{row.file}:{row.line}"
    row = _enumerated(tm, test)
    if row is not None:
        return True, [], f"{row.file}:{row.line}"
    return False, _workflows(tm.default_rule) if tm.default_rule else [], (
        f"{tm.default_rule.file}:{tm.default_rule.line}" if tm.default_rule else "")


def _describe_owner(tm: TestMap, text: str) -> tuple[Row, str] | None:
    """The ownership row whose description best matches: a shared word, and two terms or a clear lead."""
    from rootcause.tools.knowledge.index import Index

    candidates = [row for row in tm.owners if row.paths(1) and not row.paths(0)]
    if not candidates or not text.strip():
        return None
    pseudo = [Entry(row.cells[0], "", row.file, n, n, "", "bullet") for n, row in enumerate(candidates)]
    index = Index.build({"rows": ParsedFile("rows", pseudo, [], None, 0)}, [])  # type: ignore[arg-type]
    hits = index.search(text, top_k=2)
    if not hits:
        return None
    terms = set(hits[0].terms)
    clear_lead = len(hits) == 1 or hits[0].score >= 1.3 * hits[1].score
    if all(t.startswith("~") for t in terms) or (len(terms) < 2 and not clear_lead):
        return None
    row = candidates[hits[0].entry.line]
    return row, row.paths(1)[0]


def _prefix_owner(tm: TestMap, path: str) -> tuple[Row, str] | None:
    """The ownership row keyed by the longest source-path prefix of path."""
    found = [(len(p), row) for row in tm.owners for p in row.paths(0)
             if not _is_test(p) and row.paths(1) and path.startswith(p.rstrip("*"))]
    if not found:
        return None
    row = max(found, key=lambda x: x[0])[1]
    return row, row.paths(1)[0]


def _test_dir_for(tm: TestMap, path: str) -> Row | None:
    """A collected test directory mirroring a source path (pkg/data/x.py -> tests/data/)."""
    parts = Path(path).parts
    for row in tm.ci_rows:
        for p in row.paths(0):
            tail = p.rstrip("/").split("/")[1:]
            if p.endswith("/") and tail and any(parts[i:i + len(tail)] == tuple(tail) for i in range(len(parts))):
                return row
    return None


def suggest(tm: TestMap, path: str | None, text: str) -> SuggestedTest:
    if tm.empty:
        return SuggestedTest(changed_path=path, statement=(
            "the knowledge has no table mapping tests to CI workflows (testing.md): cannot tell which test CI "
            "runs; add the regression test next to the module's existing tests and check the CI workflow lists it"))
    if path and _is_test(path):
        wired, workflows, source = _wiring(tm, path)
        if wired:
            how = f"collected by {', '.join(workflows)}" if workflows else "enumerated in CI"
            return SuggestedTest(changed_path=path, test=path, workflows=workflows, wired=True, source=source,
                                 statement=f"`{path}` is already {how}: extend it, no workflow change needed")
        rule = f" ({', '.join(workflows)})" if workflows else ""
        return SuggestedTest(changed_path=path, test=path, workflows=workflows, wired=False, source=source or None,
                             statement=f"`{path}` is a new file CI does not run: wire it into CI{rule} with one "
                             "pytest line per workflow, or fold the case into an enumerated test in the same folder")
    owner = _describe_owner(tm, f"{path or ''}\n{text}") or (_prefix_owner(tm, path) if path else None)
    if owner is not None:
        row, test = owner
        wired, workflows, _ = _wiring(tm, test)
        return SuggestedTest(changed_path=path, test=test, workflows=workflows, wired=True,
                             source=f"{row.file}:{row.line}",
                             statement=f"extend `{test}` (owns '{row.cells[0].strip()[:80]}'): it already runs in CI"
                             + (f" via {', '.join(workflows)}" if workflows else ""))
    if path:
        row = _test_dir_for(tm, path)
        if row is not None:
            test = row.paths(0)[0]
            return SuggestedTest(changed_path=path, test=test, workflows=_workflows(row), wired=True,
                                 source=f"{row.file}:{row.line}",
                                 statement=f"add the test under `{test}`: CI collects that folder "
                                 f"({', '.join(_workflows(row))}), no workflow change needed")
    workflows = _workflows(tm.default_rule) if tm.default_rule else []
    return SuggestedTest(changed_path=path, workflows=workflows, wired=False,
                         source=f"{tm.default_rule.file}:{tm.default_rule.line}" if tm.default_rule else None,
                         statement="no enumerated test owns this change: a new test file must be wired into CI"
                         + (f" ({', '.join(workflows)})" if workflows else "") + " or it will never run there")


def query_words(text: str) -> int:
    return len(words(text))
