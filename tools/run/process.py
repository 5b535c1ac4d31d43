"""The one process runner: every tool that runs a command runs it through `run_process`.

The child writes stdout and stderr straight into `.rootcause/runs/<run_id>/log.txt` (one
file, so interleaved rank output keeps its order) and the server never holds the output
in memory: the head and tail are read back from the file. The child has its own session
(process group), stdin closed, PYTHONFAULTHANDLER and PYTHONUNBUFFERED set, and a marker
variable ROOTCAUSE_RUN_ID that finds descendants which left the group. On a wall-clock or
idle timeout the Python stacks of the whole tree are captured first (py-spy, else
SIGABRT into faulthandler), then the tree is terminated: SIGTERM, grace, SIGKILL. The
same teardown runs in a `finally`, so a cancelled call leaves no process behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Literal

import anyio
from pydantic import BaseModel, Field
from rootcause.tools.core.context import AMBIENT_PROGRESS, ProgressSink, _no_progress
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run.command import new_run_id, resolve_program
from rootcause.tools.run.flight_recorder import count_dumps, dump_on_hang, recorder_env
from rootcause.tools.run.reaper import RUN_MARKER, install_term_handler, process_tree, teardown, track
from rootcause.tools.run.stacks import ProcessStack, capture_stacks

Outcome = Literal["pass", "fail", "hang", "crash"]
HEAD_BYTES = 6_000
TAIL_BYTES = 14_000
PROGRESS_EVERY_S = 5.0


class RunSpec(BaseModel):
    argv: list[str]
    cwd: Path
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = 900.0
    idle_timeout_s: float | None = None
    label: str = "run"


class RunRecord(BaseModel):
    run_id: str
    argv: list[str]
    cwd: str
    outcome: Outcome
    exit_code: int | None
    signal: int | None
    duration_s: float
    timed_out: Literal["wall", "idle"] | None = None
    timeout_at_byte: int | None = None
    """Log size when the timeout fired: later output (stack dumps, SIGTERM tracebacks) is rootcause's doing."""
    log_path: str
    log_bytes: int
    head: str
    tail: str
    stacks: list[ProcessStack] = Field(default_factory=list)
    env_overrides: dict[str, str] = Field(default_factory=dict)
    collective_dumps: int = 0
    """Flight-recorder dumps in the run's flight_recorder/ folder (one per rank that had a process group)."""

    @property
    def output(self) -> str:
        """Head and tail of the log (the whole log when it is small)."""
        if self.log_bytes <= HEAD_BYTES + TAIL_BYTES:
            return self.head
        return f"{self.head}\n… [{self.log_bytes - HEAD_BYTES - TAIL_BYTES} bytes omitted] …\n{self.tail}"


def _read_head_tail(path: Path) -> tuple[str, str, int]:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
        tail = b""
        if size > HEAD_BYTES:
            fh.seek(max(HEAD_BYTES, size - TAIL_BYTES))
            tail = fh.read()
    return head.decode("utf-8", "replace"), tail.decode("utf-8", "replace"), size


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 2048))
            lines = fh.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1][:200] if lines else ""
    except OSError:
        return ""


async def run_process(
    spec: RunSpec, workspace: Workspace, progress: ProgressSink | None = None, run_id: str | None = None
) -> RunRecord:
    """Run one command to completion or timeout; the record points at the full log on disk."""
    progress = progress or AMBIENT_PROGRESS.get() or _no_progress
    if spec.timeout_s <= 0:
        raise UsageError(f"timeout_s must be > 0, got {spec.timeout_s}.", "give seconds, e.g. timeout_s=900")
    if spec.idle_timeout_s is not None and spec.idle_timeout_s <= 0:
        raise UsageError(f"idle_timeout_s must be > 0, got {spec.idle_timeout_s}.", "omit it or give seconds")
    for where, words in (("command", spec.argv), ("env", [*spec.env, *spec.env.values()])):
        if any("\x00" in word for word in words):
            raise UsageError(f"{where} contains a NUL byte.", "remove it: no program can receive one")
    run_id = run_id or new_run_id()
    install_term_handler()
    env = {**os.environ, **spec.env, "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1", RUN_MARKER: run_id}
    program = resolve_program(spec.argv, env, spec.cwd)
    folder = workspace.state_dir("runs", run_id)
    env.update(recorder_env(env, folder))
    log_path = folder / "log.txt"
    (folder / "meta.json").write_text(json.dumps(
        {"run_id": run_id, "argv": spec.argv, "cwd": str(spec.cwd), "label": spec.label,
         "env_overrides": spec.env, "started": time.time()}), encoding="utf-8")
    started = time.monotonic()
    started_wall = time.time()
    timed_out: Literal["wall", "idle"] | None = None
    timeout_at_byte: int | None = None
    stacks: list[ProcessStack] = []
    with open(log_path, "ab", buffering=0) as log:
        try:
            proc = await asyncio.create_subprocess_exec(
                program, *spec.argv[1:], stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                cwd=str(spec.cwd), env=env, start_new_session=True,
            )
        except (PermissionError, OSError) as exc:
            raise UsageError(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}.", "check the command") from None
        track(run_id, proc.pid)
        try:
            last_size, last_growth, last_progress = 0, started, started
            while True:
                now = time.monotonic()
                wait_for = min(1.0, max(0.05, spec.timeout_s - (now - started)))
                try:
                    await asyncio.wait_for(proc.wait(), timeout=wait_for)
                    break
                except TimeoutError:
                    pass
                now = time.monotonic()
                size = log_path.stat().st_size
                if size != last_size:
                    last_size, last_growth = size, now
                if now - started >= spec.timeout_s:
                    timed_out = "wall"
                elif spec.idle_timeout_s is not None and now - last_growth >= spec.idle_timeout_s:
                    timed_out = "idle"
                if timed_out:
                    timeout_at_byte = size
                    note = f"{spec.label}: {timed_out} timeout after {now - started:.0f}s, capturing stacks"
                    await progress(now - started, spec.timeout_s, note)
                    await dump_on_hang(folder)
                    stacks = await capture_stacks(process_tree(proc.pid, run_id, started_wall), log_path)
                    break
                if now - last_progress >= PROGRESS_EVERY_S:
                    last_progress = now
                    await progress(now - started, spec.timeout_s,
                                   f"{spec.label}: {now - started:.0f}s, last line: {_last_line(log_path)}")
        finally:
            # Runs on success, timeout, error and cancellation alike: nothing outlives the call.
            # The shielded scope keeps anyio's cancellation (a client's cancel, server shutdown)
            # from interrupting the teardown half-way; asyncio.shield does the same for a bare task.cancel().
            with anyio.CancelScope(shield=True):
                await asyncio.shield(teardown(proc, run_id, started_wall))
    duration = time.monotonic() - started
    code = proc.returncode
    sig = -code if code is not None and code < 0 else None
    if sig is None and code is not None and code > 128 and spec.argv[:2] == ["/bin/sh", "-c"]:
        sig = code - 128
    if timed_out:
        outcome: Outcome = "hang"
    elif code == 0:
        outcome = "pass"
    elif sig is not None:
        outcome = "crash"
    else:
        outcome = "fail"
    head, tail, size = _read_head_tail(log_path)
    if stacks:
        (folder / "stacks.txt").write_text(
            "\n\n".join(f"== pid {s.pid} ({s.method}) {s.cmdline}\n{s.text}" for s in stacks), encoding="utf-8")
    record = RunRecord(
        run_id=run_id, argv=spec.argv, cwd=str(spec.cwd), outcome=outcome, exit_code=code, signal=sig,
        duration_s=round(duration, 3), timed_out=timed_out, timeout_at_byte=timeout_at_byte,
        log_path=workspace.relative(log_path), log_bytes=size,
        head=head, tail=tail, stacks=stacks, env_overrides=spec.env, collective_dumps=count_dumps(folder),
    )
    (folder / "record.json").write_text(record.model_dump_json(exclude={"head", "tail"}), encoding="utf-8")
    return record


def read_output(record: RunRecord, workspace: Workspace, limit: int = 5_000_000) -> str:
    """The whole log of a run (up to limit bytes): for tools that parse a command's output."""
    with open(workspace.root / record.log_path, "rb") as fh:
        return fh.read(limit).decode("utf-8", "replace")


async def run_captured(
    argv: list[str], workspace: Workspace, *, cwd: Path | None = None, env: dict[str, str] | None = None,
    timeout_s: float = 300.0, label: str = "helper", progress: ProgressSink | None = None,
) -> tuple[RunRecord, str]:
    """Run an internal helper command (uv, git, py-spy...) through the same runner; return record and output."""
    record = await run_process(
        RunSpec(argv=argv, cwd=cwd or workspace.root, env=env or {}, timeout_s=timeout_s, label=label),
        workspace, progress,
    )
    return record, read_output(record, workspace)
