"""Start-up to tools/list: `rootcause serve` against the reference `mcp-server-git`, both over stdio.

Each server is started as its console script by the official MCP stdio client; the figure
is the wall time from spawning the process to the tools/list answer (median of N runs).
mcp-server-git is installed into a throwaway uv venv (same Python, same mcp major).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

RUNS = 7


async def _time_tools_list(command: str, args: list[str], cwd: str) -> float:
    params = StdioServerParameters(command=command, args=args, cwd=cwd, env=dict(os.environ))
    started = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        elapsed = time.perf_counter() - started
    return elapsed


def _median(command: str, args: list[str], cwd: str) -> float:
    anyio.run(_time_tools_list, command, args, cwd)  # warm-up: page cache, bytecode
    return statistics.median(anyio.run(_time_tools_list, command, args, cwd) for _ in range(RUNS))


def _install_reference(folder: Path) -> str:
    import uv

    uv_bin = uv.find_uv_bin()
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([uv_bin, "venv", "-q", "--python", sys.executable, str(folder / "venv")], check=True, env=env)
    subprocess.run([uv_bin, "pip", "install", "-q", "--python", str(folder / "venv/bin/python"), "mcp-server-git"],
                   check=True, env=env)
    return str(folder / "venv/bin/mcp-server-git")


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        reference = _install_reference(Path(tmp))
        ours = str(Path(sys.executable).parent / "rootcause")
        ref_s = _median(reference, ["--repository", str(repo)], str(repo))
        ours_s = _median(ours, ["serve", "--root", str(repo)], str(repo))
    figures = {"rootcause_tools_list_s": round(ours_s, 3), "mcp_server_git_tools_list_s": round(ref_s, 3),
               "ratio": round(ours_s / ref_s, 2)}
    print(f"start-up to tools/list (median of {RUNS}): rootcause {ours_s * 1000:.0f} ms, "
          f"mcp-server-git {ref_s * 1000:.0f} ms, ratio {figures['ratio']}x (goal <= 1.0x, and < 1 s)")
    return figures


if __name__ == "__main__":
    main()
