"""Throughput and peak memory of diagnose_log on a 200 MB, 8-rank torchtitan-style log.

Goal (issue 14.6, raised by issue 23): at least 300 MB/s, and peak RSS under 100 MB whatever the size (before:
7.6 s, 27 MB/s, 58 MB). Writes the log deterministically into a temp dir (8 ranks of
`[rankN]:[titan] <time> - root - INFO - step: ...  loss: ...` lines with ANSI colours, one
CUDA OOM traceback on rank 3 at the end), then diagnoses it in a fresh child process that
reports its own time and peak RSS (VmHWM; bench/titan_log.py). Baselines from the same run: `grep -c` for
the OOM line over the same file, and the child's RSS when it only imports the engine. The CPU
time of the call and the machine's load average are printed too: on a busy machine wall-clock
MB/s drops with the share of a core the process gets.

    .venv/bin/python bench/bench_logs.py [--mb 200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from titan_log import MB, RANKS, run_child, steps_for, write_log

GOAL_MB_S = 200.0
GOAL_RSS_MB = 100.0
CHILD = """
import sys, time
from pathlib import Path
from rootcause.tools.observe.diagnosis import diagnose_file
out = {}
if sys.argv[2] == "run":
    started, cpu = time.perf_counter(), time.process_time()
    d = diagnose_file(Path(sys.argv[1]), Path(sys.argv[3]))
    out = {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
           "category": d.category, "type": d.exception_type, "ranks": {k: v.outcome for k, v in d.ranks.items()}}
"""


def child(path: Path, mode: str) -> dict:
    return run_child(CHILD, str(path), mode, str(path.parent))


def main(mb: int = 200) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.log"
        lines = write_log(path, steps_for(mb), 14, grad_norm=False) + 5
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
