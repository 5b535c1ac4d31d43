"""Resource readers: sessions as Markdown reports and run logs, bounded."""

from __future__ import annotations

import json

from rootcause.tools.core import redact
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.record.report import render_report
from rootcause.tools.record.store import SessionState, SessionStore
from rootcause.tools.run import run_dir

LOG_RESOURCE_LIMIT = 1_000_000
SESSIONS_LISTED = 50


def recent_sessions(workspace: Workspace, limit: int = SESSIONS_LISTED) -> list[SessionState]:
    """The newest sessions first; unreadable ones are left out.

    Ids start with their UTC start second, so only the newest `limit` ids (and any sharing the last
    one's second) are read; within a second the recorded start time orders them.
    """
    store = SessionStore(workspace)
    ids = sorted(store.list_ids(), reverse=True)
    if len(ids) > limit:
        boundary = ids[limit - 1][:15]  # YYYYmmdd-HHMMSS
        ids = [i for n, i in enumerate(ids) if n < limit or i.startswith(boundary)]
    states = []
    for session_id in ids:
        try:
            states.append(store.load(session_id))
        except (OSError, ValueError, UsageError):
            continue
    states.sort(key=lambda state: state.created_ts, reverse=True)
    return states[:limit]


def read_session(workspace: Workspace, session_id: str) -> str:
    return render_report(SessionStore(workspace).load(session_id))


def read_run_log(workspace: Workspace, run_id: str) -> str:
    """The run's log (head and tail past 1 MB) with secrets redacted, including the run's own env values."""
    folder = run_dir(workspace, run_id)
    path = folder / "log.txt"
    try:
        run_env = json.loads((folder / "meta.json").read_text(encoding="utf-8")).get("env_overrides") or {}
    except (OSError, ValueError, AttributeError):
        run_env = {}
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= LOG_RESOURCE_LIMIT:
            return redact.redact_text(fh.read().decode("utf-8", "replace"), {"env": run_env})
        half = LOG_RESOURCE_LIMIT // 2
        head = fh.read(half).decode("utf-8", "replace")
        fh.seek(size - half)
        tail = fh.read().decode("utf-8", "replace")
    omitted = size - 2 * half
    text = f"{head}\n… [{omitted} bytes omitted; the whole log is {workspace.relative(path)}] …\n{tail}"
    return redact.redact_text(text, {"env": run_env})


__all__ = ["UsageError", "read_run_log", "read_session", "recent_sessions"]
