"""Resource readers: sessions as Markdown reports and run logs, bounded."""

from __future__ import annotations

from tools.errors import UsageError
from tools.runner import run_dir
from tools.sessions import SessionStore, render_report
from tools.workspace import Workspace

LOG_RESOURCE_LIMIT = 1_000_000


def read_session(workspace: Workspace, session_id: str) -> str:
    return render_report(SessionStore(workspace).load(session_id))


def read_run_log(workspace: Workspace, run_id: str) -> str:
    path = run_dir(workspace, run_id) / "log.txt"
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= LOG_RESOURCE_LIMIT:
            return fh.read().decode("utf-8", "replace")
        half = LOG_RESOURCE_LIMIT // 2
        head = fh.read(half).decode("utf-8", "replace")
        fh.seek(size - half)
        tail = fh.read().decode("utf-8", "replace")
    omitted = size - 2 * half
    return f"{head}\n… [{omitted} bytes omitted; the whole log is {workspace.relative(path)}] …\n{tail}"


__all__ = ["UsageError", "read_run_log", "read_session"]
