"""Kills a server's runs when the server dies, however it dies: SIGKILL included.

The runner starts a guardian when a run starts and none is running, in a session of its own (a
signal to the server's group does not reach it) with a pipe as its standard input. The server
writes `+ RUN_ID PGID` when a run starts and `- RUN_ID` when the run's teardown is done. End of
file on the pipe means the server is gone, since only the server holds the write end (children
never inherit it): every run still registered is then killed, its process group and every process
carrying its marker variable (descendants that left the group), and the guardian exits. When its
last run is torn down the server closes the pipe itself: nothing is registered, so the guardian
just exits, and the next run starts a new one. A guardian never outlives the runs it guards.

Run as a script (`python -I guardian.py MARKER_NAME`): it imports nothing of rootcause, so a
folder named `tools` in the user's project cannot shadow it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil

ROUNDS = 20


def _read_registry(stream) -> dict[str, int]:
    runs: dict[str, int] = {}
    for raw in stream:
        words = raw.decode("ascii", "replace").split()
        if len(words) == 3 and words[0] == "+" and words[2].isdigit():
            runs[words[1]] = int(words[2])
        elif len(words) == 2 and words[0] == "-":
            runs.pop(words[1], None)
    return runs


def _marked(marker: str, run_ids: set[str]) -> list[psutil.Process]:
    own = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == own:
            continue
        try:
            if proc.environ().get(marker) in run_ids and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def kill_runs(runs: dict[str, int], marker: str) -> None:
    """SIGKILL each run's group and marked processes until none is left (a forking tree may need rounds)."""
    for _round in range(ROUNDS):
        for pgid in runs.values():
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        stray = _marked(marker, set(runs))
        if not stray:
            return
        for proc in stray:
            try:
                proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        time.sleep(0.1)


def main() -> None:
    marker = sys.argv[1]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    runs = _read_registry(sys.stdin.buffer)
    if runs:
        kill_runs(runs, marker)


if __name__ == "__main__":
    main()
