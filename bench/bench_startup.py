"""Start-up to tools/list: `rootcause serve` against the reference `mcp-server-git`, both over stdio.

Each server is started as its console script by the official MCP stdio client; the figure is
the wall time of the whole session: spawn the process, initialize, list the tools, exit. The
two servers run in pairs (ours, then the reference), RUNS pairs, so both see the same machine
state; medians are compared. The server's resident memory is read once the tools are listed.
mcp-server-git is installed into a throwaway uv venv (same Python). Also printed, for both servers:
the size of the tools/list result as JSON (characters) and the part of it the model reads every
session (tool names, descriptions, input schemas, annotations: everything but the output schemas).
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
MODEL_READS_GOAL = 25_000
TOOLS_LIST_GOAL = 62_000  # = tests/test_tool_list.py TOOLS_LIST_BUDGET (60,000 before issues 22-23's fields)


async def _session(command: str, args: list[str], cwd: str) -> tuple[float, float, int, int]:
    """(seconds from spawn to exit, server RSS in MiB after tools/list, tools/list JSON characters, the
    characters of it the model reads)."""
    import json

    import psutil

    params = StdioServerParameters(command=command, args=args, cwd=cwd, env=dict(os.environ))
    started = time.perf_counter()
    async with Client(params) as client:
        listed = await client.list_tools()
        servers = psutil.Process().children(recursive=True)
        rss = max((p.memory_info().rss for p in servers if p.is_running()), default=0) / 2**20
    elapsed = time.perf_counter() - started
    result = listed.model_dump(mode="json", by_alias=True, exclude_none=True)
    reads = [{key: value for key, value in tool.items() if key != "outputSchema"} for tool in result["tools"]]
    return elapsed, rss, len(json.dumps(result)), len(json.dumps({**result, "tools": reads}))


def _paired(ours: tuple[str, list[str]], reference: tuple[str, list[str]], cwd: str) -> dict[str, list]:
    for command, args in (ours, reference):
        anyio.run(_session, command, args, cwd)  # warm-up: page cache, bytecode, rootcause's schema cache
    runs: dict[str, list] = {"ours": [], "reference": []}
    for _ in range(RUNS):
        runs["ours"].append(anyio.run(_session, *ours, cwd))
        runs["reference"].append(anyio.run(_session, *reference, cwd))
    return runs


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
        runs = _paired((ours, ["serve", "--root", str(repo)]), (reference, ["--repository", str(repo)]), str(repo))
    ours_s = statistics.median(r[0] for r in runs["ours"])
    ref_s = statistics.median(r[0] for r in runs["reference"])
    ours_mib = statistics.median(r[1] for r in runs["ours"])
    ref_mib = statistics.median(r[1] for r in runs["reference"])
    figures = {"tools_list_goal": TOOLS_LIST_GOAL, "model_reads_goal": MODEL_READS_GOAL,
               "rootcause_tools_list_s": round(ours_s, 3), "mcp_server_git_tools_list_s": round(ref_s, 3),
               "ratio": round(ours_s / ref_s, 2), "rootcause_rss_mib": round(ours_mib, 1),
               "mcp_server_git_rss_mib": round(ref_mib, 1), "tools_list_chars": runs["ours"][0][2],
               "mcp_server_git_tools_list_chars": runs["reference"][0][2],
               "model_reads_chars": runs["ours"][0][3], "mcp_server_git_model_reads_chars": runs["reference"][0][3]}
    print(f"start-up, spawn to exit with tools/list ({RUNS} pairs, medians): rootcause {ours_s * 1000:.0f} ms, "
          f"mcp-server-git {ref_s * 1000:.0f} ms, ratio {figures['ratio']}x (goal <= 1.0x); "
          f"memory {ours_mib:.0f} MiB vs {ref_mib:.0f} MiB; tools/list {figures['tools_list_chars']} characters "
          f"(mcp-server-git {figures['mcp_server_git_tools_list_chars']}; goal <= {TOOLS_LIST_GOAL}), "
          f"of which the model reads {figures['model_reads_chars']} (mcp-server-git "
          f"{figures['mcp_server_git_model_reads_chars']}; goal <= {MODEL_READS_GOAL})")
    return figures


if __name__ == "__main__":
    main()
