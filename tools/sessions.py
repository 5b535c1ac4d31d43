"""Debugging sessions: triage at start, an append-only event log, phases, and the report.

A session is `.rootcause/sessions/<id>/events.jsonl` (the truth: one JSON object per line,
appended with a single write under a lock, so a crash loses at most the line being
written and a truncated last line is skipped on read) plus `snapshot.json`, the replayed
state rewritten atomically after every event for readers that want one file.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock
from pydantic import BaseModel, Field

from tools import gitrepo
from tools.context import ToolContext
from tools.errors import UsageError
from tools.keywords import extract_keywords
from tools.results import ToolResult, bounded
from tools.taxonomy import classify_text
from tools.workspace import Workspace

PHASE_NAMES: dict[int, str] = {
    1: "Investigate",
    2: "Pattern analysis",
    3: "Hypothesis and test",
    4: "Fix",
    5: "Knowledge capture",
}
PhaseStatus = Literal["pending", "in_progress", "done", "skipped"]
SESSION_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")
QUICK_PATH_MINUTES = 15


class Phase(BaseModel):
    number: int
    name: str
    status: PhaseStatus = "pending"


class Evidence(BaseModel):
    seq: int
    at: str
    tool: str
    summary: str
    phase: int | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class SessionState(BaseModel):
    session_id: str
    symptom: str
    path: Literal["quick", "full"]
    reasons: list[str]
    category: str
    keywords: list[str]
    checklists: list[str]
    phases: list[Phase]
    created_at: str
    created_ts: float
    head: str | None = None
    diff_hash: str | None = None
    start_files: dict[str, str] = Field(default_factory=dict)
    """Blob ids of the files already changed or untracked at start: later edits are told apart from them."""
    status: Literal["open", "stopped", "closed"] = "open"
    path_changes: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict)
    """Counters and flags that tools keep in the session (e.g. consecutive fix failures)."""

    def phase(self, number: int) -> Phase:
        return self.phases[number - 1]


# ---------------------------------------------------------------- triage

_DISTRIBUTED = re.compile(
    r"\b(distributed|multi-?(gpu|node)|rank\s*\d*|ranks|fsdp2?|ddp|nccl|gloo|torchrun|all_?reduce|"
    r"all_?gather|barrier|collective|shard(ed|ing)?|sequence[ -]parallel|\bsp\b|ulysses|moe|expert"
    r"[ -]parallel|world[_ ]size|8[- ]gpu|hangs?|hung|deadlock|stuck)\b",
    re.IGNORECASE,
)
_NUMERICAL = re.compile(
    r"\b(nan|inf|non-?finite|diverg\w*|loss (spike|explod\w*|wrong|differs?|mismatch)|wrong loss|"
    r"grad(ient)?[_ ]norm|gradient explosion|explod\w*|accuracy|numeric\w*|precision|bf16|fp16|"
    r"mismatch between runs|different (loss|numbers|results))\b",
    re.IGNORECASE,
)
_UNCLEAR = re.compile(
    r"\b(sometimes|intermittent\w*|flaky|random(ly)?|unclear|not sure|no idea|no error|silently|"
    r"unexpected(ly)? behaviou?r|weird|mysterious|occasionally|nondeterministic)\b",
    re.IGNORECASE,
)
_FAILED_FIXES = re.compile(
    r"\b(tried\b.{0,40}\b(twice|several times|multiple times|many times|again)|"
    r"(tried|after|made)\s+(2|two|3|three|several|multiple|many)\s+(failed\s+)?(fix|attempt|approach|change)\w*|"
    r"(2|two|3|three|several|multiple)\s+(failed\s+)?(fix|attempt)\w*|"
    r"fix(es)? (did ?n[o']t|didn't|failed to) (work|help)|still (fails|failing|broken))",
    re.IGNORECASE,
)
_CLEAR_ERROR = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback|error:", re.IGNORECASE)
_FULL_CATEGORIES = {"hang", "distributed_error", "nonfinite", "gradient_explosion"}


class Triage(BaseModel):
    path: Literal["quick", "full"]
    reasons: list[str]
    category: str
    keywords: list[str]
    checklists: list[str]


def triage(symptom: str, path_hint: str | None = None) -> Triage:
    category, category_why = classify_text(symptom)
    reasons: list[str] = []
    if _DISTRIBUTED.search(symptom) or category in {"hang", "distributed_error"}:
        reasons.append("distributed symptom (hang, ranks, sharding or collectives): the protocol requires Full")
    if _NUMERICAL.search(symptom) or category in {"nonfinite", "gradient_explosion"}:
        reasons.append("numerical symptom (NaN/Inf, divergence, grad norm): the protocol requires Full")
    if _FAILED_FIXES.search(symptom):
        reasons.append("two or more fix attempts have already failed")
    if _UNCLEAR.search(symptom):
        reasons.append("the cause is unclear or the failure is intermittent")
    if not reasons and not _CLEAR_ERROR.search(symptom) and category == "python_exception":
        reasons.append("no clear error message: the root cause is not evident yet")
    if reasons:
        path: Literal["quick", "full"] = "full"
        if path_hint == "quick":
            reasons.append("path_hint 'quick' overridden by the reasons above")
    elif path_hint == "full":
        path = "full"
        reasons.append("path_hint 'full' requested by the caller")
    else:
        path = "quick"
        reasons.append(
            f"clear error ({category}: {category_why}) with no distributed, numerical or repeated-failure "
            f"signal; switch to Full if not fixed in {QUICK_PATH_MINUTES} minutes"
        )
    checklists: list[str] = []
    if _DISTRIBUTED.search(symptom) or category in {"hang", "distributed_error"}:
        checklists.append("distributed_checklist")
    if _NUMERICAL.search(symptom) or category in {"nonfinite", "gradient_explosion", "checkpoint_mismatch",
                                                   "dtype_mismatch"}:
        checklists.append("numerical_checklist")
    return Triage(path=path, reasons=reasons, category=category, keywords=extract_keywords(symptom),
                  checklists=checklists)


# ---------------------------------------------------------------- store


CLOCK_OFFSET_ENV = "ROOTCAUSE_CLOCK_OFFSET_S"


def now() -> float:
    """Wall-clock seconds, shifted by ROOTCAUSE_CLOCK_OFFSET_S: lets tests age a session (Quick Path 15 min)."""
    try:
        offset = float(os.environ.get(CLOCK_OFFSET_ENV, "0") or 0)
    except ValueError:
        offset = 0.0
    return time.time() + offset


def _now() -> tuple[str, float]:
    ts = now()
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds"), ts


def _apply(state: SessionState | None, event: dict[str, Any]) -> SessionState:
    kind = event["type"]
    if kind == "created":
        return SessionState.model_validate(event["state"])
    if state is None:
        raise ValueError("event log does not start with 'created'")
    if kind == "evidence":
        state.evidence.append(Evidence.model_validate(event["evidence"]))
    elif kind == "phase":
        _advance(state, event["number"], event["status"])
    elif kind == "path":
        state.path = event["path"]
        state.path_changes.append(event["reason"])
    elif kind == "status":
        state.status = event["status"]
    elif kind == "facts":
        state.facts.update(event["facts"])
    return state


def _advance(state: SessionState, number: int, status: PhaseStatus) -> None:
    """Move phase `number` to status; earlier phases in progress are done, untouched ones skipped."""
    for phase in state.phases[: number - 1]:
        if phase.status == "in_progress":
            phase.status = "done"
        elif phase.status == "pending":
            phase.status = "skipped"
    target = state.phase(number)
    if status == "in_progress" and target.status == "done":
        return
    target.status = status


class SessionStore:
    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def _dir(self, session_id: str) -> Path:
        if not isinstance(session_id, str) or not SESSION_ID.match(session_id):
            raise UsageError(
                f"session id {session_id!r} is malformed.",
                "use the session_id returned by start_session (like 20261129-161200-a1b2c3)",
            )
        path = self.workspace.root / ".rootcause" / "sessions" / session_id
        if not (path / "events.jsonl").is_file():
            raise UsageError(
                f"unknown session {session_id!r}: no such session under {self.workspace.root}/.rootcause/sessions.",
                "call start_session first, or list sessions with `rootcause session list`",
            )
        return path

    def create(self, symptom: str, result: Triage) -> SessionState:
        at, ts = _now()
        session_id = datetime.fromtimestamp(ts, UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        phases = [Phase(number=n, name=name) for n, name in PHASE_NAMES.items()]
        phases[0].status = "in_progress"
        state = SessionState(
            session_id=session_id, symptom=symptom, created_at=at, created_ts=ts, phases=phases,
            head=gitrepo.head_sha(self.workspace.root), diff_hash=gitrepo.diff_hash(self.workspace.root),
            start_files=gitrepo.file_fingerprints(self.workspace.root),
            **result.model_dump(),
        )
        folder = self.workspace.state_dir("sessions", session_id)
        self._write_event(folder, {"type": "created", "at": at, "state": state.model_dump(mode="json")}, state)
        return state

    def load(self, session_id: str) -> SessionState:
        return self._replay(self._dir(session_id))

    def list_ids(self) -> list[str]:
        base = self.workspace.root / ".rootcause" / "sessions"
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if SESSION_ID.match(p.name))

    def _replay(self, folder: Path) -> SessionState:
        state: SessionState | None = None
        with open(folder / "events.jsonl", encoding="utf-8") as fh:
            for line in fh:
                if not line.endswith("\n"):
                    break  # a write cut short by a crash: everything before it stands
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                state = _apply(state, event)
        if state is None:
            raise UsageError(f"session {folder.name!r} has an empty event log.", "start a new session")
        return state

    def append(self, session_id: str, event: dict[str, Any]) -> SessionState:
        """Append one event and return the new state."""
        folder = self._dir(session_id)
        with FileLock(str(folder / ".lock")):
            state = self._replay(folder)
            event.setdefault("at", _now()[0])
            state = _apply(state, json.loads(json.dumps(event)))
            self._write_event(folder, event, state)
        return state

    def _write_event(self, folder: Path, event: dict[str, Any], state: SessionState) -> None:
        line = (json.dumps(event, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        fd = os.open(folder / "events.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a write cut short by a crash: end that fragment, keep this event whole
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp = folder / f".snapshot.{os.getpid()}.tmp"
        tmp.write_text(state.model_dump_json(indent=1), encoding="utf-8")
        os.replace(tmp, folder / "snapshot.json")

    # -- conveniences used by every tool that records evidence

    def record(
        self, session_id: str, tool: str, summary: str, data: dict[str, Any] | None = None,
        phase: int | None = None, phase_status: PhaseStatus = "in_progress",
    ) -> SessionState:
        state = self.load(session_id)
        evidence = Evidence(seq=len(state.evidence) + 1, at=_now()[0], tool=tool, summary=summary,
                            phase=phase, data=data or {})
        state = self.append(session_id, {"type": "evidence", "evidence": evidence.model_dump(mode="json")})
        if phase is not None:
            state = self.append(session_id, {"type": "phase", "number": phase, "status": phase_status})
        return state

    def set_facts(self, session_id: str, **facts: Any) -> SessionState:
        return self.append(session_id, {"type": "facts", "facts": facts})

    def set_path(self, session_id: str, path: Literal["quick", "full"], reason: str) -> SessionState:
        return self.append(session_id, {"type": "path", "path": path, "reason": reason})

    def set_status(self, session_id: str, status: Literal["open", "stopped", "closed"]) -> SessionState:
        return self.append(session_id, {"type": "status", "status": status})


def require_open(store: SessionStore, session_id: str) -> SessionState:
    state = store.load(session_id)
    if state.status == "closed":
        raise UsageError(f"session {session_id!r} is closed.", "start a new session for new work")
    return state


# ---------------------------------------------------------------- report


def _protocol_sections(state: SessionState) -> list[str]:
    """Hypotheses in order with their results, then fix attempts: the spine of the investigation."""
    lines: list[str] = []
    hypotheses = [e for e in state.evidence if e.tool == "verify_hypothesis"]
    if hypotheses:
        lines += ["", "## Hypotheses", ""]
    for ev in hypotheses:
        d = ev.data
        gate = d.get("gate") or {}
        failed = [c.get("name") for c in gate.get("checks", []) if not c.get("passed")]
        review = "; needs review" if d.get("needs_review") else ""
        lines.append(
            f"{d.get('number', '?')}. **{str(d.get('result', '?')).upper()}** — {d.get('hypothesis', '')} "
            f"_(expect {d.get('expect')}; confidence {d.get('confidence')}; gate "
            f"{'passed' if gate.get('passed') else 'failed: ' + ', '.join(map(str, failed))}{review}; "
            f"evidence {ev.seq})_"
        )
        lines.append(f"   - {d.get('reason', '')}")
    fixes = [e for e in state.evidence if e.tool == "record_fix_attempt"]
    if fixes:
        lines += ["", "## Fix attempts", ""]
    for ev in fixes:
        d = ev.data
        verdict = "fixed" if d.get("fixed") else ("STOP" if d.get("stop") else "not fixed")
        lines.append(f"{d.get('attempt', '?')}. **{verdict}** — {d.get('description', '')} "
                     f"_(`{d.get('command', '')}`; consecutive failures {d.get('consecutive_failures')}; "
                     f"evidence {ev.seq})_")
        lines.append(f"   - {d.get('reason', '')}")
    return lines


def render_report(state: SessionState) -> str:
    lines = [
        f"# rootcause session {state.session_id}",
        "",
        f"- **Symptom:** {state.symptom}",
        f"- **Path:** {state.path} ({'; '.join(state.reasons)})",
        f"- **Category:** {state.category}",
        f"- **Keywords:** {', '.join(state.keywords) or '-'}",
        f"- **Checklists:** {', '.join(state.checklists) or '-'}",
        f"- **Started:** {state.created_at} at HEAD {state.head[:10] if state.head else '(no git)'}",
        f"- **Status:** {state.status}",
    ]
    for change in state.path_changes:
        lines.append(f"- **Path change:** {change}")
    lines += ["", "## Phases", ""]
    marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]", "skipped": "[-]"}
    for phase in state.phases:
        lines.append(f"- {marks[phase.status]} Phase {phase.number}: {phase.name} — {phase.status}")
    lines += _protocol_sections(state)
    lines += ["", "## Evidence", ""]
    if not state.evidence:
        lines.append("_No evidence recorded yet._")
    for ev in state.evidence:
        where = f" (Phase {ev.phase})" if ev.phase else ""
        lines += [f"### {ev.seq}. {ev.tool}{where} — {ev.at}", "", ev.summary.strip(), ""]
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- tools


class StartSessionInput(BaseModel):
    """Start a debugging session: triage the symptom into the Quick Path or the Full Protocol."""

    symptom: str = Field(description="The failure in the user's words or the key error line.")
    path_hint: Literal["quick", "full"] | None = Field(
        None, description="Ask for a path; 'quick' is overridden when the symptom requires the Full Protocol."
    )


class StartSessionResult(ToolResult):
    session_id: str
    path: Literal["quick", "full"]
    reasons: list[str]
    category: str
    keywords: list[str]
    checklists: list[str]
    phases: list[Phase]
    head: str | None = None
    next: str

    def summary(self) -> str:
        phases = ", ".join(f"{p.number} {p.name}: {p.status}" for p in self.phases)
        return (
            f"Session {self.session_id} — {self.path.upper()} path ({self.category}).\n"
            f"Why: {'; '.join(self.reasons)}\nKeywords: {', '.join(self.keywords)}\n"
            f"Checklists: {', '.join(self.checklists) or 'none'}\nPhases: {phases}\nNext: {self.next}"
        )


def start_session(inp: StartSessionInput, ctx: ToolContext) -> StartSessionResult:
    symptom = inp.symptom.strip()
    if not symptom:
        raise UsageError("symptom is empty.", "describe the failure, e.g. 'loss is NaN after step 1200 on 8 GPUs'")
    if len(symptom) > 20_000:
        raise UsageError(f"symptom is {len(symptom)} characters long.",
                         "give the key error lines (under 20,000 characters); pass whole logs to diagnose_log")
    result = triage(symptom, inp.path_hint)
    state = SessionStore(ctx.workspace).create(symptom, result)
    nxt = ("reproduce the failure (reproduce) or diagnose an existing log (diagnose_log), "
           "then check_constraints")
    return StartSessionResult(
        session_id=state.session_id, phases=state.phases, head=state.head, next=nxt, **result.model_dump()
    )


class SessionIdInput(BaseModel):
    session_id: str = Field(description="The id returned by start_session.")


class SessionReport(ToolResult):
    session_id: str
    status: str
    path: str
    phases: list[Phase]
    report: str

    def summary(self) -> str:
        return self.report


def session_report(inp: SessionIdInput, ctx: ToolContext) -> SessionReport:
    state = SessionStore(ctx.workspace).load(inp.session_id)
    return SessionReport(session_id=state.session_id, status=state.status, path=state.path,
                         phases=state.phases, report=render_report(state))


class CloseSessionInput(SessionIdInput):
    """Close a debugging session and return its final report; refused until Phase 5 is done.

    The report lists the symptom, the path, the phases, the hypotheses in order with their results,
    the fix attempts and every piece of evidence. Phase 5 (knowledge capture) must be done first:
    call capture_knowledge, with kind 'none' and the reason when there is nothing to capture.
    """


REPORT_LIMIT = 20_000


class CloseSessionResult(SessionReport):
    closed: bool = True
    report_path: str = Field(description="The full report, written beside the session's event log.")
    hypotheses: int = 0
    fix_attempts: int = 0
    fixed: bool = False


def close_session(inp: SessionIdInput, ctx: ToolContext) -> CloseSessionResult:
    store = SessionStore(ctx.workspace)
    state = store.load(inp.session_id)
    if state.phase(5).status != "done":
        raise UsageError(
            f"session {inp.session_id!r} cannot close: Phase 5 (knowledge capture) is {state.phase(5).status}.",
            "call capture_knowledge with kind constraint/architecture/regression_guard/docs, "
            "or kind 'none' with the reason there is nothing to capture",
        )
    if state.status != "closed":
        state = store.set_status(inp.session_id, "closed")
    report = render_report(state)
    path = ctx.workspace.state_dir("sessions", state.session_id) / "report.md"
    path.write_text(report, encoding="utf-8")
    if len(report) > REPORT_LIMIT:
        marker = f"\n… [truncated: the whole report is {ctx.workspace.relative(path)}] …\n"
        report = bounded(report, REPORT_LIMIT, marker)
    tools_used = [e.tool for e in state.evidence]
    return CloseSessionResult(session_id=state.session_id, status=state.status, path=state.path,
                              phases=state.phases, report=report, report_path=ctx.workspace.relative(path),
                              hypotheses=tools_used.count("verify_hypothesis"),
                              fix_attempts=tools_used.count("record_fix_attempt"),
                              fixed=bool(state.facts.get("fixed")))
