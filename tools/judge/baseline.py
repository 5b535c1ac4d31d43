"""What an experiment is compared with: the session's baseline failure and its starting tree.

The failure baseline is the reproduce evidence recorded in the session (its status, runs
and diagnosis signature); a log diagnosed with diagnose_log stands in when nothing was
reproduced, and as a last resort the first failing run these tools saw themselves
(kept in the session facts as `baseline_fallback`). The tree baseline is what start_session
recorded: HEAD and the blob ids of the files already edited then; what differs from it is read
file by file and, for Python, symbol by symbol (tools/judge/symbols.py).
"""

from __future__ import annotations

from fnmatch import fnmatch
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator
from rootcause.tools.core import gitrepo
from rootcause.tools.core.errors import UsageError
from rootcause.tools.judge.symbols import logical_changes
from rootcause.tools.observe.diagnosis.models import group_of
from rootcause.tools.record.store import SessionState

FALLBACK_FACT = "baseline_fallback"


class Baseline(BaseModel):
    source: Literal["reproduce", "diagnose_log", "fallback"]
    evidence_seq: int | None = None
    status: str | None = Field(None, description="reproduce's status: reproduced | flaky | not_reproduced.")
    signature: str | None = None
    group: str | None = None
    outcomes: list[str] = Field(default_factory=list)
    consistent: bool | None = None
    error: str | None = None

    @model_validator(mode="after")
    def _group(self) -> Baseline:
        if self.signature and not self.group:
            self.group = group_of(self.signature)
        return self

    def same_failure(self, signature: str | None) -> tuple[bool, str]:
        """Whether a run fails with the baseline's failure, and how it agrees. Runs of this machine compare
        signatures; a pasted log (diagnose_log) is the reported bug, which a local run shows when it shares its
        group, and at the same call site when the signature agrees too (DESIGN, "Signature (v3)")."""
        if not signature or not self.signature:
            return False, "no signature to compare"
        pasted = self.source == "diagnose_log"
        if signature == self.signature:
            return True, "same signature" + (" as the pasted log: the same call site" if pasted else "")
        if pasted and group_of(signature) == self.group:
            return True, "same group as the pasted log, another call site"
        return False, f"a different {'group' if pasted else 'signature'}"

    @property
    def flaky(self) -> bool:
        undecided = ("not_reproduced", "inconclusive")
        return self.status == "flaky" or (self.consistent is False and self.status not in undecided)

    def one_line(self) -> str:
        where = f"{self.source} (evidence {self.evidence_seq})" if self.evidence_seq else self.source
        outcomes = f", runs {', '.join(self.outcomes)}" if self.outcomes else ""
        return f"{where}: {self.status or 'failed'}{outcomes}; signature `{self.signature or '-'}`"


def _reproduced(data: dict[str, Any]) -> Any:
    from rootcause.tools.record.evidence import ReproduceEvidence
    from rootcause.tools.record.registry import evidence_of

    typed = evidence_of("reproduce", data)
    return typed if isinstance(typed, ReproduceEvidence) else ReproduceEvidence()


def _from_reproduce(data: dict[str, Any], seq: int) -> Baseline:
    ev = _reproduced(data)
    # A different failure is not the session's failure: nothing to compare experiments with.
    signature = None if ev.status == "different_failure" else ev.signature()
    return Baseline(source="reproduce", evidence_seq=seq, status=ev.status, signature=signature,
                    outcomes=[r.outcome for r in ev.runs], consistent=ev.consistent, error=ev.error())


def baseline_of(state: SessionState) -> Baseline | None:
    """The latest reproduction that failed, else the latest reproduce, else a diagnosed log, else the fallback."""
    from rootcause.tools.record.evidence import DiagnoseLogEvidence
    from rootcause.tools.record.registry import evidence_of

    reproduced = [e for e in state.evidence if e.tool == "reproduce"]
    for ev in reversed(reproduced):
        if _reproduced(ev.data).status in ("reproduced", "flaky"):
            return _from_reproduce(ev.data, ev.seq)
    if reproduced:
        return _from_reproduce(reproduced[-1].data, reproduced[-1].seq)
    for ev in reversed(state.evidence):
        typed = evidence_of(ev.tool, ev.data) if ev.tool == "diagnose_log" else None
        if isinstance(typed, DiagnoseLogEvidence) and typed.diagnosis is not None:
            return Baseline(source="diagnose_log", evidence_seq=ev.seq, status="from_log",
                            signature=typed.diagnosis.signature, group=typed.diagnosis.group or None,
                            error=typed.diagnosis.message)
    fallback = state.facts.get(FALLBACK_FACT)
    if isinstance(fallback, dict):
        return Baseline.model_validate({**fallback, "source": "fallback"})
    return None


# ---------------------------------------------------------------- the tree since the session started

CHANGES_FILE = "changes.yaml"
DATA = "rootcause.tools.judge.data"


class FileChange(BaseModel):
    path: str
    hunks: int | None = Field(None, description="Separate changed regions; unknown for a file already edited at start.")
    added: int | None = None
    removed: int | None = None
    note: str = ""
    changes: list[list[str]] | None = Field(
        None, description="The logical changes of a Python file, each the symbols it touched (functions, classes, "
                          "module-level statements; an import with the symbols using it); [] when only comments or "
                          "formatting differ; null when not read symbol by symbol (one change for the file).")

    @property
    def logical(self) -> int:
        """How many logical changes this file adds: a file not read symbol by symbol counts as one."""
        return 1 if self.changes is None else len(self.changes)

    def what(self) -> str:
        if self.changes is None:
            return ""
        if not self.changes:
            return "no symbol changed (comments or formatting only)"
        if len(self.changes) == 1:
            return "1 change: " + ", ".join(self.changes[0])
        return f"{len(self.changes)} unrelated changes: " + "; ".join(", ".join(g) for g in self.changes)

    def one_line(self) -> str:
        what = f" — {self.what()}" if self.what() else ""
        if self.hunks is None:
            return f"{self.path} ({self.note or 'changed'}){what}"
        size = f"+{self.added} -{self.removed}, " if self.added is not None else ""
        note = f"; {self.note}" if self.note else ""
        return f"{self.path} ({size}{self.hunks} hunk{'s' if self.hunks != 1 else ''}{note}){what}"


class TreeChanges(BaseModel):
    start_head: str | None
    head: str | None
    files: list[FileChange] = Field(default_factory=list)

    @property
    def head_moved(self) -> bool:
        return self.start_head != self.head

    def summary(self) -> str:
        moved = f"HEAD moved {self.start_head[:10]} -> {self.head[:10]}; " if self.head_moved and self.start_head \
            and self.head else ""
        if not self.files:
            return moved + "no file differs from the session start"
        return moved + "; ".join(f.one_line() for f in self.files)


@cache
def _generated() -> tuple[str, ...]:
    import yaml
    from rootcause.tools.vocabulary.symptoms import read_data

    return tuple(yaml.safe_load(read_data(CHANGES_FILE, DATA))["generated"])


def generated(path: str) -> bool:
    """A file a run or a tool writes by itself (bytecode, caches): never an experiment's change."""
    return any(fnmatch(part, glob) for part in PurePosixPath(path).parts for glob in _generated())


def _start_blob(top: Path, start_head: str | None, path: str, start_files: dict[str, str]) -> str:
    if path in start_files:
        return start_files[path]
    if start_head is None:
        return "missing"
    return gitrepo.object_at(top, start_head, path) or "missing"


def tree_changes(root: Path, state: SessionState) -> TreeChanges | None:
    """Files whose content differs from what they were when the session started (None outside git)."""
    try:
        return _tree_changes(root, state.head, state.start_files)
    except (gitrepo.GitFailed, UsageError, ValueError, OSError):
        return None  # a repository git cannot read (no commits, a corrupt index): the check says it cannot tell


def worktree_changes(tree: Path) -> TreeChanges | None:
    """A separate working tree (a git worktree, a cloned copy) against its own HEAD: what the experiment changed."""
    try:
        return _tree_changes(tree, gitrepo.head_sha(tree), {})
    except (gitrepo.GitFailed, UsageError, ValueError, OSError):
        return None


def _blob_text(top: Path, blob: str) -> str | None:
    """A blob's text when git holds it (a file staged at the session start), else None."""
    try:
        return gitrepo.git(top, "cat-file", "blob", blob, strip=False)
    except gitrepo.GitFailed:
        return None


def _symbol_changes(top: Path, path: str, old: str | None) -> list[list[str]] | None:
    """The logical changes of a Python file from its old text to the working tree's (None: not readable so)."""
    if old is None or not path.endswith((".py", ".pyi")):
        return None
    try:
        new = (top / path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return logical_changes(old, new)


def _tree_changes(root: Path, start_head: str | None, start_files: dict[str, str]) -> TreeChanges | None:
    top = gitrepo.top_level(root)
    if top is None:
        return None
    head = gitrepo.head_sha(root)
    candidates = set(start_files) | set(gitrepo.changed_files(root))
    if start_head and head and start_head != head:
        candidates |= set(gitrepo.files_changed_between(root, start_head, head))
    changes = TreeChanges(start_head=start_head, head=head)
    untracked = set(gitrepo.untracked_files(root))
    for path in sorted(p for p in candidates if p and not generated(p)):
        now = gitrepo.blob_sha(top / path)
        if now == _start_blob(top, start_head, path, start_files):
            continue
        if path in start_files:
            old = _blob_text(top, start_files[path]) if start_files[path] != "missing" else None
            symbols = _symbol_changes(top, path, old) if now != "missing" else None
            note = ("edited again; it already had uncommitted changes at the session start, so its hunks are not "
                    "counted" + ("" if symbols is not None else " and it counts as one change"))
            changes.files.append(FileChange(path=path, note=note, changes=symbols))
        elif path in untracked or start_head is None:
            lines = (top / path).read_text(encoding="utf-8", errors="replace").count("\n") if now != "missing" else 0
            changes.files.append(FileChange(path=path, hunks=1, added=lines, removed=0, note="new file"))
        else:
            hunks, added, removed = gitrepo.diff_hunks(top, start_head, path)
            symbols = None if now == "missing" else _symbol_changes(top, path, gitrepo.file_at(top, start_head, path))
            changes.files.append(FileChange(path=path, hunks=hunks, added=added, removed=removed,
                                            note="deleted" if now == "missing" else "", changes=symbols))
    return changes
