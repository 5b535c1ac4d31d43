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
import atexit
import json
import os
import secrets
import shlex
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import anyio
import psutil
from pydantic import BaseModel, Field

from tools.context import AMBIENT_PROGRESS, ProgressSink, _no_progress
from tools.errors import UsageError
from tools.workspace import Workspace

Outcome = Literal["pass", "fail", "hang", "crash"]
HEAD_BYTES = 6_000
TAIL_BYTES = 14_000
KILL_GRACE_S = 3.0
PROGRESS_EVERY_S = 5.0
RUN_MARKER = "ROOTCAUSE_RUN_ID"
_ENV_NAME_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class RunSpec(BaseModel):
    argv: list[str]
    cwd: Path
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = 900.0
    idle_timeout_s: float | None = None
    label: str = "run"


class ProcessStack(BaseModel):
    pid: int
    cmdline: str
    rank: int | None = None
    method: Literal["py-spy", "faulthandler", "none"]
    text: str


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

    @property
    def output(self) -> str:
        """Head and tail of the log (the whole log when it is small)."""
        if self.log_bytes <= HEAD_BYTES + TAIL_BYTES:
            return self.head
        return f"{self.head}\n… [{self.log_bytes - HEAD_BYTES - TAIL_BYTES} bytes omitted] …\n{self.tail}"


def parse_command(command: str | list[str], shell: bool = False) -> tuple[list[str], dict[str, str]]:
    """argv and env from a command: a string is split like a shell would, leading NAME=value go to env."""
    if isinstance(command, list):
        words = [str(w) for w in command]
        if shell:
            words = ["/bin/sh", "-c", shlex.join(words)]
            return words, {}
    else:
        if not command.strip():
            raise UsageError("command is empty.", "give the command that reproduces the failure, e.g. 'pytest -x'")
        if "\x00" in command:
            raise UsageError("command contains a NUL byte.", "remove it")
        if shell:
            return ["/bin/sh", "-c", command], {}
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise UsageError(f"command cannot be split into words: {exc}.", "balance the quotes") from None
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("="):
        name, _, value = words[0].partition("=")
        if not valid_env_name(name):
            break
        env[name] = value
        words = words[1:]
    if not words or not words[0].strip():
        raise UsageError("command is empty.", "give the command that reproduces the failure, e.g. 'pytest -x tests/'")
    return words, env


def valid_env_name(name: str) -> bool:
    return bool(name) and set(name) <= _ENV_NAME_CHARS and not name[0].isdigit()


class PreparedCommand(BaseModel):
    """A validated command as the tools take it: argv, env (caller's then the command's NAME=value), cwd."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    cwd_rel: str


def prepare_command(
    command: str | list[str], shell: bool, env: dict[str, str], cwd: str, workspace: Workspace
) -> PreparedCommand:
    """The one place a tool's command arguments are checked and turned into argv/env/cwd."""
    argv, command_env = parse_command(command, shell)
    for name in env:
        if not valid_env_name(name):
            raise UsageError(f"env name {name!r} is not a valid variable name.", "use NAME=value with NAME like FOO_1")
    folder = workspace.resolve(cwd, must_exist=True, what="cwd")
    if not folder.is_dir():
        raise UsageError(f"cwd {cwd!r} is not a directory.", "give a folder inside the root")
    return PreparedCommand(argv=argv, env={**env, **command_env}, cwd=folder,
                           cwd_rel=os.path.relpath(folder, workspace.root))


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def run_dir(workspace: Workspace, run_id: str) -> Path:
    if not run_id or "/" in run_id or run_id.startswith(".") or len(run_id) > 64:
        raise UsageError(f"run id {run_id!r} is malformed.", "use a run_id from a reproduce result")
    path = workspace.root / ".rootcause" / "runs" / run_id
    if not (path / "log.txt").is_file():
        raise UsageError(f"unknown run {run_id!r}.", "use a run_id from a reproduce result")
    return path


def _resolve_program(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    from shutil import which

    program = argv[0]
    if os.sep in program:
        path = Path(program) if Path(program).is_absolute() else cwd / program
        if not path.exists():
            raise UsageError(f"command not found: {program} (no such file under {cwd}).", "check the path")
        return str(path)
    found = which(program, path=env.get("PATH"))
    if not found:
        raise UsageError(f"command not found: {program}.",
                         "install it, give its full path, or pass python= for the project's interpreter")
    return found


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


def process_tree(pid: int, run_id: str | None = None, since: float | None = None) -> list[psutil.Process]:
    """The process and every descendant, plus (by the run marker) any that were re-parented away."""
    found: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(pid)
        found[root.pid] = root
        for child in root.children(recursive=True):
            found[child.pid] = child
    except psutil.NoSuchProcess:
        pass
    if run_id is not None:
        for proc in _marked_processes(run_id, since):
            found.setdefault(proc.pid, proc)
    return list(found.values())


def _marked_processes(run_id: str, since: float | None) -> list[psutil.Process]:
    marked = []
    own = os.getpid()
    for proc in psutil.process_iter(["create_time"]):
        if proc.pid == own or (since is not None and (proc.info["create_time"] or 0) < since - 1):
            continue
        try:
            if proc.environ().get(RUN_MARKER) == run_id:
                marked.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return marked


def _py_spy() -> str | None:
    from shutil import which

    candidate = Path(sys.executable).parent / "py-spy"
    if candidate.is_file():
        return str(candidate)
    return which("py-spy")


# py-spy needs ptrace rights that containers often withhold; after one failure on this host
# the faulthandler fallback is used directly instead of paying py-spy's start-up per process.
_PY_SPY_WORKS: bool | None = None


def _is_python(proc: psutil.Process) -> bool:
    try:
        name = proc.name().lower()
        exe = os.path.basename(proc.exe()).lower() if proc.exe() else ""
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return False
    return "python" in name or "python" in exe or name in {"pytest", "torchrun"}


def _rank_of(proc: psutil.Process) -> int | None:
    try:
        value = proc.environ().get("RANK")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None
    return int(value) if value and value.isdigit() else None


async def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Poll until the processes are gone (or zombies); returns those still alive. Never reaps:
    psutil.wait_procs would waitpid() our direct child and steal its exit status from asyncio."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive


def _signal_all(procs: list[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            pass


async def _py_spy_dump(py_spy: str, pid: int) -> str | None:
    try:
        child = await asyncio.create_subprocess_exec(
            py_spy, "dump", "--nonblocking", "--pid", str(pid), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
        )
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(child.communicate(), timeout=15)
    except TimeoutError:
        child.kill()
        await child.wait()
        return None
    return out.decode("utf-8", "replace") if child.returncode == 0 and out.strip() else None


async def _faulthandler_dump(proc: psutil.Process, log_path: Path) -> str:
    """SIGABRT one (stopped) process and continue it: PYTHONFAULTHANDLER writes its stacks to the log."""
    before = log_path.stat().st_size if log_path.exists() else 0
    try:
        proc.send_signal(signal.SIGABRT)
        proc.send_signal(signal.SIGCONT)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""
    await _wait_gone([proc], 2.0)
    await asyncio.sleep(0.05)
    with open(log_path, "rb") as fh:
        fh.seek(before)
        dumped = fh.read(64_000).decode("utf-8", "replace")
    return dumped if ("File \"" in dumped or "most recent call first" in dumped) else ""


async def capture_stacks(procs: list[psutil.Process], log_path: Path) -> list[ProcessStack]:
    """Python stacks of every Python process in a tree, one attributable dump per process.

    The whole tree is frozen (SIGSTOP) first, so no process reacts to a peer being dumped
    (a rank whose peer dies would leave its collective and lose the very frame we want).
    Each process is then dumped with py-spy, or else sent SIGABRT and continued alone, so
    the faulthandler text that lands in the log between two offsets is that process's stacks.
    Dumped processes die; the rest stay stopped until kill_tree terminates them.
    """
    global _PY_SPY_WORKS
    _signal_all(procs, signal.SIGSTOP)
    pythons = [p for p in procs if _is_python(p)]
    py_spy = _py_spy() if _PY_SPY_WORKS is not False else None
    stacks: list[ProcessStack] = []
    for proc in pythons:
        try:
            cmdline = " ".join(proc.cmdline())[:300]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        stack = ProcessStack(pid=proc.pid, cmdline=cmdline, rank=_rank_of(proc), method="none", text="")
        if py_spy:
            text = await _py_spy_dump(py_spy, proc.pid)
            _PY_SPY_WORKS = text is not None
            if text:
                stack.method, stack.text = "py-spy", text[:8000]
            else:
                py_spy = None
        stacks.append(stack)
    for stack in stacks:
        if stack.method == "none" and log_path.exists():
            proc = next(p for p in pythons if p.pid == stack.pid)
            text = await _faulthandler_dump(proc, log_path)
            if text:
                stack.method, stack.text = "faulthandler", text[:8000]
    return stacks


async def kill_tree(procs: list[psutil.Process], pgid: int | None) -> None:
    """SIGTERM (and SIGCONT, for stopped ones) the group and every process, grace period, then SIGKILL."""
    if pgid is not None:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    _signal_all(procs, signal.SIGTERM)
    _signal_all(procs, signal.SIGCONT)
    alive = await _wait_gone(procs, KILL_GRACE_S)
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _signal_all(alive, signal.SIGKILL)
    if alive:
        await _wait_gone(alive, 2.0)


# Process groups of runs in flight: killed at interpreter exit should a run outlive its call
# (a server stopped by its client between two awaits).
_ACTIVE: dict[str, int] = {}


def _kill_active() -> None:
    for run_id, pgid in list(_ACTIVE.items()):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in _marked_processes(run_id, None):
            try:
                proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


atexit.register(_kill_active)
_TERM_HANDLER_INSTALLED = False


def _install_term_handler() -> None:
    """On SIGTERM/SIGHUP (a client stopping the server), kill the runs in flight, then die as before.

    Python's default SIGTERM action skips atexit, and a run's own session would outlive us.
    """
    global _TERM_HANDLER_INSTALLED
    if _TERM_HANDLER_INSTALLED:
        return
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    _TERM_HANDLER_INSTALLED = True
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)
        if previous not in (signal.SIG_DFL, None):
            continue  # someone (uvicorn, pytest) handles it already

        def handler(received: int, _frame: object) -> None:
            _kill_active()
            signal.signal(received, signal.SIG_DFL)
            os.kill(os.getpid(), received)

        signal.signal(signum, handler)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


async def _teardown(proc: asyncio.subprocess.Process, run_id: str, started_wall: float) -> None:
    """Kill whatever is left of the run (the tree, the group, marked strays), then reap the child."""
    for _attempt in range(3):
        leftovers = [p for p in process_tree(proc.pid, run_id, started_wall) if _alive(p)]
        if not leftovers and proc.returncode is not None:
            break
        await kill_tree(leftovers, proc.pid)
        if proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), timeout=5)
            except TimeoutError:
                pass
    _ACTIVE.pop(run_id, None)


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
    _install_term_handler()
    env = {**os.environ, **spec.env, "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1", RUN_MARKER: run_id}
    program = _resolve_program(spec.argv, env, spec.cwd)
    folder = workspace.state_dir("runs", run_id)
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
        _ACTIVE[run_id] = proc.pid
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
                await asyncio.shield(_teardown(proc, run_id, started_wall))
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
        head=head, tail=tail, stacks=stacks, env_overrides=spec.env,
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
