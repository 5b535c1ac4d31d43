"""diagnose_log through the real `rootcause serve` over stdio, on logs of real processes and Slurm's own lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import stdio_client, structured

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STUCK = """\
import faulthandler
import queue
import sys

faulthandler.dump_traceback_later(1, exit=True)


def wait_for_peer(q):
    return q.get()


def main():
    print("step 1 loss 2.30", flush=True)
    wait_for_peer(queue.Queue())


main()
"""
CRASH = """\
import faulthandler
import os
import signal

faulthandler.enable()


def read_header(address):
    os.kill(os.getpid(), signal.SIGSEGV)  # what a bad pointer in a C extension does


read_header(0)
"""
TEST = """\
import os


def masked_mean(values, mask):
    return sum(v for v, m in zip(values, mask) if m) / float(os.environ["DIVISOR"])


def test_padding():
    assert masked_mean([1.0, 2.0, 2.0], [1, 1, 1]) == 2.5
"""


def _run(repo: Path, argv: list[str], log: str) -> int:
    with open(repo / log, "w") as fh:
        return subprocess.run(argv, cwd=repo, stdout=fh, stderr=subprocess.STDOUT, timeout=120).returncode


async def test_a_real_stuck_process_and_a_real_crash_are_located_in_the_project(repo: Path) -> None:
    (repo / "stuck.py").write_text(STUCK)
    (repo / "crash.py").write_text(CRASH)
    assert _run(repo, [sys.executable, "stuck.py"], "stuck.log") != 0
    assert _run(repo, [sys.executable, "crash.py"], "crash.log") != 0
    async with stdio_client(repo) as client:
        stuck = await client.call_tool("diagnose_log", {"path": "stuck.log"})
        crash = structured(await client.call_tool("diagnose_log", {"path": "crash.log"}))["diagnosis"]
    d = structured(stuck)["diagnosis"]
    assert d["category"] == "hang" and d["location"] == "stuck.py:9" and d["message"]
    assert d["stacks"][0]["user_frame"] == "stuck.py:9"
    assert "at stuck.py:9" in stuck.content[0].text
    assert crash["category"] == "crash" and crash["location"] == "crash.py:9" and crash["message"]


async def test_one_assertion_failing_with_two_floats_has_one_signature(repo: Path) -> None:
    (repo / "test_loss.py").write_text(TEST)
    for divisor in ("1.8", "3"):  # 5 / 1.8 = 2.7777777777777777 and 5 / 3 = 1.6666666666666667, against 2.5
        with open(repo / f"pytest_{divisor}.log", "w") as fh:
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                            "test_loss.py"], cwd=repo, stdout=fh, stderr=subprocess.STDOUT, timeout=120,
                           env={**os.environ, "DIVISOR": divisor})
    signatures = []
    async with stdio_client(repo) as client:
        for name in ("pytest_1.8.log", "pytest_3.log"):
            d = structured(await client.call_tool("diagnose_log", {"path": name}))["diagnosis"]
            assert d["category"] == "test_failure" and d["failed_tests"] == ["test_loss.py::test_padding"], \
                (repo / name).read_text()
            signatures.append(d["signature"])
    assert signatures[0] == signatures[1] and "assert <n> == <n>" in signatures[0]


SLURM_OOM = """\
0: [titan] 2026-03-04 07:20:01,110 - root - INFO - step: 120  loss: 3.1021
1: [titan] 2026-03-04 07:20:01,112 - root - INFO - step: 120  loss: 3.1102
1: slurmstepd-n2: error: Detected 1 oom-kill event(s) in StepId=4121.0. Some of your processes may have been \
killed by the cgroup out-of-memory handler.
srun: error: n2: task 1: Out Of Memory
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
0: slurmstepd-n1: error: *** STEP 4121.0 ON n1 CANCELLED AT 2026-03-04T07:20:03 ***
srun: error: n1: task 0: Killed
"""
SLURM_TIME_LIMIT = """\
0: step 9 loss 2.20
1: step 9 loss 2.21
slurmstepd: error: *** JOB 4122 ON n1 CANCELLED AT 2026-03-04T08:00:01 DUE TO TIME LIMIT ***
"""
SLURM_RAISE = """\
0: step 1 loss 2.30
1: Traceback (most recent call last):
1:   File "/home/u/train.py", line 12, in <module>
1:     raise ValueError("rank 1 refuses to start")
1: ValueError: rank 1 refuses to start
srun: error: n2: task 1: Exited with exit code 1
"""


async def test_slurm_lines(repo: Path) -> None:
    (repo / "oom.log").write_text(SLURM_OOM)
    async with stdio_client(repo) as client:
        oom = structured(await client.call_tool("diagnose_log", {"path": "oom.log"}))["diagnosis"]
        limit = structured(await client.call_tool("diagnose_log", {"text": SLURM_TIME_LIMIT}))["diagnosis"]
        raised = structured(await client.call_tool("diagnose_log", {"text": SLURM_RAISE}))["diagnosis"]
    assert oom["category"] == "host_oom" and oom["ranks"]["1"]["node"] == "n2"
    assert oom["ranks"]["1"]["outcome"] != "ok" and oom["ranks"]["0"]["node"] == "n1"
    # Both were killed from outside (the OOM killer, Slurm's cancellation): crashes, not errors they raised.
    assert oom["ranks"]["0"]["outcome"] == oom["ranks"]["1"]["outcome"] == "crash"
    assert limit["category"] == "hang" and "slurm-time-limit" in limit["signature"] and "TIME LIMIT" in limit["message"]
    assert raised["exception_type"] == "ValueError"
    assert raised["ranks"]["1"] == {"outcome": "fail", "first_error": "ValueError: rank 1 refuses to start",
                                    "node": "n2"}
    assert raised["ranks"]["0"]["outcome"] == "ok"


WAITER = """\
import threading


def wait_for_peer(done):
    done.wait()  # the peer that would set it never starts


print("step 1 loss 2.30", flush=True)
wait_for_peer(threading.Event())
"""


async def test_a_hung_run_is_located_at_the_projects_line(repo: Path) -> None:
    (repo / "waiter.py").write_text(WAITER)
    async with stdio_client(repo) as client:
        result = await client.call_tool("reproduce", {"command": f"{sys.executable} waiter.py", "runs": 1,
                                                      "idle_timeout_s": 2, "timeout_s": 60})
    data = structured(result)
    d = data["diagnosis"]
    assert data["runs"][0]["outcome"] == "hang" and d["category"] == "hang"
    assert d["location"] == "waiter.py:5", d
    assert any(stack["user_frame"] == "waiter.py:5" for stack in d["stacks"])
    assert "at waiter.py:5" in result.content[0].text


async def test_a_shell_reporting_a_segfault_of_its_child_is_a_crash(repo: Path) -> None:
    (repo / "segv.py").write_text("import os\nimport signal\n\nprint('step 1 loss 2.30', flush=True)\n"
                                  "os.kill(os.getpid(), signal.SIGSEGV)\n")
    # A real bash runs the job script; it reports the child's signal in its own words, with no faulthandler dump.
    _run(repo, ["bash", "-c", f"{sys.executable} segv.py; true"], "job.log")
    assert "Segmentation fault" in (repo / "job.log").read_text()
    async with stdio_client(repo) as client:
        d = structured(await client.call_tool("diagnose_log", {"path": "job.log"}))["diagnosis"]
    assert d["category"] == "crash" and d["signature"].startswith("v3|signal SIGSEGV|")
