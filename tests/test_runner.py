"""The process runner: argv parsing, outcomes, logs on disk, timeouts with stacks, no orphans."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import RUN_MARKER, RunSpec, parse_command, read_output, run_captured, run_dir, run_process

pytestmark = pytest.mark.anyio
PY = sys.executable


def _marked(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if token in " ".join(proc.info["cmdline"] or []) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_parse_command_splits_env_and_refuses_empty() -> None:
    assert parse_command("FOO=1 BAR='a b' python -c 'print(1)'") == (["python", "-c", "print(1)"],
                                                                   {"FOO": "1", "BAR": "a b"})
    assert parse_command(["python", "x y.py"]) == (["python", "x y.py"], {})
    assert parse_command("echo $HOME | wc", shell=True) == (["/bin/sh", "-c", "echo $HOME | wc"], {})
    for bad in ("", "   ", "FOO=1", "FOO=1 BAR=2"):
        with pytest.raises(UsageError, match="command is empty"):
            parse_command(bad)
    with pytest.raises(UsageError, match="balance the quotes"):
        parse_command("python -c 'unclosed")


async def test_outcomes_pass_fail_crash(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ok = await run_process(RunSpec(argv=[PY, "-c", "print('hello')"], cwd=tmp_path), ws)
    assert ok.outcome == "pass" and ok.exit_code == 0 and "hello" in ok.output
    assert read_output(ok, ws) == "hello\n"
    assert run_dir(ws, ok.run_id).is_dir()
    fail = await run_process(RunSpec(argv=[PY, "-c", "raise SystemExit(3)"], cwd=tmp_path), ws)
    assert fail.outcome == "fail" and fail.exit_code == 3
    crash = await run_process(RunSpec(argv=[PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                                      cwd=tmp_path), ws)
    assert crash.outcome == "crash" and crash.signal == 11
    assert "Fatal Python error: Segmentation fault" in crash.output  # PYTHONFAULTHANDLER is set for children
    with pytest.raises(UsageError, match="command not found: no-such-program-xyz"):
        await run_process(RunSpec(argv=["no-such-program-xyz"], cwd=tmp_path), ws)
    with pytest.raises(UsageError, match="unknown run"):
        run_dir(ws, "20200101-000000-abcdef")
    with pytest.raises(UsageError, match="malformed"):
        run_dir(ws, "../../etc")


async def test_stdin_closed_and_env_marker(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    record, out = await run_captured(
        [PY, "-c", f"import os,sys; print(repr(sys.stdin.read()), os.environ['{RUN_MARKER}'], os.environ['X'])"],
        ws, env={"X": "42"})
    assert out.strip() == f"'' {record.run_id} 42"


async def test_flood_stays_on_disk_not_in_memory(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    code = "import sys\nline = 'x' * 99 + '\\n'\nfor _ in range(200_000): sys.stdout.write(line)\nprint('END')"
    record = await run_process(RunSpec(argv=[PY, "-c", code], cwd=tmp_path), ws)
    assert record.log_bytes == 20_000_004
    assert len(record.head) + len(record.tail) < 25_000 and record.tail.endswith("END\n")
    assert "bytes omitted" in record.output


async def test_idle_timeout_captures_stacks_of_every_process_then_kills_the_tree(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    token = f"rc-test-{os.getpid()}-{time.time_ns()}"
    script = tmp_path / "tree.py"
    script.write_text(
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time\\ndef sleeper():\\n    time.sleep(600)\\n"
        f"sleeper()', '{token}'])\n"
        "def parent_waits():\n    child.wait()\n"
        "print('started', flush=True)\nparent_waits()\n")
    started = time.monotonic()
    record = await run_process(RunSpec(argv=[PY, str(script), token], cwd=tmp_path, timeout_s=60, idle_timeout_s=1.5),
                               ws)
    assert record.outcome == "hang" and record.timed_out == "idle"
    assert time.monotonic() - started < 20
    assert len(record.stacks) == 2 and all(s.method in ("py-spy", "faulthandler") for s in record.stacks)
    texts = " ".join(s.text for s in record.stacks)
    assert "parent_waits" in texts and "sleeper" in texts
    assert (run_dir(ws, record.run_id) / "stacks.txt").is_file()
    assert record.timeout_at_byte is not None and record.timeout_at_byte <= record.log_bytes
    assert not _marked(token)


async def test_wall_timeout(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    record = await run_process(RunSpec(argv=[PY, "-c", "import time\nwhile True:\n    print('tick', flush=True)\n"
                                                      "    time.sleep(0.1)"], cwd=tmp_path, timeout_s=1.5), ws)
    assert record.outcome == "hang" and record.timed_out == "wall" and "tick" in record.output
    for bad in ({"timeout_s": 0}, {"idle_timeout_s": -1}):
        with pytest.raises(UsageError, match="must be > 0"):
            await run_process(RunSpec(argv=[PY, "-V"], cwd=tmp_path, **bad), ws)


async def test_descendant_that_left_the_group_is_swept(tmp_path: Path) -> None:
    """A daemon that calls setsid() escapes the process group; the run marker still finds it."""
    ws = Workspace(tmp_path)
    token = f"rc-daemon-{os.getpid()}-{time.time_ns()}"
    code = (f"import os, subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
            f"'{token}'], start_new_session=True)\nprint('parent exits')")
    record = await run_process(RunSpec(argv=[PY, "-c", code], cwd=tmp_path, timeout_s=30), ws)
    assert record.outcome == "pass"
    assert not _marked(token)


async def test_cancellation_kills_the_tree(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    token = f"rc-cancel-{os.getpid()}-{time.time_ns()}"
    code = (f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
            f"'{token}'])\ntime.sleep(600)")
    with anyio.move_on_after(1.5):
        await run_process(RunSpec(argv=[PY, "-c", code, token], cwd=tmp_path, timeout_s=60), ws)
    assert not _marked(token)
