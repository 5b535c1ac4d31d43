"""Faults through the real stdio server: nothing a run started survives, session logs stay readable.

The command under test is hostile to clean-up: it ignores SIGTERM, starts a grandchild in its own
session (start_new_session) that also ignores SIGTERM, and a double-forked daemon (setsid) that does
the same. Each fault is then applied: a client that dies mid-run (its pipes close), a server stopped
with SIGTERM mid-run, a server killed with SIGKILL mid-run (the guardian's case), the run's own
wall-clock timeout. Afterwards the whole process table is
scanned for the test's unique marker (in command lines and environments).
(tests/e2e/test_reproduce.py covers a plain client cancellation and SIGTERM with a cooperative child.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tests.conftest import git, rootcause_executable, stdio_client, structured

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HOSTILE = '''\
import os, signal, subprocess, sys, time

token = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
subprocess.Popen([sys.executable, "-c", stubborn, token + "-session"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", stubborn, token + "-daemon"])
    os._exit(0)
print("all started", flush=True)
time.sleep(600)
'''

CLIENT = '''\
import sys
import anyio
from mcp import Client, StdioServerParameters

async def main():
    exe, root, token = sys.argv[1:4]
    params = StdioServerParameters(command=exe, args=["serve", "--root", root], cwd=root)
    async with Client(params) as client:
        sid = (await client.call_tool("start_session", {"symptom": "hang in hostile.py"})).structured_content
        print(sid["session_id"], flush=True)
        await client.call_tool("reproduce", {"command": ["python", "hostile.py", token], "runs": 1,
                                             "timeout_s": 300, "env": {"RC_FAULT_TOKEN": token},
                                             "session_id": sid["session_id"]})

anyio.run(main)
'''


def _marked(token: str) -> list[str]:
    """Every live process of the machine whose command line or environment carries the token."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            if token in cmdline or any(token in v for v in proc.environ().values()):
                found.append(f"{proc.pid} {cmdline[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


async def _wait_for(predicate, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await anyio.sleep(0.1)
    return predicate()


async def _all_started(token: str) -> None:
    # hostile.py itself, its session grandchild and the daemon
    assert await _wait_for(lambda: len(_marked(token)) >= 3, 20), _marked(token)


async def _none_left(token: str, within_s: float = 15) -> list[str]:
    await _wait_for(lambda: not _marked(token), within_s)
    return _marked(token)


def _token(kind: str) -> str:
    return f"rc-fault-{kind}-{os.getpid()}-{time.time_ns()}"


@pytest.fixture
def project(repo: Path) -> Path:
    (repo / "hostile.py").write_text(HOSTILE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "hostile")
    return repo


def _session_log_valid(root: Path, session_id: str) -> list[dict]:
    """Every complete line parses; only a last line without its newline may be cut short."""
    raw = (root / ".rootcause" / "sessions" / session_id / "events.jsonl").read_text(encoding="utf-8")
    lines = raw.split("\n")
    complete, last = lines[:-1], lines[-1]
    events = [json.loads(line) for line in complete]
    assert last == "" or not raw.endswith("\n")
    assert events and events[0]["type"] == "created"
    return events


def _servers_of(root: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if "serve" in cmdline and str(root) in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


async def test_client_dies_mid_run(project: Path) -> None:
    """The client process is SIGKILLed during a reproduce: the server sees its pipes close, stops the run
    (the SIGTERM-ignoring tree included) and exits."""
    token = _token("client")
    client = subprocess.Popen([sys.executable, "-c", CLIENT, rootcause_executable(), str(project), token],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                              text=True)
    try:
        session_id = client.stdout.readline().strip()
        assert session_id, "the client did not start a session"
        await _all_started(token)
        assert _servers_of(project)
        client.kill()
        client.wait(10)
        assert not await _none_left(token), "processes of the run survived the client"
        assert await _wait_for(lambda: not _servers_of(project), 15), "the server outlived its client"
    finally:
        if client.poll() is None:
            client.kill()
    events = _session_log_valid(project, session_id)
    async with stdio_client(project) as fresh:
        data = structured(await fresh.call_tool("diagnose_log", {"text": "ValueError: after the crash",
                                                                 "session_id": session_id}))
        assert data["diagnosis"]["exception_type"] == "ValueError"
    after = _session_log_valid(project, session_id)
    assert len([e for e in after if e["type"] == "evidence"]) == len([e for e in events if e["type"] == "evidence"]) + 1


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_server_stopped_mid_run_with_a_stubborn_tree(project: Path, signum: int) -> None:
    """SIGTERM runs the server's handler; SIGKILL runs nothing, and the runner's guardian process sees the
    server's pipe close and kills the run's group, its own-session grandchild and the double-forked daemon."""
    token = _token(signal.Signals(signum).name.lower())
    me = psutil.Process()
    session_id, signalled = "", False
    with pytest.raises(BaseException):  # noqa: B017 - the connection dies with the server, however it is reported
        async with stdio_client(project) as client, anyio.create_task_group() as tg:
            session_id = structured(await client.call_tool("start_session", {"symptom": "hang"}))["session_id"]
            tg.start_soon(client.call_tool, "reproduce", {
                "command": ["python", "hostile.py", token], "runs": 1, "timeout_s": 300, "session_id": session_id})
            await _all_started(token)
            server = next(p for p in me.children(recursive=True) if "serve" in p.cmdline())
            server.send_signal(signum)
            signalled = True
            await anyio.sleep(30)  # the call never completes; the task group ends with the broken connection
    assert signalled, "the run never started"
    assert not await _none_left(token), f"processes of the run survived the server's {signal.Signals(signum).name}"
    _session_log_valid(project, session_id)


async def test_wall_timeout_kills_a_stubborn_tree(project: Path) -> None:
    token = _token("timeout")
    async with stdio_client(project) as client:
        started = time.monotonic()
        data = structured(await client.call_tool("reproduce", {
            "command": ["python", "hostile.py", token], "runs": 1, "timeout_s": 3}))
        elapsed = time.monotonic() - started
        assert data["runs"][0]["outcome"] == "hang" and data["runs"][0]["timed_out"] == "wall"
        assert not await _none_left(token, 10), "processes of the run survived the timeout"
        assert elapsed < 40, elapsed
        # The server keeps serving.
        assert structured(await client.call_tool("diagnose_log", {"text": "ValueError: x"}))["diagnosis"]


async def test_first_evidence_after_a_crash_mid_write_is_kept(repo: Path) -> None:
    async with stdio_client(repo) as client:
        sid = structured(await client.call_tool("start_session", {"symptom": "crash"}))["session_id"]
        log = repo / ".rootcause" / "sessions" / sid / "events.jsonl"
        with open(log, "a", encoding="utf-8") as fh:
            fh.write('{"type": "evidence", "evid')  # what a SIGKILL in the middle of a write leaves
        structured(await client.call_tool("diagnose_log", {"text": "ValueError: after the crash", "session_id": sid}))
        report = (await client.read_resource(f"rootcause://sessions/{sid}")).contents[0].text
    assert "diagnose_log (Phase 1)" in report
