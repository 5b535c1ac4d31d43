"""Finding and killing a run's processes: its tree, its group, and descendants that left both.

A run's children carry the marker variable ROOTCAUSE_RUN_ID, so a descendant that started its own
session is still found. Runs in flight are killed at interpreter exit and on SIGTERM/SIGHUP, and
by the guardian process (guardian.py) when the server dies without running any handler (SIGKILL).
The guardian lives as long as some run does: the first run starts it, and when the last run in flight
is torn down its pipe is closed, so it exits with nothing to kill (and is reaped).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

KILL_GRACE_S = 3.0
RUN_MARKER = "ROOTCAUSE_RUN_ID"


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
        for proc in marked_processes(run_id, since):
            found.setdefault(proc.pid, proc)
    return list(found.values())


def marked_processes(run_id: str, since: float | None) -> list[psutil.Process]:
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


async def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Poll until the processes are gone (or zombies); returns those still alive. Never reaps:
    psutil.wait_procs would waitpid() our direct child and steal its exit status from asyncio."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if is_alive(p)]
    while alive and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        alive = [p for p in alive if is_alive(p)]
    return alive


def signal_all(procs: list[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            pass


async def kill_tree(procs: list[psutil.Process], pgid: int | None) -> None:
    """SIGTERM (and SIGCONT, for stopped ones) the group and every process, grace period, then SIGKILL."""
    if pgid is not None:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    signal_all(procs, signal.SIGTERM)
    signal_all(procs, signal.SIGCONT)
    alive = await wait_gone(procs, KILL_GRACE_S)
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    signal_all(alive, signal.SIGKILL)
    if alive:
        await wait_gone(alive, 2.0)


# Process groups of runs in flight: killed at interpreter exit should a run outlive its call
# (a server stopped by its client between two awaits).
ACTIVE_RUNS: dict[str, int] = {}
_GUARDIAN: subprocess.Popen[bytes] | None = None
_GUARDIAN_LOCK = threading.Lock()
GUARDIAN_LINGER_S = 0.3
"""How long the guardian outlives the last run in flight (issue 24: gone within a second of the call)."""


def _guardian_line(line: str) -> None:
    """Tell the guardian; (re)start it when it is not running, re-registering every run in flight."""
    global _GUARDIAN
    with _GUARDIAN_LOCK:
        for _attempt in range(2):
            if _GUARDIAN is None or _GUARDIAN.poll() is not None:
                try:
                    _GUARDIAN = subprocess.Popen(
                        [sys.executable, "-I", str(Path(__file__).with_name("guardian.py")), RUN_MARKER],
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                except OSError:
                    _GUARDIAN = None
                    return  # atexit and the signal handlers still cover every death but SIGKILL
                line = "".join(f"+ {rid} {pgid}\n" for rid, pgid in ACTIVE_RUNS.items()) + line
            try:
                assert _GUARDIAN.stdin is not None
                _GUARDIAN.stdin.write(line.encode("ascii"))
                _GUARDIAN.stdin.flush()
                return
            except (BrokenPipeError, OSError, ValueError):
                _GUARDIAN = None


def track(run_id: str, pgid: int) -> None:
    """A run started: kill its group at exit, on SIGTERM/SIGHUP, and (through the guardian) on SIGKILL."""
    ACTIVE_RUNS[run_id] = pgid
    _guardian_line(f"+ {run_id} {pgid}\n")


def untrack(run_id: str) -> None:
    if ACTIVE_RUNS.pop(run_id, None) is not None:
        _guardian_line(f"- {run_id}\n")
        if not ACTIVE_RUNS:
            # Not at once: the runs of one call follow each other within milliseconds (reproduce runs=10, a
            # bisect's steps), and a fresh guardian per run cost ~10 ms of CPU beside each child.
            timer = threading.Timer(GUARDIAN_LINGER_S, _release_guardian)
            timer.daemon = True
            timer.start()


def _release_guardian() -> None:
    """No run left: end of file on the guardian's pipe makes it exit (nothing registered, nothing killed).

    Under the lock, so a run starting meanwhile either is registered with this guardian before the check (and
    keeps it) or starts a fresh one after it; a run that started and ended since leaves its own timer.
    """
    global _GUARDIAN
    with _GUARDIAN_LOCK:
        if ACTIVE_RUNS or _GUARDIAN is None:
            return
        guardian, _GUARDIAN = _GUARDIAN, None
        try:
            assert guardian.stdin is not None
            guardian.stdin.close()
        except (OSError, ValueError):
            pass
    threading.Thread(target=_reap, args=(guardian,), name="rootcause-guardian-reaper", daemon=True).start()


def _reap(guardian: subprocess.Popen[bytes]) -> None:
    try:
        guardian.wait(timeout=30)
    except subprocess.TimeoutExpired:  # it only reads its pipe: past end of file it has no reason to stay
        guardian.kill()
        guardian.wait()


def kill_active() -> None:
    for run_id, pgid in list(ACTIVE_RUNS.items()):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in marked_processes(run_id, None):
            try:
                proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


atexit.register(kill_active)
_TERM_HANDLER_INSTALLED = False


def install_term_handler() -> None:
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
            kill_active()
            signal.signal(received, signal.SIG_DFL)
            os.kill(os.getpid(), received)

        signal.signal(signum, handler)


def is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


async def teardown(proc: asyncio.subprocess.Process, run_id: str, started_wall: float) -> None:
    """Kill whatever is left of the run (the tree, the group, marked strays), then reap the child."""
    for _attempt in range(3):
        leftovers = [p for p in process_tree(proc.pid, run_id, started_wall) if is_alive(p)]
        if not leftovers and proc.returncode is not None:
            break
        await kill_tree(leftovers, proc.pid)
        if proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), timeout=5)
            except TimeoutError:
                pass
    untrack(run_id)
