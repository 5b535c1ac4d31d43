"""diagnose_log: Phase 1's "read the full error" for a log produced elsewhere (a cluster job the agent cannot
rerun), read streaming; the same diagnosis reproduce gives its failing runs."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult, bounded
from rootcause.tools.engines.reproduce import diagnosis_lines, next_step
from rootcause.tools.observe.collectives import DumpError, DumpSet, Report, analyse, read_dumps
from rootcause.tools.observe.collectives.dumps import is_archive, looks_like_dump
from rootcause.tools.observe.collectives.text import lines as collective_lines
from rootcause.tools.observe.collectives.text import recorded_sites
from rootcause.tools.observe.diagnosis import Diagnosis, diagnose_file, diagnose_text
from rootcause.tools.observe.diagnosis import signature as sig
from rootcause.tools.observe.diagnosis.engine import attach_collectives, mismatch_identity
from rootcause.tools.observe.evidence import diagnosis_line
from rootcause.tools.record.store import SessionStore, require_open

MAX_TEXT = 2_000_000
BINARY_SAMPLE = 8192
_TEXT_CONTROLS = frozenset("\t\n\r\x0c\x08\x1b")  # tabs, line ends, form feeds, backspaces, ANSI escapes


def _binary(head: bytes) -> bool:
    """More than 30% of the first bytes are not text (NUL, other control bytes, invalid UTF-8)."""
    if not head:
        return False
    text = head.decode("utf-8", "replace")
    odd = sum(1 for c in text if c == "\ufffd" or (c < " " and c not in _TEXT_CONTROLS))
    return odd > 0.3 * len(text)


def _head(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(BINARY_SAMPLE)




def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _log_of(found: DumpSet, folder: Path | None, root: Path) -> Diagnosis | None:
    """The diagnosis of the largest text file beside the dumps (the job's log), if any."""
    if not found.logs:
        return None
    name, data = max(found.logs, key=lambda item: found.log_sizes.get(item[0], len(item[1])))
    if folder is not None and (folder / name).is_file():
        return diagnose_file(folder / name, root)  # streaming, any size
    return diagnose_text(data[:MAX_TEXT].decode("utf-8", "replace"), root)


def _dumps_only(report: Report, root: Path) -> Diagnosis:
    """A diagnosis from the dumps alone: the mismatch's words and each culprit's recorded call site."""
    facts = collective_lines(report, root)
    m = report.mismatch
    if m is None:
        category = "hang" if report.waiting else "python_exception"
        return Diagnosis(category=category, message=facts[0], excerpt="",
                         signature=sig.identity(category, "no collective mismatch in the dumps", []).signature)
    recorded = recorded_sites(report, root)
    sites = [recorded[r] for r in m.culprit_ranks if r in recorded]  # `step at train.py:54`
    ident = mismatch_identity(report, root)
    return Diagnosis(category=report.category or "hang", message="", excerpt="",
                     location=sites[0].split(" at ", 1)[-1] if sites else None,
                     group=ident.group, signature=ident.signature)


def _diagnose_dumps(path: Path, given: str, ctx: ToolContext) -> Diagnosis:
    try:
        found = read_dumps(path)
    except DumpError as exc:
        raise UsageError(f"log path {given!r}: {exc}", exc.hint) from None
    except OSError as exc:
        raise UsageError(f"log path {given!r} cannot be read: {exc.strerror or exc}.",
                         "check the files' permissions") from None
    if not found.dumps and not found.logs:
        raise UsageError(f"log path {given!r} is not a file, and holds no log and no flight-recorder dump.",
                         "give a log file, or a folder / .tar / .zip of the per-rank dumps (rank<R>.pkl, "
                         "nccl_trace_rank_<R>)" + (f"; left out: {found.notes[0]}" if found.notes else ""))
    report = analyse(found)
    log = _log_of(found, path if path.is_dir() else None, ctx.root)
    if log is None or (report.dumps and not log.evidence):  # a log that shows no error: the dumps say more
        diagnosis = _dumps_only(report, ctx.root)
        diagnosis.excerpt = log.excerpt if log else ""
    else:
        diagnosis = log
    return attach_collectives(diagnosis, report, ctx.root)


class DiagnoseLogInput(BaseModel):
    """Diagnose a log produced elsewhere (a cluster job you cannot rerun): category, root error vs its wrappers,
    signature, location, per-rank outcomes, hang stacks, failed tests. Give exactly one of path (a file inside
    the root, any size: read streaming) or text (a pasted log). Phase 1 of the protocol."""

    path: str | None = Field(None, description="A log file, or a folder/.tar/.zip of flight-recorder dumps, inside "
                                               "the root; any size.")
    text: str | None = Field(None, description=f"The log text itself (up to {MAX_TEXT} characters).")
    session_id: str | None = Field(None, description="The session to record the evidence in (advances Phase 1).")


class DiagnoseLogResult(ToolResult):
    diagnosis: Diagnosis
    source: str = Field(description="The log's path relative to the root, or 'text'.")
    log_bytes: int
    next: str

    def summary(self) -> str:
        return "\n".join([f"Log {self.source} ({self.log_bytes} bytes).", *diagnosis_lines(self.diagnosis),
                          f"Next: {self.next}"])


def diagnose_log(inp: DiagnoseLogInput, ctx: ToolContext) -> DiagnoseLogResult:
    store = SessionStore(ctx.workspace)
    if inp.session_id:
        require_open(store, inp.session_id)
    if (inp.path is None) == (inp.text is None):
        raise UsageError("give exactly one of path or text.",
                         "path for a log file inside the root, text for a pasted log")
    if inp.text is not None:
        if not inp.text.strip():
            raise UsageError("text is empty.", "paste the log, or give its path")
        if len(inp.text) > MAX_TEXT:
            raise UsageError(f"text is {len(inp.text)} characters, over the {MAX_TEXT} limit.",
                             "write the log to a file inside the root and pass path= (read streaming, any size)")
        diagnosis = diagnose_text(inp.text, ctx.root)
        source, size = "text", len(inp.text.encode("utf-8", "replace"))
    else:
        path = ctx.workspace.resolve(inp.path, must_exist=True, what="log path")
        if not path.is_file() and not path.is_dir():
            raise UsageError(f"log path {inp.path!r} is not a file.", "give the path of a log file")
        try:
            head = b"" if path.is_dir() else _head(path)
        except OSError as exc:
            raise UsageError(f"log path {inp.path!r} cannot be read: {exc.strerror or exc}.",
                             "check the file's permissions") from None
        if path.is_dir() or is_archive(path) or looks_like_dump(head):
            diagnosis = _diagnose_dumps(path, inp.path, ctx)
            source, size = ctx.workspace.relative(path), _size(path)
        elif _binary(head):
            raise UsageError(f"log path {inp.path!r} is a binary file, not a log: most of its first "
                             f"{len(head):,} bytes are not text.",
                             "give the job's text output (stdout/stderr); a checkpoint goes to inspect_checkpoint")
        else:
            diagnosis = diagnose_file(path, ctx.root)
            source, size = ctx.workspace.relative(path), path.stat().st_size
    result = DiagnoseLogResult(diagnosis=diagnosis, source=source, log_bytes=size,
                               next=next_step("reproduced", diagnosis).replace("reproducible: ", ""))
    if inp.session_id:
        data = result.model_dump(mode="json")
        data["diagnosis"]["excerpt"] = bounded(data["diagnosis"]["excerpt"], 1_500)
        data["diagnosis"]["collectives"] = data["diagnosis"]["collectives"][:64]  # a session event stays small
        summary = "\n".join([f"Log `{source}` ({size} bytes)", f"- Diagnosis: {diagnosis_line(diagnosis)}",
                             f"- Signature: `{diagnosis.signature}`"])
        store.record(inp.session_id, "diagnose_log", summary, data, phase=1)
    return result
