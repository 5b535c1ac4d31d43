"""reproduce and diagnose_log through the real `rootcause serve` over stdio, with real processes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tests.conftest import FIXTURES, error_text, git, stdio_client, structured

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not importable: .venv/bin/pip install torch==2.13.0")

HANG_DIST = (FIXTURES / "scripts" / "hang_dist.py").read_text()  # rank 1 never joins the all_reduce


def _commit(repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def _processes_with(token: str) -> list[str]:
    """Live processes whose command line or environment carries the token (a run marker or a tag)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "pid"]):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if token in " ".join(proc.info["cmdline"] or []) or token in proc.environ().get("ROOTCAUSE_RUN_ID", "-"):
                found.append(f"{proc.pid} {proc.info['cmdline']}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


async def _none_left(token: str, within_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + within_s
    left = _processes_with(token)
    while left and time.monotonic() < deadline:
        await anyio.sleep(0.2)
        left = _processes_with(token)
    return left


async def test_chained_exception_in_a_module_reproduces(repo: Path) -> None:
    _commit(repo, {
        "pkg/__init__.py": "",
        "pkg/config.py": "def width(cfg):\n    try:\n        return cfg['width']\n    except KeyError as exc:\n"
                         "        raise ValueError(f'config {id(cfg)} misses width') from exc\n",
        "main.py": "from pkg.config import width\n\nwidth({'depth': 3})\n",
    }, "add config loader")
    async with stdio_client(repo) as client:
        result = await client.call_tool("reproduce", {"command": "python main.py", "runs": 2})
        data = structured(result)
        assert data["status"] == "reproduced" and data["consistent"] is True
        assert [r["outcome"] for r in data["runs"]] == ["fail", "fail"]
        assert len({r["signature"] for r in data["runs"]}) == 1
        d = data["diagnosis"]
        assert (d["exception_type"], d["message"], d["location"]) == ("KeyError", "'width'", "pkg/config.py:3")
        assert d["category"] == "python_exception" and d["signature"].endswith("|config:width")
        assert data["recent_commits"][0].endswith("add config loader")
        assert data["environment"]["python_version"] and "REPRODUCED" in result.content[0].text
        log = await client.read_resource(data["runs"][0]["log_uri"])
        assert "The above exception was the direct cause" in log.contents[0].text
        assert (repo / data["runs"][1]["log_path"]).is_file()


async def test_flaky_script_is_flaky(repo: Path) -> None:
    _commit(repo, {"flaky.py": "from pathlib import Path\np = Path('count.txt')\nn = int(p.read_text()) + 1 if "
                               "p.exists() else 1\np.write_text(str(n))\nif n % 2:\n    raise RuntimeError('odd')\n"},
            "flaky")
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool("reproduce", {"command": ["python", "flaky.py"], "runs": 3}))
    assert [r["outcome"] for r in data["runs"]] == ["fail", "pass", "fail"]
    assert data["status"] == "flaky" and data["consistent"] is False
    assert data["runs"][1]["signature"] is None and data["diagnosis"]["message"] == "odd"


async def test_output_flood_keeps_the_result_small(repo: Path) -> None:
    _commit(repo, {"flood.py": "import sys\nline = 'y' * 1023 + '\\n'\nfor _ in range(50 * 1024):\n"
                               "    sys.stdout.write(line)\nraise ValueError('after the flood')\n"}, "flood")
    async with stdio_client(repo) as client:
        result = await client.call_tool("reproduce", {"command": "python flood.py", "runs": 1})
        data = structured(result)
        assert len(json.dumps(data)) < 25_000 and len(result.content[0].text) < 25_000
        run = data["runs"][0]
        assert (repo / run["log_path"]).stat().st_size >= 50 * 1024 * 1024
        assert data["diagnosis"]["exception_type"] == "ValueError"
        assert data["diagnosis"]["message"] == "after the flood"
        text = (await client.read_resource(run["log_uri"])).contents[0].text
        assert len(text) < 1_100_000 and "bytes omitted" in text and "after the flood" in text


async def test_pytest_failure_is_labelled_by_the_root_error(repo: Path) -> None:
    _commit(repo, {
        "src/mathlib.py": "import numpy as np\n\n\ndef product(a, b):\n    return np.dot(a, b)\n",
        "tests/test_mathlib.py": "import sys\nsys.path.insert(0, 'src')\nimport numpy as np\n"
                                 "from mathlib import product\n\n\ndef test_ok():\n"
                                 "    assert product(np.ones((2, 2)), np.ones((2, 2))).sum() == 8\n\n\n"
                                 "def test_product():\n"
                                 "    assert product(np.ones((4, 8)), np.ones((16, 2))).shape == (4, 2)\n",
    }, "tests")
    async with stdio_client(repo) as client:
        data = structured(await client.call_tool(
            "reproduce", {"command": "python -m pytest -x -q -p no:cacheprovider tests", "runs": 1}))
    d = data["diagnosis"]
    assert data["status"] == "reproduced" and d["category"] == "shape_mismatch"
    assert d["failed_tests"] == ["tests/test_mathlib.py::test_product"]
    assert d["exception_type"] == "ValueError" and "not aligned" in d["message"]
    assert d["location"] == "src/mathlib.py:5"


@needs_torch
async def test_torchrun_gloo_hang_names_the_collective_and_leaves_nothing(repo: Path) -> None:
    _commit(repo, {"hang_dist.py": HANG_DIST}, "hang")
    ticks: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        ticks.append(time.monotonic())

    started = time.monotonic()
    async with stdio_client(repo) as client:
        result = await client.call_tool(
            "reproduce", {"command": "python -m torch.distributed.run --standalone --nproc_per_node 2 hang_dist.py",
                          "runs": 1, "timeout_s": 120, "idle_timeout_s": 8}, progress_callback=on_progress)
        data = structured(result)
    ended = time.monotonic()
    run = data["runs"][0]
    assert run["outcome"] == "hang" and run["timed_out"] == "idle"
    d = data["diagnosis"]
    assert d["category"] == "hang" and "all_reduce" in d["signature"]
    by_rank = {s["rank"]: s for s in d["stacks"] if s["rank"] is not None}
    assert by_rank[0]["collective"] == "all_reduce"
    assert by_rank[1]["collective"] is None and "wait_forever" in by_rank[1]["frames"][-1]
    # Rank 1 never reached the all_reduce rank 0 waits in: it holds the job up.
    assert d["ranks"]["0"]["outcome"] == "waiting" and d["ranks"]["1"]["outcome"] == "culprit"
    # Its flight recorder holds no entry: the dumps name it missing at the first collective.
    assert (d["mismatch"]["seq"], d["mismatch"]["culprit_ranks"]) == (1, [1])
    assert d["group"] == "v3|hang|collective missing in default_pg: all_reduce(<n>)"
    assert d["signature"] == d["group"] + "|hang_dist:wait_forever"  # the culprit's place
    assert "waits in all_reduce" in result.content[0].text
    # The user's lines, not torch's innermost frame: where each rank stands, and the location.
    assert d["location"] == "hang_dist.py:18"
    assert "rank 1: stands at hang_dist.py:9" in result.content[0].text
    assert run["outcome_reason"].startswith("idle timeout after")
    assert not await _none_left(run["run_id"]) and not await _none_left("hang_dist.py")
    gaps = [b - a for a, b in zip([started, *ticks], [*ticks, ended], strict=True)]
    assert ticks and max(gaps[:-1]) <= 10.0, gaps


async def test_client_cancellation_kills_the_run(repo: Path) -> None:
    token = f"rc-e2e-cancel-{os.getpid()}-{time.time_ns()}"
    _commit(repo, {"sleeper.py": "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', "
                                 "'import time; time.sleep(600)', sys.argv[1]])\nprint('sleeping', flush=True)\n"
                                 "time.sleep(600)\n"}, "sleeper")
    async with stdio_client(repo) as client:
        with anyio.move_on_after(4) as scope:
            await client.call_tool("reproduce", {"command": f"python sleeper.py {token}", "runs": 1,
                                                 "timeout_s": 300})
        assert scope.cancelled_caught
        assert _processes_with(token), "the run should have been running when cancelled"
        assert not await _none_left(token, 15)
        # The server is still serving after the cancelled call.
        data = structured(await client.call_tool("diagnose_log", {"text": "ValueError: still alive"}))
        assert data["diagnosis"]["exception_type"] == "ValueError"


async def test_bad_input_is_a_specific_tool_error(repo: Path) -> None:
    cases = [
        ("reproduce", {"command": "  "}, "command is empty"),
        ("reproduce", {"command": "no-such-program-xyz --help"}, "command not found: no-such-program-xyz"),
        ("reproduce", {"command": "python -V", "runs": 0}, "runs takes an integer from 1 to 20, not 0"),
        ("reproduce", {"command": "python -V", "runs": 21}, "runs takes an integer from 1 to 20, not 21"),
        ("reproduce", {"command": "python -V", "timeout_s": 0}, "timeout_s must be > 0"),
        ("reproduce", {"command": "python -V", "idle_timeout_s": -1}, "idle_timeout_s must be > 0"),
        ("reproduce", {"command": "python -V", "cwd": ".."}, "outside the root"),
        ("reproduce", {"command": "python -V", "session_id": "20200101-000000-abcdef"}, "unknown session"),
        ("diagnose_log", {"path": "../../etc/passwd"}, "outside the root"),
        ("diagnose_log", {"path": "missing.log"}, "does not exist"),
        ("diagnose_log", {}, "exactly one of path or text"),
        ("diagnose_log", {"path": "README.md", "text": "x"}, "exactly one of path or text"),
    ]
    async with stdio_client(repo) as client:
        for tool, arguments, expected in cases:
            assert expected in error_text(await client.call_tool(tool, arguments)), (tool, arguments)


async def test_session_evidence_and_diagnose_log(repo: Path) -> None:
    shutil.copy(FIXTURES / "logs" / "cuda_oom_fsdp_rank1.log", repo / "job.log")
    _commit(repo, {"boom.py": "raise RuntimeError('CUDA error: device-side assert triggered')\n"}, "boom")
    async with stdio_client(repo) as client:
        sid = structured(await client.call_tool("start_session", {"symptom": "job crashes with OOM"}))["session_id"]
        data = structured(await client.call_tool("diagnose_log", {"path": "job.log", "session_id": sid}))
        d = data["diagnosis"]
        assert d["category"] == "cuda_oom" and d["ranks"]["1"]["outcome"] == "fail"
        assert data["source"] == "job.log"
        again = structured(await client.call_tool("diagnose_log", {"text": (repo / "job.log").read_text()}))
        assert again["diagnosis"]["signature"] == d["signature"]
        rep = structured(await client.call_tool("reproduce", {"command": "python boom.py", "runs": 1,
                                                              "session_id": sid}))
        assert rep["diagnosis"]["category"] == "cuda_error"
        report = (await client.read_resource(f"rootcause://sessions/{sid}")).contents[0].text
    assert "diagnose_log (Phase 1)" in report and "reproduce (Phase 1)" in report
    assert "[~] Phase 1" in report and d["signature"] in report


async def test_server_stopped_mid_run_leaves_nothing(repo: Path) -> None:
    token = f"rc-e2e-term-{os.getpid()}-{time.time_ns()}"
    _commit(repo, {"sleeper.py": "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', "
                                 "'import time; time.sleep(600)', sys.argv[1]])\ntime.sleep(600)\n"}, "sleeper")
    me = psutil.Process()
    with pytest.raises(BaseException):  # noqa: B017 - the connection dies with the server, however it is reported
        async with stdio_client(repo) as client, anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "reproduce", {"command": f"python sleeper.py {token}", "runs": 1})
            deadline = time.monotonic() + 20
            while not _processes_with(token) and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            assert _processes_with(token)
            server = next(p for p in me.children(recursive=True) if "serve" in " ".join(p.cmdline()))
            server.terminate()
            await anyio.sleep(30)  # the call never completes; the task group ends with the broken connection
    assert not await _none_left(token, 15)
