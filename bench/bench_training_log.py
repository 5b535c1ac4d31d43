"""Throughput and peak memory of analyze_training_log on a 200 MB, 8-rank torchtitan-style log.

Goal (issue 13): at least 20 MB/s and under 150 MB peak RSS (before: 42 s and 716 MB).
Writes the log deterministically in a temp dir (1.26 M metric lines: 8 ranks x 157,500 steps,
`[rankN]:` prefixes, ANSI colours, a NaN tail on every rank, one CUDA OOM traceback at the end),
then runs the tool in a fresh child process that reports its own peak RSS (VmHWM; bench/titan_log.py).
Baselines from the same run: `wc -l` over the file, a Python loop reading its lines, and the
child's RSS when it only imports the tool (the interpreter and the engine modules).

    .venv/bin/python bench/bench_training_log.py [--mb 200]      (bench/run runs it too)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from titan_log import MB, RANKS, run_child, steps_for, write_log

CHILD = """
import asyncio, sys, time
from rootcause.tools.core.context import ToolContext
from rootcause.tools.engines.analyze_training_log import AnalyzeTrainingLogInput, analyze_training_log
out = {}
if sys.argv[2] == "run":
    started = time.perf_counter()
    r = asyncio.run(analyze_training_log(AnalyzeTrainingLogInput(path=sys.argv[1]), ToolContext.for_root(sys.argv[3])))
    out = {"seconds": time.perf_counter() - started, "steps": r.steps, "first_nonfinite_step": r.first_nonfinite_step,
           "rank_used": r.rank_used, "spikes": r.spike_count}
"""


def child(path: Path, mode: str) -> tuple[dict, float, float]:
    started = time.perf_counter()
    out = run_child(CHILD, str(path), mode, str(path.parent))
    return out, time.perf_counter() - started, out["rss_mb"] * MB


def main(mb: int = 200) -> dict:
    """Write the log, measure, print; the figures as a dict (bench/run reads it)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "titan_8ranks.log"
        steps = steps_for(mb)
        lines = write_log(log, steps, 13, grad_norm=True, nan_tail=120)
        size = log.stat().st_size
        started = time.perf_counter()
        subprocess.run(["wc", "-l", str(log)], check=True, capture_output=True)
        wc = time.perf_counter() - started
        started = time.perf_counter()
        with open(log, "rb") as fh:
            for _ in fh:
                pass
        pyread = time.perf_counter() - started
        _, _, idle_rss = child(log, "idle")
        result, wall, peak = child(log, "run")
    mbps = size / MB / result["seconds"]
    print(f"log: {size / MB:.0f} MB, {lines:,} metric lines ({RANKS} ranks x {steps:,} steps) + an OOM traceback")
    print(f"baseline: wc -l {size / MB / wc:.0f} MB/s; Python line loop {size / MB / pyread:.0f} MB/s; "
          f"idle child (interpreter + engine imports) {idle_rss / MB:.0f} MB RSS")
    print(f"analyze_training_log: {result['seconds']:.1f} s in the tool ({wall:.1f} s with start-up), "
          f"{mbps:.1f} MB/s (goal >= 20), {mbps / (size / MB / pyread):.3f}x the Python line loop")
    print(f"peak RSS: {peak / MB:.0f} MB (goal < 150), {peak / idle_rss:.2f}x the idle child; "
          f"before this work: 42 s and 716 MB")
    print(f"found: {result['steps']:,} steps of rank {result['rank_used']}, first non-finite step "
          f"{result['first_nonfinite_step']}, {result['spikes']} spikes")
    ok = mbps >= 20 and peak < 150 * MB
    print("goals met" if ok else "GOALS NOT MET")
    return {"log_mb": round(size / MB), "metric_lines": lines, "seconds": round(result["seconds"], 2),
            "mb_per_s": round(mbps, 1), "peak_rss_mb": round(peak / MB), "idle_rss_mb": round(idle_rss / MB),
            "python_line_loop_mb_per_s": round(size / MB / pyread), "wc_l_mb_per_s": round(size / MB / wc),
            "goals_met": ok}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200, help="log size (default 200 MB: 1.26 M metric lines)")
    raise SystemExit(0 if main(parser.parse_args().mb)["goals_met"] else 1)
