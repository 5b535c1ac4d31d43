"""Throughput and peak memory of analyze_training_log on a 200 MB, 8-rank torchtitan-style log.

Goal (issue 13): at least 20 MB/s and under 150 MB peak RSS (before: 42 s and 716 MB).
Writes the log deterministically in a temp dir (1.26 M metric lines: 8 ranks x 157,500 steps,
`[rankN]:` prefixes, ANSI colours, a NaN tail on every rank, one CUDA OOM traceback at the end),
then runs the tool in a fresh child process and reads the child's peak RSS (ru_maxrss).
Baselines from the same run: `wc -l` over the file, a Python loop reading its lines, and the
child's RSS when it only imports the tool (the interpreter and the engine modules).

    .venv/bin/python bench/bench_training_log.py [--mb 200]      (bench/run runs it too)
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20
RANKS = 8
COLOURS = ("\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[35m", "\x1b[39m")
CHILD = """
import asyncio, json, sys, time
from tools.context import ToolContext
from tools.numerics.training_log import AnalyzeTrainingLogInput, analyze_training_log
if sys.argv[2] == "run":
    started = time.perf_counter()
    r = asyncio.run(analyze_training_log(AnalyzeTrainingLogInput(path=sys.argv[1]), ToolContext.for_root(sys.argv[3])))
    print(json.dumps({"seconds": time.perf_counter() - started, "steps": r.steps,
                      "first_nonfinite_step": r.first_nonfinite_step, "rank_used": r.rank_used,
                      "spikes": r.spike_count}))
else:
    print(json.dumps({}))
"""


def write_log(path: Path, target_mb: int) -> tuple[int, int]:
    """The log; returns (metric lines, steps per rank)."""
    rng = random.Random(13)
    red, green, yellow, blue, magenta, reset = COLOURS
    steps = target_mb * 157_500 // 200
    nan_from = steps - 120
    lines = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[rank0]:[titan] 2026-11-29 10:00:00,000 - root - INFO - Starting job: llama3 8B training\n")
        for step in range(1, steps + 1):
            loss = 2.0 + 8.0 / (1 + step / 500) + rng.uniform(-0.05, 0.05)
            grad = 1.0 + rng.uniform(-0.1, 0.1)
            if step >= nan_from:
                loss = grad = float("nan")
            clock = f"10:{(step // 60) % 60:02d}:{step % 60:02d}"
            batch = []
            for rank in range(RANKS):
                batch.append(
                    f"[rank{rank}]:[titan] 2026-11-29 {clock} - root - INFO - "
                    f"{red}step: {step:2}  {green}loss: {loss:7.4f}  {yellow}grad_norm: {grad:7.4f}  "
                    f"{blue}memory: 35.12GiB(36.97%)  {magenta}mfu: 12.34%{reset}\n")
            fh.write("".join(batch))
            lines += RANKS
        fh.write("[rank3]:Traceback (most recent call last):\n"
                 '[rank3]:  File "/workspace/torchtitan/train.py", line 412, in train_step\n'
                 "[rank3]:    loss.backward()\n"
                 "[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
                 "capacity of 79.10 GiB of which 1.02 GiB is free.\n")
    return lines, steps


def child(path: Path, mode: str) -> tuple[dict, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), mode, str(path.parent)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak_kb <= before:
        raise SystemExit("run the idle child before the analysis: ru_maxrss is a maximum over children")
    return json.loads(out.stdout), elapsed, peak_kb * 1024


def main(mb: int = 200) -> dict:
    """Write the log, measure, print; the figures as a dict (bench/run reads it)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "titan_8ranks.log"
        lines, steps = write_log(log, mb)
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
