"""reproduce's cost: per-run overhead against running the command directly, and server memory under a 1 GB flood.

    .venv/bin/python bench/bench_reproduce.py

Overhead: after a warm-up call (the interpreter facts are then cached), the wall time of
reproduce(runs=N) minus N direct runs of the same command, divided by N; measured in ROUNDS
interleaved rounds (direct, then reproduce) and the median round reported, since other work on a
2-core machine moves a single round by +-10 ms (goal < 10 ms).
Memory: the peak RSS of a real `rootcause serve` process (sampled with psutil every 20 ms)
while reproduce runs a child that prints 1 GB and then fails (goal < 100 MB).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = 10
ROUNDS = 5
FAIL = "import sys\nsys.stderr.write('Traceback (most recent call last):\\n  File \"x.py\", line 1, in <module>\\n"\
       "ValueError: bench\\n')\nraise SystemExit(1)"
FLOOD = ("import sys\nblock = ('z' * 1023 + '\\n') * 1024\nfor _ in range(1024):\n    sys.stdout.write(block)\n"
         "raise RuntimeError('after 1 GB of output')\n")


def _project() -> Path:
    root = Path(tempfile.mkdtemp(prefix="rc-bench-"))
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    (root / "fail.py").write_text(FAIL)
    (root / "flood.py").write_text(FLOOD)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return root


async def _overhead(root: Path) -> dict:
    from rootcause.tools.core.context import ToolContext
    from rootcause.tools.engines.reproduce import ReproduceInput, reproduce

    ctx = ToolContext.for_root(root)
    argv = [sys.executable, "fail.py"]
    await reproduce(ReproduceInput(command=argv, runs=1), ctx)  # warm-up: caches the interpreter facts
    figures = {}
    for label in ("failing", "passing"):
        command = argv if label == "failing" else [sys.executable, "-c", "pass"]
        rounds = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(RUNS):
                subprocess.run(command, cwd=root, stdin=subprocess.DEVNULL, capture_output=True)
            direct = time.perf_counter() - started
            started = time.perf_counter()
            result = await reproduce(ReproduceInput(command=command, runs=RUNS), ctx)
            wrapped = time.perf_counter() - started
            assert len(result.runs) == RUNS
            rounds.append((wrapped - direct, direct, wrapped))
        rounds.sort()
        overhead, direct, wrapped = rounds[len(rounds) // 2]
        figures[label] = {"direct_s": round(direct, 3), "reproduce_s": round(wrapped, 3),
                          "overhead_ms_per_run": round(overhead / RUNS * 1000, 1),
                          "overhead_ms_per_run_rounds": [round(r[0] / RUNS * 1000, 1) for r in rounds],
                          "ratio": round(wrapped / direct, 2)}
    return figures


async def _flood_rss(root: Path) -> dict:
    from mcp import Client, StdioServerParameters

    exe = Path(sys.executable).parent / "rootcause"
    params = StdioServerParameters(command=str(exe), args=["serve", "--root", str(root)], cwd=str(root),
                                   env=dict(os.environ))
    me = psutil.Process()
    async with Client(params) as client:
        await client.list_tools()
        server = next(p for p in me.children(recursive=True) if "serve" in " ".join(p.cmdline()))
        idle_rss = server.memory_info().rss
        peak = idle_rss
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                try:
                    peak = max(peak, server.memory_info().rss)
                except psutil.NoSuchProcess:
                    return
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        started = time.perf_counter()
        result = await client.call_tool("reproduce", {"command": "python flood.py", "runs": 1, "timeout_s": 600})
        elapsed = time.perf_counter() - started
        done.set()
        await sampler
        data = result.structured_content
    log = root / data["runs"][0]["log_path"]
    size = log.stat().st_size
    log.unlink()
    return {"log_bytes": size, "server_idle_rss_mb": round(idle_rss / 2**20, 1),
            "server_peak_rss_mb": round(peak / 2**20, 1), "reproduce_s": round(elapsed, 1),
            "diagnosed": data["diagnosis"]["message"]}


def main() -> dict:
    root = _project()
    try:
        overhead = asyncio.run(_overhead(root))
        flood = asyncio.run(_flood_rss(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for label, f in overhead.items():
        print(f"reproduce overhead ({label} command, {RUNS} runs, median of {ROUNDS} rounds): "
              f"{f['overhead_ms_per_run']} ms/run (rounds {f['overhead_ms_per_run_rounds']}; direct {f['direct_s']}s, "
              f"reproduce {f['reproduce_s']}s, ratio {f['ratio']}x) — goal < 10 ms")
    print(f"server RSS while a child prints {flood['log_bytes'] / 2**30:.2f} GB: peak {flood['server_peak_rss_mb']} MB "
          f"(idle {flood['server_idle_rss_mb']} MB, call {flood['reproduce_s']}s, diagnosed: {flood['diagnosed']!r})"
          " — goal < 100 MB")
    return {"overhead": overhead, "flood": flood}


if __name__ == "__main__":
    main()
