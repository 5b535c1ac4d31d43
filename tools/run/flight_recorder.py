"""PyTorch's flight recorder in a run: where every rank's dump goes (the run's folder, DUMP_FOLDER).

Every run's child gets `fr_hook/` first on PYTHONPATH (its sitecustomize.py chains to any other one),
ROOTCAUSE_FR_DIR naming the run's dump folder, and the flight recorder's buffer turned on, unless the
user set it. A process that imports torch.distributed and creates a process group announces itself
with a `ready.<rank>.<host>.<pid>` file; on a hang `dump_on_hang` writes the `trigger` file and waits
(at most DUMP_WITHIN_S) until every announced rank that is still alive has written `rank<R>.pkl`.
"""

from __future__ import annotations

import asyncio
import py_compile
import shutil
import socket
import time
from functools import lru_cache
from pathlib import Path

import psutil

DUMP_FOLDER = "flight_recorder"
"""Under a run's folder (`.rootcause/runs/<run_id>/flight_recorder/`): one file per rank and process group."""
HOOK_DIR = Path(__file__).resolve().parent / "fr_hook"
HOOK_VAR = "ROOTCAUSE_FR_HOOK"
"""Another folder holding the hook (a Slurm run's copy in its shared run folder, which every node sees)."""
FOLDER_VAR = "ROOTCAUSE_FR_DIR"
OFF_VAR = "ROOTCAUSE_FLIGHT_RECORDER"
"""`ROOTCAUSE_FLIGHT_RECORDER=0` in a run's env leaves the child's environment as it was."""
TRIGGER = "trigger"
DUMP_WITHIN_S = 3.0
BUFFER_ENTRIES = "2000"
# The first name of each pair is torch's current one; a user who set either keeps theirs.
_DEFAULTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"), BUFFER_ENTRIES),
    (("TORCH_NCCL_DUMP_ON_TIMEOUT",), "1"),
)
_NCCL_FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
NCCL_FILE_PREFIX = "nccl_trace_rank_"


@lru_cache(maxsize=8)
def _compiled(folder: Path) -> None:
    """The hook's bytecode next to it (a child with PYTHONDONTWRITEBYTECODE, or a read-only install, would
    otherwise compile it in every interpreter: ~1.4 ms against ~0.2 ms, measured); where unwritable, nothing."""
    for source in folder.glob("*.py"):
        try:
            py_compile.compile(str(source), doraise=True)
        except (OSError, py_compile.PyCompileError):
            return


def recorder_env(env: dict[str, str], run_folder: Path) -> dict[str, str]:
    """The variables a run's child gets on top of env (the server's environment and the run's own)."""
    if env.get(OFF_VAR, "").strip().lower() in {"0", "false", "no", "off"}:
        return {}
    folder = run_folder / DUMP_FOLDER
    hook = env.get(HOOK_VAR) or str(HOOK_DIR)
    _compiled(Path(hook))
    extra = {FOLDER_VAR: str(folder),
             "PYTHONPATH": hook + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else "")}
    for names, value in _DEFAULTS:
        if not any(env.get(name) for name in names):
            extra[names[0]] = value
    if not any(env.get(name) for name in _NCCL_FILE_VARS):
        # NCCL's own dump on a watchdog timeout: <prefix><rank>, the same pickle as rank<R>.pkl.
        for name in _NCCL_FILE_VARS:
            extra[name] = str(folder / NCCL_FILE_PREFIX)
    return extra


def copy_hook(run_folder: Path) -> dict[str, str]:
    """The hook copied into a run's folder (on a cluster, the file system the nodes share): the env naming it."""
    target = run_folder / HOOK_DIR.name
    target.mkdir(exist_ok=True)
    for source in HOOK_DIR.glob("*.py"):
        shutil.copyfile(source, target / source.name)
    return {HOOK_VAR: str(target)}


def _host() -> str:
    return socket.gethostname().split(".")[0] or "localhost"


def _alive(host: str, pid: int, here: str) -> bool:
    """A rank on another node is taken as alive (its dump, or the deadline, ends the wait)."""
    if host != here:
        return True
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def registered(folder: Path) -> dict[int, tuple[str, int]]:
    """Rank -> (host, pid) of every process that announced a process group."""
    found: dict[int, tuple[str, int]] = {}
    if not folder.is_dir():
        return found
    for entry in folder.glob("ready.*"):
        _, rank, *host, pid = entry.name.split(".")
        if rank.lstrip("-").isdigit() and pid.isdigit():
            found[int(rank)] = (".".join(host), int(pid))
    return found


def dumped(folder: Path) -> list[Path]:
    """The rank dumps in a run's dump folder (the hook's and NCCL's own), by name."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir()
                  if (p.name.startswith("rank") and p.suffix == ".pkl") or p.name.startswith(NCCL_FILE_PREFIX))


async def dump_on_hang(run_folder: Path, within_s: float = DUMP_WITHIN_S) -> int:
    """Ask every rank of a hung run to dump its flight recorder; the number of dumps once all are in or time is up."""
    folder = run_folder / DUMP_FOLDER
    if not registered(folder):
        return 0
    (folder / TRIGGER).write_bytes(b"")
    here = _host()
    deadline = time.monotonic() + within_s
    while True:
        waiting = [rank for rank, (host, pid) in registered(folder).items()
                   if not (folder / f"rank{rank}.pkl").exists() and not (folder / f"rank{rank}.error").exists()
                   and _alive(host, pid, here)]
        if not waiting or time.monotonic() >= deadline:
            return len(dumped(folder))
        await asyncio.sleep(0.05)


def count_dumps(run_folder: Path) -> int:
    return len(dumped(run_folder / DUMP_FOLDER))
