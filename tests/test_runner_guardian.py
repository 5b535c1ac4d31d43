"""The guardian (tools/runner/guardian.py): when its pipe closes, every registered run dies, strays included."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from rootcause.tools.run import RUN_MARKER
from rootcause.tools.run import guardian as guardian_module

GUARDIAN = Path(guardian_module.__file__)

# A run hostile to clean-up: ignores SIGTERM and leaves a grandchild in a session of its own.
TREE = '''\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
print("started", flush=True)
time.sleep(600)
'''


def _marked(run_id: str) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_MARKER) == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _wait(predicate, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _start_run(run_id: str) -> subprocess.Popen[str]:
    run = subprocess.Popen([sys.executable, "-c", TREE], env={**os.environ, RUN_MARKER: run_id},
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert run.stdout is not None and run.stdout.readline().strip() == "started"
    assert _wait(lambda: len(_marked(run_id)) == 2, 10), _marked(run_id)
    return run


def _guardian_of(run_id: str, run: subprocess.Popen[str], lines: str) -> subprocess.Popen[bytes]:
    """A guardian told `lines` about the run; its pipe stays open until the test closes it."""
    guardian = subprocess.Popen([sys.executable, "-I", str(GUARDIAN), RUN_MARKER], stdin=subprocess.PIPE,
                                start_new_session=True)
    assert guardian.stdin is not None
    guardian.stdin.write(lines.format(run_id=run_id, pgid=run.pid).encode())
    guardian.stdin.flush()
    return guardian


def _cleanup(run_id: str, run: subprocess.Popen[str], guardian: subprocess.Popen[bytes]) -> None:
    for pid in _marked(run_id):
        psutil.Process(pid).kill()
    run.wait(5)
    if guardian.poll() is None:
        guardian.kill()


def test_closing_the_pipe_kills_every_registered_run_and_its_strays() -> None:
    run_id = f"guardian-test-{os.getpid()}-{time.time_ns()}"
    run = _start_run(run_id)
    guardian = _guardian_of(run_id, run, "+ {run_id} {pgid}\n")
    try:
        time.sleep(0.3)
        assert len(_marked(run_id)) == 2, "the guardian must not act while its server lives"
        assert guardian.stdin is not None
        guardian.stdin.close()  # what the server's death does to the pipe
        assert guardian.wait(15) == 0
        run.wait(5)
        assert _wait(lambda: not _marked(run_id), 5), _marked(run_id)
    finally:
        _cleanup(run_id, run, guardian)


def test_a_released_run_is_left_alone() -> None:
    run_id = f"guardian-release-{os.getpid()}-{time.time_ns()}"
    run = _start_run(run_id)
    guardian = _guardian_of(run_id, run, "+ {run_id} {pgid}\n- {run_id}\n")
    try:
        assert guardian.stdin is not None
        guardian.stdin.close()
        assert guardian.wait(15) == 0
        assert len(_marked(run_id)) == 2, "a run the server tore down itself is not the guardian's to kill"
    finally:
        _cleanup(run_id, run, guardian)


def _guardians() -> list[psutil.Process]:
    """Guardians among this test's descendants (the stdio server's children)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if any(part.endswith("guardian.py") for part in proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.anyio
async def test_the_guardian_goes_with_the_last_run(repo: Path) -> None:
    """While a run is in flight its guardian is up; within a second of the call's return it is gone (it stayed
    until the server exited, ~20 s after a Slurm hang); the next run gets a guardian again."""
    import anyio

    from tests.conftest import stdio_client, structured

    async with stdio_client(repo) as client:
        for _round in range(2):
            seen: list[int] = []
            async with anyio.create_task_group() as group:
                done = anyio.Event()

                async def call(done: anyio.Event) -> None:
                    structured(await client.call_tool("reproduce", {
                        "command": "python -c 'import time; time.sleep(1.5)'", "runs": 1}))
                    done.set()

                group.start_soon(call, done)
                while not done.is_set():
                    seen += [p.pid for p in _guardians()]
                    await anyio.sleep(0.05)
            returned = time.monotonic()
            assert seen, "no guardian while the run was in flight"
            while _guardians() and time.monotonic() - returned < 1.0:
                await anyio.sleep(0.05)
            assert not _guardians(), [p.cmdline() for p in _guardians()]
