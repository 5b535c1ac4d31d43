"""Throughput and peak memory of diagnose_log on a 200 MB, 8-rank torchtitan-style log.

Goal (issue 14.6): at least 200 MB/s, and peak RSS under 100 MB whatever the size (before:
7.6 s, 27 MB/s, 58 MB). Writes the log deterministically into a temp dir (8 ranks of
`[rankN]:[titan] <time> - root - INFO - step: ...  loss: ...` lines with ANSI colours, one
CUDA OOM traceback on rank 3 at the end), then diagnoses it in a fresh child process that
reports its own time and peak RSS (ru_maxrss). Baselines from the same run: `grep -c` for
the OOM line over the same file, and the child's RSS when it only imports the engine. The CPU
time of the call and the machine's load average are printed too: on a busy machine wall-clock
MB/s drops with the share of a core the process gets.

    .venv/bin/python bench/bench_logs.py [--mb 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20
RANKS = 8
GOAL_MB_S = 200.0
GOAL_RSS_MB = 100.0
CHILD = """
import json, resource, sys, time
from pathlib import Path
from tools.diagnosis import diagnose_file
out = {}
if sys.argv[2] == "run":
    started, cpu = time.perf_counter(), time.process_time()
    d = diagnose_file(Path(sys.argv[1]), Path(sys.argv[3]))
    out = {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
           "category": d.category, "type": d.exception_type, "ranks": {k: v.outcome for k, v in d.ranks.items()}}
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def write_log(path: Path, target_mb: int) -> int:
    """The log; returns its number of lines."""
    rng = random.Random(14)
    colours = ("\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[35m", "\x1b[39m")
    red, green, yellow, blue, magenta, reset = colours
    lines = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[rank0]:[titan] 2026-11-29 10:00:00,000 - root - INFO - Starting job: llama3 8B training\n")
        step = 0
        while fh.tell() < target_mb * MB:
            step += 1
            loss = 2.0 + 8.0 / (1 + step / 500) + rng.uniform(-0.05, 0.05)
            stamp = f"2026-11-29 {10 + step // 3600 % 10:02d}:{step // 60 % 60:02d}:{step % 60:02d}"
            fh.write("".join(
                f"[rank{rank}]:[titan] {stamp},{rank:03d} - root - INFO - {red}step: {step:6d}  {green}loss: "
                f"{loss:7.4f}  {yellow}memory: 35.12GiB(36.97%)  {blue}tps: 7,234  {magenta}tflops: 123.45  "
                f"mfu: 12.34%{reset}\n" for rank in range(RANKS)))
            lines += RANKS
        fh.write("[rank3]:Traceback (most recent call last):\n"
                 '[rank3]:  File "/workspace/torchtitan/train.py", line 412, in train_step\n'
                 "[rank3]:    loss.backward()\n"
                 "[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
                 "capacity of 79.10 GiB of which 1.02 GiB is free.\n")
    return lines + 4


def child(path: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), mode, str(path.parent)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main(mb: int = 200) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.log"
        lines = write_log(path, mb)
        size_mb = path.stat().st_size / MB
        child(path, "import")  # warm the page cache and the bytecode cache
        idle = child(path, "import")
        run = child(path, "run")
        started = time.perf_counter()
        grep = subprocess.run(["grep", "-c", "OutOfMemoryError", str(path)], capture_output=True, text=True)
        grep_s = time.perf_counter() - started
    mb_s = size_mb / run["seconds"]
    load = os.getloadavg()[0]
    result = {
        "log_mb": round(size_mb, 1), "lines": lines, "seconds": round(run["seconds"], 3), "mb_per_s": round(mb_s, 1),
        "cpu_seconds": round(run["cpu_seconds"], 3), "mb_per_cpu_s": round(size_mb / run["cpu_seconds"], 1),
        "load_average_1min": round(load, 2), "cpus": os.cpu_count(),
        "peak_rss_mb": round(run["rss_mb"], 1), "import_only_rss_mb": round(idle["rss_mb"], 1),
        "grep_c_seconds": round(grep_s, 3), "grep_c_count": int(grep.stdout.strip() or 0),
        "slower_than_grep": round(run["seconds"] / grep_s, 1), "category": run["category"],
        "rank_outcomes": run["ranks"],
        "goal_met": mb_s >= GOAL_MB_S and run["rss_mb"] < GOAL_RSS_MB and run["category"] == "cuda_oom",
    }
    print(f"diagnose_log on a {size_mb:.0f} MB {RANKS}-rank log ({lines:,} lines): {run['seconds']:.2f} s = "
          f"{mb_s:.0f} MB/s (goal >= {GOAL_MB_S:.0f}), peak RSS {run['rss_mb']:.0f} MB (import only "
          f"{idle['rss_mb']:.0f} MB; goal < {GOAL_RSS_MB:.0f}); grep -c: {grep_s:.2f} s "
          f"(diagnose_log takes {run['seconds'] / grep_s:.0f}x as long); category {run['category']}; CPU "
          f"{run['cpu_seconds']:.2f} s = {size_mb / run['cpu_seconds']:.0f} MB/s of CPU; load average {load:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    main(parser.parse_args().mb)
