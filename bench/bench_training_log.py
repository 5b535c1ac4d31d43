"""Throughput and peak memory of analyze_training_log on a 200 MB, 8-rank torchtitan-style log, and on the
two inputs of issue 24 (point 3): a 300 MB tqdm log and a 2 GB file without a line break.

Goal (issue 13): at least 20 MB/s and under 150 MB peak RSS (before: 42 s and 716 MB).
Writes the log deterministically in a temp dir (1.26 M metric lines: 8 ranks x 157,500 steps,
`[rankN]:` prefixes, ANSI colours, a NaN tail on every rank, one CUDA OOM traceback at the end),
then runs the tool in a fresh child process that reports its own peak RSS (VmHWM; bench/titan_log.py).
Baselines from the same run: `wc -l` over the file, a Python loop reading its lines, and the
child's RSS when it only imports the tool (the interpreter and the engine modules).

Goal (issue 24): under 150 MB peak RSS on a tqdm log of 4,000,000 updates redrawn with carriage returns
(one 290 MB line; before: 880 MB and only its first 1,443 steps read, no note) with every step read and
the log's last loss reported, and on 2 GB of metric text without a line break or carriage return (before:
4.27 GB) with the cut stated in notes. Baseline from the same run: a child that reads the tqdm file whole.

    .venv/bin/python bench/bench_training_log.py [--mb 200] [--no-limits]      (bench/run runs it too)
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
           "rank_used": r.rank_used, "spikes": r.spike_count, "notes": r.notes, "lines": r.lines,
           "loss_count": r.series["loss"].count, "last_loss": r.series["loss"].last}
elif sys.argv[2] == "read":
    with open(sys.argv[1], "rb") as fh:
        out = {"bytes": len(fh.read())}
"""
TQDM_UPDATES = 4_000_000
FLAT_BYTES = 2 << 30


def write_tqdm(path: Path, updates: int, seed: int = 7) -> tuple[float, int]:
    """A tqdm bar redrawn `updates` times with carriage returns, one line break at the end; (last loss, steps)."""
    import random

    rng = random.Random(seed)
    loss = 0.0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("Training: starting\n")
        parts = []
        for n in range(1, updates + 1):
            loss = 2.0 + 8.0 / (1 + n / 50_000) + rng.uniform(-0.05, 0.05)
            pct = n * 100 // updates
            parts.append(f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {n}/{updates} [01:02<03:04, 1234.56it/s, "
                         f"loss={loss:.4f}]")
            if len(parts) == 10_000:
                fh.write("".join(parts))
                parts.clear()
        fh.write("".join(parts) + "\n")
    return round(loss, 4), updates


def write_flat(path: Path, size: int) -> None:
    """`size` bytes of `step: N loss: X ` pairs without a line break or carriage return."""
    block = "".join(f"step: {i} loss: {2 + 1 / (i + 1):.4f} " for i in range(20_000)).encode()
    with open(path, "wb") as fh:
        for _ in range(size // len(block)):
            fh.write(block)
        fh.write(block[:size % len(block)])


def limits() -> dict:
    """Issue 24's two inputs: peak RSS, steps read, the last loss and the notes."""
    with tempfile.TemporaryDirectory() as tmp:
        tqdm = Path(tmp) / "tqdm.log"
        last, updates = write_tqdm(tqdm, TQDM_UPDATES)
        tqdm_mb = tqdm.stat().st_size / MB
        _, _, plain_rss = child(tqdm, "read")
        got, _, tqdm_rss = child(tqdm, "run")
        tqdm.unlink()
        flat = Path(tmp) / "flat.log"
        write_flat(flat, FLAT_BYTES)
        flat_got, _, flat_rss = child(flat, "run")
    every = got["steps"] == updates and got["loss_count"] == updates and got["last_loss"] == last
    print(f"tqdm log: {tqdm_mb:.0f} MB, {updates:,} updates on one line; a plain read of it: "
          f"{plain_rss / MB:.0f} MB peak RSS")
    print(f"analyze_training_log: {tqdm_rss / MB:.0f} MB peak RSS (goal < 150; before: 880 MB), "
          f"{tqdm_rss / plain_rss:.2f}x the plain read; {got['steps']:,} steps read (before: 1,443), last loss "
          f"{got['last_loss']} (the log's: {last}), {got['seconds']:.1f} s ({tqdm_mb / got['seconds']:.1f} MB/s); "
          f"notes: {got['notes'] or 'none'}")
    print(f"2 GB without a line break: {flat_rss / MB:.0f} MB peak RSS (goal < 150; before: 4.27 GB), "
          f"{flat_got['seconds']:.1f} s; notes: {flat_got['notes']}")
    ok = every and tqdm_rss < 150 * MB and flat_rss < 150 * MB and bool(flat_got["notes"])
    return {"tqdm_mb": round(tqdm_mb), "tqdm_updates": updates, "tqdm_steps": got["steps"],
            "tqdm_last_loss": got["last_loss"], "tqdm_log_last_loss": last, "tqdm_peak_rss_mb": round(tqdm_rss / MB),
            "tqdm_seconds": round(got["seconds"], 1), "plain_read_rss_mb": round(plain_rss / MB),
            "flat_gb": FLAT_BYTES / (1 << 30), "flat_peak_rss_mb": round(flat_rss / MB),
            "flat_seconds": round(flat_got["seconds"], 1), "flat_note": (flat_got["notes"] or [""])[0],
            "limits_met": ok}


def child(path: Path, mode: str) -> tuple[dict, float, float]:
    started = time.perf_counter()
    out = run_child(CHILD, str(path), mode, str(path.parent))
    return out, time.perf_counter() - started, out["rss_mb"] * MB


def main(mb: int = 200, with_limits: bool = True) -> dict:
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
    figures = {"log_mb": round(size / MB), "metric_lines": lines, "seconds": round(result["seconds"], 2),
               "mb_per_s": round(mbps, 1), "peak_rss_mb": round(peak / MB), "idle_rss_mb": round(idle_rss / MB),
               "python_line_loop_mb_per_s": round(size / MB / pyread), "wc_l_mb_per_s": round(size / MB / wc)}
    if with_limits:
        figures.update(limits())
        ok = ok and figures["limits_met"]
    print("goals met" if ok else "GOALS NOT MET")
    return {**figures, "goals_met": ok}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200, help="log size (default 200 MB: 1.26 M metric lines)")
    parser.add_argument("--no-limits", action="store_true", help="skip the 300 MB tqdm log and the 2 GB file")
    args = parser.parse_args()
    raise SystemExit(0 if main(args.mb, not args.no_limits)["goals_met"] else 1)
