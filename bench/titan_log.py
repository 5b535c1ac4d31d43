"""What bench_logs.py and bench_training_log.py share: the torchtitan-style log and a measured child.

The log: 8 ranks of `[rankN]:[titan] <time> - root - INFO - step: ...  loss: ...` lines with ANSI
colours, written deterministically, one CUDA OOM traceback on rank 3 at the end. The child: a fresh
interpreter that runs a snippet and reports its own peak RSS as VmHWM from /proc/self/status, which
starts anew at exec (ru_maxrss does not: Linux carries the parent's high-water mark across
fork+exec, so a child of a large bench/run process would report the parent's size).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20
RANKS = 8
COLOURS = ("\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[35m", "\x1b[39m")
OOM_TAIL = ("[rank3]:Traceback (most recent call last):\n"
            '[rank3]:  File "/workspace/torchtitan/train.py", line 412, in train_step\n'
            "[rank3]:    loss.backward()\n"
            "[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
            "capacity of 79.10 GiB of which 1.02 GiB is free.\n")
PEAK_RSS = """
def _peak_rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
"""


def write_log(path: Path, steps: int, seed: int, *, grad_norm: bool, nan_tail: int = 0) -> int:
    """`steps` steps of every rank, the last `nan_tail` of them NaN, then the OOM; returns the metric lines."""
    rng = random.Random(seed)
    red, green, yellow, blue, magenta, reset = COLOURS
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[rank0]:[titan] 2026-11-29 10:00:00,000 - root - INFO - Starting job: llama3 8B training\n")
        for step in range(1, steps + 1):
            loss = 2.0 + 8.0 / (1 + step / 500) + rng.uniform(-0.05, 0.05)
            grad = 1.0 + rng.uniform(-0.1, 0.1)
            if step > steps - nan_tail:
                loss = grad = float("nan")
            stamp = f"2026-11-29 {10 + step // 3600 % 10:02d}:{step // 60 % 60:02d}:{step % 60:02d}"
            middle = f"{yellow}grad_norm: {grad:7.4f}  " if grad_norm else f"{yellow}memory: 35.12GiB(36.97%)  "
            fh.write("".join(
                f"[rank{rank}]:[titan] {stamp},{rank:03d} - root - INFO - {red}step: {step:6d}  {green}loss: "
                f"{loss:7.4f}  {middle}{blue}tps: 7,234  {magenta}mfu: 12.34%{reset}\n" for rank in range(RANKS)))
        fh.write(OOM_TAIL)
    return steps * RANKS


def steps_for(target_mb: int) -> int:
    """Steps that make a log of about target_mb (one step of 8 ranks is about 1.33 KB)."""
    return target_mb * 157_500 // 200


def run_child(snippet: str, *args: str) -> dict:
    """Run `snippet` (which sets a dict `out`) in a fresh interpreter; `out` plus its peak RSS in MB."""
    code = PEAK_RSS + snippet + "\nout['rss_mb'] = _peak_rss_mb()\nimport json as _j\nprint(_j.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
