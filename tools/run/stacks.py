"""Python stacks of a hung process tree: py-spy where ptrace is allowed, else SIGABRT into faulthandler."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel
from rootcause.tools.run.reaper import signal_all, wait_gone


class ProcessStack(BaseModel):
    pid: int
    cmdline: str
    rank: int | None = None
    method: Literal["py-spy", "faulthandler", "none"]
    text: str
    node: str | None = None
    """The Slurm node the process ran on (runs through tools/runner/slurm.py); None for a local run."""


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
    await wait_gone([proc], 2.0)
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
    signal_all(procs, signal.SIGSTOP)
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
