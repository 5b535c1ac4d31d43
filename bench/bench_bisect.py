"""bisect_env against the manual command sequence it replaces, and the builds of a version bisect.

Project: a uv project pinning click 8.1.8 whose reproducer breaks on click 8.2.0 (CliRunner's
mix_stderr). Baseline: the seed's manual sequence, run in the same script with the same warm uv
cache — uv venv A; VIRTUAL_ENV=A uv sync --active; uv venv B; sync B; uv pip install
click==8.2.0 into B; freeze both; diff; run the reproducer in each — one command after the other,
as an agent types them. Ours: bisect_env warm (its environments cached under .rootcause/envs/)
and cold (nothing cached: both environments built concurrently). Goal: warm <= 0.6x manual.
Then bisect_versions click 8.1.0..8.3.0: environments built against ceil(log2(range)) + 2.

Second project (tests/fixtures/bisect/entrypoints): a packaged project whose console script calls
importlib_metadata.entry_points()["console_scripts"] (removed in importlib-metadata 5.0). Both
environments must hold the project itself; the manual sequence does the same with `uv sync
--frozen` (which installs the project), and bisect_versions 4.8.0..5.0.0 counts its builds.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rootcause.tools.core.context import ToolContext  # noqa: E402
from rootcause.tools.engines.bisect_env import BisectEnvInput, bisect_env  # noqa: E402
from rootcause.tools.engines.bisect_versions import BisectVersionsInput, bisect_versions  # noqa: E402
from rootcause.tools.run.interpreters import parse_freeze, uv_binary  # noqa: E402

RUNS = 5
UV_ENV = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}


def _project(folder: Path, fixture: str = "clickproj") -> Path:
    root = folder / fixture
    shutil.copytree(REPO / "tests" / "fixtures" / "bisect" / fixture, root)
    subprocess.run([uv_binary(), "lock", "-q", "--python", sys.executable], cwd=root, env=UV_ENV, check=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def manual(root: Path, work: Path, target: tuple[str, str] = ("click", "8.2.0"),
           program: tuple[str, ...] = ("python", "repro.py")) -> tuple[float, bool]:
    """The seed's manual sequence; True when it saw the outcome flip. `program[0]` runs from each venv's bin/
    (uv sync installs a packaged project itself, so its console scripts are there)."""
    uv = uv_binary()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()

    def sh(*argv: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=root, env=env or UV_ENV, check=check, capture_output=True, text=True)

    a, b = work / "A", work / "B"
    sh(uv, "venv", "-q", "--python", sys.executable, str(a))
    sh(uv, "sync", "-q", "--frozen", "--active", env={**UV_ENV, "VIRTUAL_ENV": str(a)})
    sh(uv, "venv", "-q", "--python", sys.executable, str(b))
    sh(uv, "sync", "-q", "--frozen", "--active", env={**UV_ENV, "VIRTUAL_ENV": str(b)})
    sh(uv, "pip", "install", "-q", "--python", str(b / "bin" / "python"), f"{target[0]}=={target[1]}")
    fa = parse_freeze(sh(uv, "pip", "freeze", "--python", str(a / "bin" / "python")).stdout)
    fb = parse_freeze(sh(uv, "pip", "freeze", "--python", str(b / "bin" / "python")).stdout)
    diff = {k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)}
    ra = sh(str(a / "bin" / program[0]), *program[1:], check=False)
    rb = sh(str(b / "bin" / program[0]), *program[1:], check=False)
    elapsed = time.perf_counter() - started
    return elapsed, diff == {target[0]} and ra.returncode == 0 and rb.returncode != 0


async def ours(root: Path, keep: bool = True) -> tuple[float, bool]:
    started = time.perf_counter()
    result = await bisect_env(BisectEnvInput(package="click", version="8.2.0", command="python repro.py", keep=keep),
                              ToolContext.for_root(root))
    return time.perf_counter() - started, result.verdict == "version_flips_outcome"


EP_TARGET, EP_PROGRAM = ("importlib-metadata", "5.0.0"), ("epproj-scripts",)


async def ours_ep(root: Path) -> tuple[float, bool]:
    started = time.perf_counter()
    result = await bisect_env(BisectEnvInput(package="importlib-metadata", version="5.0.0", command="epproj-scripts",
                                             expect="console_scripts"), ToolContext.for_root(root))
    ok = result.verdict == "version_flips_outcome" and result.env_a.project is not None
    return time.perf_counter() - started, ok


def entry_points_case(folder: Path) -> dict[str, float]:
    root = _project(folder, "entrypoints")
    manual(root, folder / "manual-ep", EP_TARGET, EP_PROGRAM)
    asyncio.run(ours_ep(root))
    manual_times, warm, cold = [], [], []
    for _ in range(RUNS):
        elapsed, ok = manual(root, folder / "manual-ep", EP_TARGET, EP_PROGRAM)
        assert ok, "the manual sequence did not see the flip"
        manual_times.append(elapsed)
        elapsed, ok = asyncio.run(ours_ep(root))
        assert ok, "bisect_env did not see the flip with the project installed"
        warm.append(elapsed)
    for _ in range(RUNS):
        shutil.rmtree(root / ".rootcause" / "envs", ignore_errors=True)
        cold.append(asyncio.run(ours_ep(root))[0])
    started = time.perf_counter()
    versions = asyncio.run(bisect_versions(BisectVersionsInput(
        package="importlib-metadata", good="4.8.0", bad="5.0.0", command="epproj-scripts", expect="console_scripts",
        keep=False), ToolContext.for_root(root)))
    versions_s = time.perf_counter() - started
    m, w, c = statistics.median(manual_times), statistics.median(warm), statistics.median(cold)
    bound = math.ceil(math.log2(len(versions.candidates) - 1)) + 2
    print(f"entry points project, manual sequence with the project installed, median of {RUNS}: {m:.3f}s")
    print(f"bisect_env warm: {w:.3f}s ratio {w / m:.2f}x; cold: {c:.3f}s ratio {c / m:.2f}x")
    print(f"bisect_versions importlib-metadata 4.8.0..5.0.0: {versions.status} first_bad {versions.first_bad}, "
          f"{versions.builds} builds for {len(versions.candidates)} candidates (bound {bound}), {versions_s:.2f}s")
    return {"ep_manual_s": round(m, 3), "ep_warm_s": round(w, 3), "ep_cold_s": round(c, 3),
            "ep_warm_ratio": round(w / m, 3), "ep_cold_ratio": round(c / m, 3),
            "ep_versions_first_bad": versions.first_bad, "ep_versions_candidates": len(versions.candidates),
            "ep_versions_builds": versions.builds, "ep_versions_builds_bound": bound,
            "ep_versions_s": round(versions_s, 3)}


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        folder = Path(tmp)
        root = _project(folder)
        manual(root, folder / "manual")  # warm uv's cache for every package involved
        asyncio.run(ours(root))
        manual_times, ours_warm, ours_cold = [], [], []
        for _ in range(RUNS):
            elapsed, ok = manual(root, folder / "manual")
            assert ok, "the manual sequence did not see the flip"
            manual_times.append(elapsed)
            elapsed, ok = asyncio.run(ours(root))
            assert ok, "bisect_env did not see the flip"
            ours_warm.append(elapsed)
        for _ in range(RUNS):
            shutil.rmtree(root / ".rootcause" / "envs", ignore_errors=True)
            ours_cold.append(asyncio.run(ours(root))[0])
        started = time.perf_counter()
        versions = asyncio.run(bisect_versions(BisectVersionsInput(package="click", good="8.1.0", bad="8.3.0",
                                                                   command="python repro.py", keep=False),
                                               ToolContext.for_root(root)))
        versions_s = time.perf_counter() - started
        ep = entry_points_case(folder)
    m, w, c = statistics.median(manual_times), statistics.median(ours_warm), statistics.median(ours_cold)
    bound = math.ceil(math.log2(len(versions.candidates) - 1)) + 2
    figures = {
        "manual_s": round(m, 3), "ours_warm_s": round(w, 3), "ours_cold_s": round(c, 3),
        "warm_ratio": round(w / m, 3), "cold_ratio": round(c / m, 3),
        "versions_first_bad": versions.first_bad, "versions_candidates": len(versions.candidates),
        "versions_builds": versions.builds, "versions_builds_bound": bound, "versions_s": round(versions_s, 3),
    }
    print(f"manual sequence (warm uv cache), median of {RUNS}: {m:.3f}s")
    print(f"bisect_env warm (cached envs):   {w:.3f}s  ratio {w / m:.2f}x (goal <= 0.6x)")
    print(f"bisect_env cold (no env cache):  {c:.3f}s  ratio {c / m:.2f}x")
    print(f"bisect_versions click 8.1.0..8.3.0: first_bad {versions.first_bad}, {versions.builds} builds for "
          f"{len(versions.candidates)} candidates (ceil(log2(range)) + 2 = {bound}), {versions_s:.2f}s")
    figures.update(ep)
    return figures


if __name__ == "__main__":
    main()
