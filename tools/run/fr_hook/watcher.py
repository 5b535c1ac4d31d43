"""The flight-recorder watcher thread of rootcause's hook (sitecustomize.py loads this file by its path once the
process imports torch.distributed; it is no module on sys.path). Stdlib only: it runs in the user's interpreter.

Once the process has a process group it writes `ready.<rank>.<host>.<pid>` into the dump folder, waits for
rootcause's `trigger` file (a stat every 0.2 s) and writes the rank's flight recorder
(`torch._C._distributed_c10d._dump_fr_trace()`, the pickled bytes) to `rank<R>.pkl`, atomically.
"""

import os
import sys
import threading

FOLDER = os.environ.get("ROOTCAUSE_FR_DIR", "")
_POLL_S = 0.2
_IDLE_POLL_S = 1.0
TRIGGER = "trigger"


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _rank(dist) -> int:
    try:
        return int(dist.get_rank())
    except Exception:
        value = os.environ.get("RANK", "")
        return int(value) if value.isdigit() else -1


class _Watch:
    """Wait for a process group, announce the rank, wait for the trigger, dump once.

    Each look is one event of a `sched` scheduler the thread runs: between looks the thread stands in
    sched.py and threading.py only, so a stack dump of a hung rank never shows a frame of this file.
    """

    def __init__(self) -> None:
        import sched
        import time

        self.scheduler = sched.scheduler(time.monotonic, time.sleep)
        self.trigger = os.path.join(FOLDER, TRIGGER)
        self.rank = None
        self.scheduler.enter(0, 0, self.look)

    def look(self) -> None:
        if self.rank is None:
            dist = sys.modules.get("torch.distributed")
            initialized = getattr(dist, "is_initialized", None)
            try:
                if initialized is not None and initialized():
                    import socket

                    rank = _rank(dist)
                    host = socket.gethostname().split(".")[0] or "localhost"
                    os.makedirs(FOLDER, exist_ok=True)
                    _write(os.path.join(FOLDER, f"ready.{rank}.{host}.{os.getpid()}"), b"")
                    self.rank = rank
            except Exception:
                self.rank = None
        if self.rank is not None and os.path.exists(self.trigger):
            _dump(self.rank)
            return
        # No process group, no collective to hang in: look once a second until there is one.
        self.scheduler.enter(_POLL_S if self.rank is not None else _IDLE_POLL_S, 0, self.look)


def _dump(rank: int) -> None:
    try:
        import torch

        # Each entry's Python frames cost torch._dynamo's import on the first call (1.5-5 s on a loaded
        # machine, measured): taken only when that import is already paid; the stack dumps give call sites.
        data = torch._C._distributed_c10d._dump_fr_trace(includeStackTraces="torch._dynamo" in sys.modules)
        _write(os.path.join(FOLDER, f"rank{rank}.pkl"), data)
    except Exception as exc:
        _write(os.path.join(FOLDER, f"rank{rank}.error"), f"{type(exc).__name__}: {exc}".encode())


def start() -> None:
    threading.Thread(target=_Watch().scheduler.run, name="rootcause-flight-recorder", daemon=True).start()
