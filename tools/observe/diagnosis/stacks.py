"""Stack dumps of hung processes (py-spy dump, `ray stack`, faulthandler) to per-process summaries.

Every format lists the innermost frame first; summaries keep innermost last. py-spy names a
file by its path below the sys.path entry (`torch/autograd/__init__.py`, `threading.py`) and
prints native frames as `poll (libc.so.6)`; faulthandler writes absolute paths, indented or
not. Of several threads, the one waiting in a collective is kept, else the main / current
thread, else one that runs the project's code. A process's call site is its innermost user
frame (not the standard library, torch, a framework or an installed package; a file under the
root always counts), from the kept thread, else the main thread, else any thread; without one,
the innermost library frame outside the standard library and torch stands in.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

import yaml
from rootcause.tools.observe.diagnosis import frames as frame_names
from rootcause.tools.observe.diagnosis.frames import display_module, resolve_in_root
from rootcause.tools.observe.diagnosis.models import Frame, StackSummary
from rootcause.tools.observe.logs.traceback_lines import FAULTHANDLER_FRAME
from rootcause.tools.vocabulary.collectives import collective_calls

COLLECTIVES = collective_calls()
_PROCESS = re.compile(r"^Process (?P<pid>\d+): (?P<cmd>.*)$|^Stack dump for \S+\s+(?P<ps>\d+)\s")
_PYSPY_THREAD = re.compile(r'^Thread (?:0x[0-9A-Fa-f]+|\d+) \((?P<state>\w+)\)(?:: "(?P<name>.*)")?\s*$')
# `func (file:line)`, a native `func (libc.so.6)`, `<module> (<string>:1)`; tab-indented in old py-spy.
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file><[^>]*>|[^()\s,][^(),]*?\.\w+(?:\.\d+)*)"
                          r"(?::(?P<line>\d+))?\)\s*$")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[[^\]]*\])? \(most recent call first\):|"
                        r"^Stack \(most recent call first\):")
_FATAL = re.compile(r"^Fatal Python error: |^Timeout \(\d+:\d\d:\d\d\)!")
# c10d's native work objects name the collective they wait in (`c10d::ProcessGroupGloo::RecvWork::wait`).
_NATIVE_WORK = re.compile(r"c10d::ProcessGroup\w*::(?:Async)?(?P<op>[A-Z][a-z]+(?:[A-Z][a-z]+)*?)Work\b")
_PLUMBING = frozenset({"torch"})
# torch's own plumbing of a collective: what calls it from inside torch (SyncBatchNorm's backward) is a place.
_COLLECTIVE_PLUMBING = ("torch.distributed", "torch.nn.parallel", "torch.autograd", "torch.utils")
_OBSERVER = re.compile(r"watchdog|pyspy_dump|dump_stacks|heartbeat_monitor", re.IGNORECASE)

_DATA = Path(__file__).parent / "data"
DUMP_LIBRARIES: frozenset[str] = frozenset(yaml.safe_load((_DATA / "dump_libraries.yaml").read_text(encoding="utf-8")))
_FRAMEWORKS = frame_names.FRAMEWORKS


@dataclass
class Thread:
    label: str
    frames: list[Frame]
    """Outermost first."""

    @property
    def main(self) -> bool:
        # Old py-spy and `ray stack` name no thread: the main one is the thread that runs the script's module.
        return ("Current thread" in self.label or "MainThread" in self.label
                or (bool(self.frames) and self.frames[0].function == "<module>"))

    @property
    def observer(self) -> bool:
        """A watchdog's thread (the one that noticed the hang and dumped the stacks), not a stuck one."""
        return any(is_observer_function(f.function) for f in self.frames)


def is_observer_function(name: str | None) -> bool:
    """A watchdog's or stack dumper's function (the thread that noticed a hang)."""
    return bool(_OBSERVER.search(name or ""))


def collective_of(frames: list[Frame]) -> str | None:
    """The innermost collective on a stack (frames outermost first)."""
    for frame in reversed(frames):
        function = frame.function or ""
        if function in COLLECTIVES and ("distributed" in frame.file or "c10d" in frame.file
                                        or function not in {"send", "recv", "reduce", "gather",
                                                            "scatter", "broadcast"}):
            return function
        native = _NATIVE_WORK.search(function)
        if native:
            return native.group("op").lower()
    return None


def _frame(line: str) -> Frame | None:
    # faulthandler's frames arrive unindented when a paste lost the leading spaces.
    f = FAULTHANDLER_FRAME.match(f" {line}" if line.startswith("File \"") else line) or _PYSPY_FRAME.match(line)
    if not f:
        return None
    number = f.group("line")
    return Frame(file=f.group("file"), line=int(number) if number else None, function=f.group("func"))


def parse_threads(text: str) -> list[Thread]:
    """Every thread of a dump with its frames; frames before the first thread header (a paste cut above it)
    are a thread of their own."""
    found: list[Thread] = []
    label: str | None = None
    frames: list[Frame] = []
    for line in text.splitlines():
        if _PYSPY_THREAD.match(line) or _FH_THREAD.match(line):
            if label is not None or frames:
                found.append(Thread(label or "(cut)", list(reversed(frames))))
            label, frames = line, []
            continue
        frame = _frame(line)
        if frame is not None and (label is not None or not found):
            frames.append(frame)
        elif line.strip() and not line.startswith((" ", "\t")) and (label is not None or frames):
            found.append(Thread(label or "(cut)", list(reversed(frames))))
            label, frames = None, []
    if label is not None or frames:
        found.append(Thread(label or "(cut)", list(reversed(frames))))
    return [t for t in found if t.frames]


def threads(text: str) -> list[tuple[str, list[Frame]]]:
    """(thread label, frames outermost first) for every thread in a py-spy or faulthandler dump."""
    return [(t.label, t.frames) for t in parse_threads(text)]


@lru_cache(maxsize=1)
def _stdlib() -> frozenset[str]:
    return frozenset(getattr(sys, "stdlib_module_names", ())) | {"threading", "queue", "multiprocessing",
                                                                  "concurrent", "asyncio", "selectors", "subprocess"}


def _top_package(path: str) -> str | None:
    """The top-level package of a short path as py-spy prints it (`ray/worker.py` -> ray)."""
    posix = path.replace("\\", "/")
    if posix.startswith(("/", "<")) or re.match(r"^[A-Za-z]:/", posix) or posix.startswith("."):
        return None
    first = posix.split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


def _native(frame: Frame) -> bool:
    return not frame.file.startswith("<") and not re.search(r"\.pyx?$", frame.file)


def is_user(frame: Frame, root: Path) -> bool:
    """The reporter's own code: not the standard library, torch, a framework, an installed package or native."""
    if resolve_in_root(frame.file, str(root)):
        return True
    if frame.file.startswith("<") or _native(frame):
        return False
    top = _top_package(frame.file)
    if top is not None:
        return top not in _stdlib() and top not in _FRAMEWORKS and top not in DUMP_LIBRARIES
    return frame_names.in_app(frame, root)


def _module(frame: Frame) -> str:
    """A library frame's dotted module (`vllm.worker.worker`, `threading`)."""
    path = frame.file.replace("\\", "/")
    m = (re.search(r"(?:site-packages|dist-packages)/(.+?)\.pyx?$", path)
         or re.search(r"/lib(?:64)?/python[\d.]+/(.+?)\.pyx?$", path))
    module = m.group(1) if m else re.sub(r"\.pyx?$", "", path) if _top_package(path) else None
    if module is None:
        parts = PurePosixPath(path).parts
        # A framework's checkout (`/ws/sglang/python/sglang/srt/x.py`): its package is the last folder so named.
        start = max((i for i, part in enumerate(parts[:-1]) if part in _FRAMEWORKS or part in DUMP_LIBRARIES),
                    default=None)
        module = "/".join(parts[start:]) if start is not None else PurePosixPath(path).stem
        module = re.sub(r"\.pyx?$", "", module)
    return re.sub(r"/__init__$", "", module).replace("/", ".")


def _function(frame: Frame) -> str:
    # Qualified names (py-spy's `Class.method`) reduce to the plain function name.
    return (frame.function or "?").rsplit(".", 1)[-1]


def site_name(frame: Frame, root: Path) -> str:
    """`stem:function` for a user frame, `package.module:function` for a library one."""
    if is_user(frame, root):
        return f"{PurePosixPath(frame.file.replace(chr(92), '/')).stem}:{_function(frame)}"
    return f"{_module(frame)}:{_function(frame)}"


def _user_frames(frames: list[Frame], root: Path) -> list[Frame]:
    return [f for f in frames if is_user(f, root)]


def _stand_ins(frames: list[Frame]) -> list[Frame]:
    """Python frames outside the standard library and torch (a framework's, an installed package's)."""
    found = []
    for frame in frames:
        top = _module(frame).split(".", 1)[0]
        if not _native(frame) and not frame.file.startswith("<") and top not in _stdlib() and top not in _PLUMBING:
            found.append(frame)
    return found


def _torch_callers(frames: list[Frame]) -> list[Frame]:
    """torch's frames outside its distributed, autograd and data plumbing: the last stand-in, for a stack that is
    torch alone (a collective issued by one of torch's own modules)."""
    return [f for f in frames if not _native(f) and _module(f).split(".", 1)[0] in _PLUMBING
            and not _module(f).startswith(_COLLECTIVE_PLUMBING)]


def _chosen(found: list[Thread], root: Path) -> Thread:
    stuck = [t for t in found if not t.observer] or found
    return (next((t for t in stuck if collective_of(t.frames)), None)
            or next((t for t in stuck if t.main), None)
            or next((t for t in stuck if _user_frames(t.frames, root)), None)
            or next((t for t in stuck if _stand_ins(t.frames)), None)
            or stuck[0])


def call_site(found: list[Thread], root: Path, count: int = 3) -> list[Frame]:
    """The process's call site (module docstring), innermost last: up to `count` user frames of the kept thread,
    the main one or any one; without any, as many library frames standing in."""
    if not found:
        return []
    chosen = _chosen(found, root)
    order = [chosen, *(t for t in found if t.main), *found]
    for pick in (lambda t: _user_frames(t.frames, root), lambda t: _stand_ins(t.frames),
                 lambda t: _torch_callers(t.frames)):
        frames = next((f for t in order if (f := pick(t))), [])
        if frames:
            return frames[-count:]
    return []


def main_frames(text: str, root: Path | None = None) -> list[Frame]:
    """The frames of the thread that matters (module docstring)."""
    found = parse_threads(text)
    return _chosen(found, Path(root or "/nonexistent")).frames if found else []


def summarise(text: str, root: Path, pid: int | None = None, rank: int | None = None,
              keep: int = 12) -> StackSummary | None:
    found = parse_threads(text)
    if not found:
        return None
    frames = _chosen(found, root).frames
    shown = [f"{display_module(f.file, root)}:{f.function} ({Path(f.file).name}"
             + (f":{f.line})" if f.line else ")") for f in frames[-keep:]]
    site = call_site(found, root)
    summary = StackSummary(pid=pid, rank=rank, frames=shown, collective=collective_of(frames),
                           user_frame=user_frame(frames, root))
    if site:
        summary.call_site = site_name(site[-1], root)
    return summary


def user_frame(frames: list[Frame], root: Path) -> str | None:
    """The innermost frame inside the root, as `file:line` relative to the root."""
    for frame in reversed(frames):
        rel = resolve_in_root(frame.file, str(root))
        if rel:
            return f"{rel}:{frame.line}" if frame.line else rel
    return None


@lru_cache(maxsize=4)
def _dumps(text: str) -> tuple[tuple[int | None, int | None, str], ...]:
    """(rank, pid, block text) of every process's dump in a log, read one stream at a time (a rank's `[rank1]:`
    lines), so interleaved dumps of several ranks stay apart; cached, as several readers ask of one log."""
    from rootcause.tools.observe.diagnosis.text import split_lines, streams

    return tuple((rank, pid, "\n".join(lines)) for (rank, _), stream in streams(split_lines(text)).items()
                 for pid, lines in _blocks([ln.text for ln in stream]))


def dump_sites(text: str, root: Path) -> list[str]:
    """Every process's call site in a text's dumps (`a:f>b:g`, innermost last), one per process, in order."""
    sites: list[str] = []
    for _, _, block in _dumps(text):
        site = call_site(parse_threads(block), root)
        if site:
            sites.append(">".join(site_name(f, root) for f in site))
    return sites


def stacks_in_log(text: str, root: Path, limit: int = 16) -> list[StackSummary]:
    """Dumps embedded in a log: py-spy `Process N:` blocks, thread blocks or faulthandler blocks, one summary
    per process, each with its rank."""
    found = [s for rank, pid, block in _dumps(text) if (s := summarise(block, root, pid=pid, rank=rank))]
    found.sort(key=lambda s: (s.rank is None, s.rank or 0))
    return found[:limit]


def has_dump(text: str) -> bool:
    """The text holds a thread dump (py-spy's or faulthandler's) with frames."""
    return any(parse_threads(block) for _, _, block in _dumps(text))


def _blocks(texts: list[str]) -> list[tuple[int | None, list[str]]]:
    """One block per process: from a process header (py-spy's `Process N:`, `ray stack`'s `Stack dump for`) or a
    fatal error line to the next; a dump without either starts at its first thread header, with the frame lines
    right above it (a paste cut inside the first thread)."""
    blocks: list[tuple[int | None, list[str]]] = []
    current: list[str] | None = None
    pid: int | None = None
    loose: list[str] = []
    for line in texts:
        p = _PROCESS.match(line)
        if p or _FATAL.match(line):
            if current:
                blocks.append((pid, current))
            pid = int(p.group("pid") or p.group("ps")) if p else None
            current, loose = [], []
            continue
        if current is None and (_FH_THREAD.match(line) or _PYSPY_THREAD.match(line)):
            current, pid, loose = loose, None, []
        if current is not None:
            current.append(line)
        elif _PYSPY_FRAME.match(line) or (line.startswith("File \"") and _frame(line)):
            loose.append(line)
        elif line.strip():
            loose = []
    if current:
        blocks.append((pid, current))
    return blocks
