"""The session store: an append-only event log per session, phases, and the replayed state.

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
from rootcause.tools.core import gitrepo
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace

PHASE_NAMES: dict[int, str] = {
    1: "Investigate",
    2: "Pattern analysis",
    3: "Hypothesis and test",
    4: "Fix",
    5: "Knowledge capture",
}
PhaseStatus = Literal["pending", "in_progress", "done", "skipped"]
class Triage(BaseModel):
    path: Literal["quick", "full"]
    reasons: list[str]
    category: str
    category_basis: Literal["error_rules", "prose", "none"] = Field(
        "error_rules", description="What the category rests on; 'none': the symptom names no failure class.")
    negated: list[str] = Field(default_factory=list, description="What the symptom says did not happen.")
    keywords: list[str]
    checklists: list[str]


SESSION_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


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


class SessionState(Triage):
    """The replayed session: its triage (path, reasons, category, keywords, checklists) plus what followed."""

    session_id: str
    symptom: str
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

