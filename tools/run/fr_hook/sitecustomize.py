"""rootcause's flight-recorder hook: first on a run's PYTHONPATH, so every Python process of the run loads it.

It never imports torch and costs an interpreter nothing but this file unless ROOTCAUSE_FR_DIR is set and the
process imports torch.distributed (`import torch` does): a meta-path finder notices that import and starts one
daemon thread, which looks for a process group once a second. Once there is one, it writes
`ready.<rank>.<host>.<pid>` into the dump folder, waits for rootcause's `trigger` file (a stat every 0.2 s)
and writes the rank's flight recorder (`torch._C._distributed_c10d._dump_fr_trace()`, the pickled bytes) to
`rank<R>.pkl`, atomically. Forked children (DataLoader workers) have no thread; spawned ones load this file
again and find no process group.

Any other sitecustomize on the path still runs: this one imports it after itself.
Stdlib only, and no rootcause import: it runs in the user's interpreter, whatever its version.
"""

import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_FOLDER = os.environ.get("ROOTCAUSE_FR_DIR", "")
_POLL_S = 0.2
_IDLE_POLL_S = 1.0
TRIGGER = "trigger"


def _chain() -> None:
    """Run the next sitecustomize on sys.path (the venv's, the distribution's), as if this one were absent."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec

    module = module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules["sitecustomize"] = ours  # site.py would report and go on; so do we
        raise


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
        self.trigger = os.path.join(_FOLDER, TRIGGER)
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
                    os.makedirs(_FOLDER, exist_ok=True)
                    _write(os.path.join(_FOLDER, f"ready.{rank}.{host}.{os.getpid()}"), b"")
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
        _write(os.path.join(_FOLDER, f"rank{rank}.pkl"), data)
    except Exception as exc:
        _write(os.path.join(_FOLDER, f"rank{rank}.error"), f"{type(exc).__name__}: {exc}".encode())


class _DistributedImported:
    """A meta-path finder that finds nothing: it only starts the watcher when torch.distributed is imported."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "torch.distributed":
            try:
                sys.meta_path.remove(cls)
            except ValueError:
                pass
            import threading

            threading.Thread(target=_Watch().scheduler.run, name="rootcause-flight-recorder", daemon=True).start()
        return None


if _FOLDER:
    sys.meta_path.insert(0, _DistributedImported)
_chain()
