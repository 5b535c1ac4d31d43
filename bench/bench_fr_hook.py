"""What the flight-recorder hook (tools/run/fr_hook/, first on every run's PYTHONPATH) costs, against the same
commands without it, measured alternately in the same run.

- plain: interpreter start + a small script, no torch (the hook must cost nothing measurable);
- torch: a non-distributed torch script (`import torch` imports torch.distributed, so the watcher thread runs);
- gloo: a 2-rank torchrun job of 400 all_reduces, timed inside the ranks (the flight recorder's buffer on);
- hang: a 2-rank gloo hang under run_process, from the idle timeout's detection to the tree killed, with the
  hook (trigger, every rank's dump) and without (ROOTCAUSE_FLIGHT_RECORDER=0); the issue's budget is +5 s.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY = sys.executable
PLAIN_RUNS = 30
TORCH_RUNS = 7
GLOO_RUNS = 3
HANG_RUNS = 3

PLAIN = "import json, re\nprint(sum(len(json.dumps({'k': i})) for i in range(2000)))\n"
TORCH = "import torch\nx = torch.randn(256, 256)\nfor _ in range(100):\n    x = x @ x.T / 256\nprint(float(x.sum()))\n"
GLOO = """\
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1024)
dist.all_reduce(t)
started = time.perf_counter()
for _ in range(400):
    dist.all_reduce(t)
if dist.get_rank() == 0:
    print(f"LOOP {time.perf_counter() - started:.4f}", flush=True)
dist.destroy_process_group()
"""
# The repository's 2-rank gloo hang (rank 1 never reaches the all_reduce), as the tests run it.
HANG = (Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "scripts" / "hang_dist.py").read_text()


def _envs(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    from rootcause.tools.run.flight_recorder import recorder_env

    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR", "TORCH_NCCL", "ROOTCAUSE_"))}
    return base, {**base, **recorder_env(base, folder)}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the command and every descendant it waited for, stdout)."""
    cpu, started = _cpu(), time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=True)
    return time.perf_counter() - started, _cpu() - cpu, done.stdout


def _wall(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    wall, _cpu_s, out = _timed(argv, env, cwd)
    return wall, out


def _paired(argv: list[str], runs: int, cwd: Path, folder: Path) -> dict[str, float]:
    """Medians of wall and CPU time (CPU is what a loaded shared machine blurs least)."""
    without, with_hook = _envs(folder)
    _timed(argv, without, cwd), _timed(argv, with_hook, cwd)  # warm-up: page cache, bytecode
    off, on = [], []
    for _ in range(runs):
        off.append(_timed(argv, without, cwd)[:2])
        on.append(_timed(argv, with_hook, cwd)[:2])
    a, b = statistics.median(x[0] for x in off), statistics.median(x[0] for x in on)
    ca, cb = statistics.median(x[1] for x in off), statistics.median(x[1] for x in on)
    return {"without_s": round(a, 4), "with_s": round(b, 4), "ratio": round(b / a, 3),
            "cpu_without_s": round(ca, 4), "cpu_with_s": round(cb, 4), "cpu_ratio": round(cb / ca, 3)}


def _gloo(cwd: Path, folder: Path) -> dict[str, float]:
    without, with_hook = _envs(folder)
    argv = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "gloo_job.py"]
    loops: dict[str, list[float]] = {"without": [], "with": []}
    walls: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(GLOO_RUNS):
        for label, env in (("without", without), ("with", with_hook)):
            wall, out = _wall(argv, env, cwd)
            walls[label].append(wall)
            loops[label].append(float(next(line for line in out.splitlines() if "LOOP" in line).split()[-1]))
    a, b = statistics.median(loops["without"]), statistics.median(loops["with"])
    return {"loop_without_s": round(a, 4), "loop_with_s": round(b, 4), "loop_ratio": round(b / a, 3),
            "wall_without_s": round(statistics.median(walls["without"]), 3),
            "wall_with_s": round(statistics.median(walls["with"]), 3)}


async def _hang_once(cwd: Path, off: bool) -> tuple[float, int]:
    from rootcause.tools.core.workspace import Workspace
    from rootcause.tools.run import RunSpec, run_process

    detected: list[float] = []

    async def progress(_done: float, _total: float | None, note: str) -> None:
        if "timeout after" in note:
            detected.append(time.monotonic())

    env = {"ROOTCAUSE_FLIGHT_RECORDER": "0"} if off else {}
    argv = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "hang_job.py"]
    record = await run_process(RunSpec(argv=argv, cwd=cwd, env=env, timeout_s=120, idle_timeout_s=5),
                               Workspace(cwd), progress)
    assert record.outcome == "hang", record.output[-2000:]
    return time.monotonic() - detected[0], record.collective_dumps


def _hang(cwd: Path) -> dict[str, object]:
    off, on, dumps = [], [], []
    for _ in range(HANG_RUNS):
        off.append(asyncio.run(_hang_once(cwd, True))[0])
        seconds, count = asyncio.run(_hang_once(cwd, False))
        on.append(seconds)
        dumps.append(count)
    a, b = statistics.median(off), statistics.median(on)
    return {"without_s": round(a, 3), "with_s": round(b, 3), "added_s": round(b - a, 3),
            "rounds_without": [round(x, 2) for x in off], "rounds_with": [round(x, 2) for x in on], "dumps": dumps}


def main() -> dict:
    work = Path(tempfile.mkdtemp(prefix="rc-bench-fr-"))
    try:
        (work / "plain.py").write_text(PLAIN)
        (work / "torch_job.py").write_text(TORCH)
        (work / "gloo_job.py").write_text(GLOO)
        (work / "hang_job.py").write_text(HANG)
        folder = work / "fr"
        figures = {
            "plain": _paired([PY, "plain.py"], PLAIN_RUNS, work, folder),
            "torch": _paired([PY, "torch_job.py"], TORCH_RUNS, work, folder),
            "gloo": _gloo(work, folder),
            "hang": _hang(work),
            "load": round(os.getloadavg()[0], 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    p, t, g, h = figures["plain"], figures["torch"], figures["gloo"], figures["hang"]
    print(f"plain python, start + small script (median of {PLAIN_RUNS}): CPU without {p['cpu_without_s']}s, "
          f"with the hook {p['cpu_with_s']}s, ratio {p['cpu_ratio']}x; wall {p['without_s']}s vs {p['with_s']}s "
          f"({p['ratio']}x)")
    print(f"torch script, not distributed (median of {TORCH_RUNS}): CPU without {t['cpu_without_s']}s, "
          f"with {t['cpu_with_s']}s, ratio {t['cpu_ratio']}x; wall {t['without_s']}s vs {t['with_s']}s "
          f"({t['ratio']}x)")
    print(f"gloo 2 ranks, 400 all_reduces (median of {GLOO_RUNS}): loop without {g['loop_without_s']}s, with "
          f"{g['loop_with_s']}s, ratio {g['loop_ratio']}x; wall {g['wall_without_s']}s vs {g['wall_with_s']}s")
    print(f"hang detected -> tree killed, 2-rank gloo (median of {HANG_RUNS}): without {h['without_s']}s, "
          f"with the dumps {h['with_s']}s (+{h['added_s']}s; rounds {h['rounds_without']} vs {h['rounds_with']}; "
          f"dumps {h['dumps']}) — budget +5 s")
    print(f"load average {figures['load']}")
    return figures


if __name__ == "__main__":
    main()
