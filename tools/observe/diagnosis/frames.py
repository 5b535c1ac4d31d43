"""Which frames belong to the project, and how a frame is named in signatures and summaries.

A frame is in the project when its file resolves inside the root; a path from another
machine counts when a suffix of it exists under the root (the same checkout elsewhere), and
an installed copy counts when its module belongs to one of the root's packages
(`site-packages/mypkg/model.py` for a root holding `mypkg/` or `src/mypkg/`): `in_project`
and a diagnosis' `location` mean this.

A signature's call site (call_site) is wider, the frames in-app (DESIGN, "Signature (v3)"):
the reporter's own code on whatever machine, i.e. any frame that is not the standard library,
an install (site-packages, conda, pyenv), generated code, or a framework's package
(data/frameworks.yaml) checked out from source; frames in the project are in-app always. It
names frames `stem:function`, without directories or line numbers, so one checkout's frames
read the same from any machine.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path, PurePosixPath

import yaml
from rootcause.tools.observe.diagnosis.models import Frame

FRAMEWORKS: frozenset[str] = frozenset(
    yaml.safe_load((Path(__file__).parent / "data" / "frameworks.yaml").read_text(encoding="utf-8")))

_LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|/lib64/python\d|\\lib\\|<frozen |^<|"
                      r"/usr/lib/|/usr/local/lib/|/opt/conda/lib/|/\.pyenv/versions/|importlib|"
                      r"/torch/|/_pytest/|/pluggy/|/runpy\.py$|/threading\.py$")


def is_library(path: str) -> bool:
    return bool(_LIBRARY.search(path.replace("\\", "/")))


_INSTALLED = re.compile(r"(?:site-packages|dist-packages)/(?P<module>[\w.\-]+(?:/[\w.\-]+)*\.py)$")


@lru_cache(maxsize=256)
def root_packages(root: str) -> dict[str, str]:
    """The import packages a root holds, each with its folder relative to the root (`src/` layouts too)."""
    base = Path(root)
    found: dict[str, str] = {}
    for parent in (base, base / "src"):
        try:
            children = list(parent.iterdir()) if parent.is_dir() else []
        except OSError:
            continue
        for child in children:
            if child.is_dir() and (child / "__init__.py").is_file() and child.name not in found:
                found[child.name] = child.relative_to(base).as_posix()
    return found


def _installed_in_root(path: str, root: str) -> str | None:
    m = _INSTALLED.search(path.replace("\\", "/"))
    if not m:
        return None
    package, _, rest = m.group("module").partition("/")
    folder = root_packages(root).get(package)
    return f"{folder}/{rest}" if folder and rest else None


@lru_cache(maxsize=4096)
def resolve_in_root(path: str, root: str) -> str | None:
    """The path relative to root when the file is the project's (by location, by suffix, or installed)."""
    if not path or path.startswith("<"):
        return None
    if is_library(path):
        return _installed_in_root(path, root)
    base = Path(root)
    posix = PurePosixPath(path.replace("\\", "/"))
    if not posix.is_absolute():
        candidate = base / posix
        return posix.as_posix() if candidate.is_file() else None
    try:
        return PurePosixPath(path).relative_to(base.as_posix()).as_posix()
    except ValueError:
        pass
    parts = posix.parts[1:]
    for k in range(len(parts)):
        suffix = PurePosixPath(*parts[k:])
        if (base / suffix).is_file():
            return suffix.as_posix()
    return None


def forget() -> None:
    resolve_in_root.cache_clear()
    root_packages.cache_clear()


def mark(frames: list[Frame], root: Path) -> list[Frame]:
    for frame in frames:
        frame.in_project = resolve_in_root(frame.file, str(root)) is not None
    return frames


def display_module(path: str, root: Path) -> str:
    """Dotted module for display: project-relative, or from site-packages on, or the file stem."""
    rel = resolve_in_root(path, str(root))
    norm = path.replace("\\", "/")
    if rel is None:
        m = re.search(r"(?:site-packages|dist-packages)/(.+?)\.py$", norm)
        rel = m.group(1) if m else PurePosixPath(norm).stem
    rel = re.sub(r"\.py$", "", rel)
    rel = re.sub(r"^src/", "", rel)
    return rel.replace("/", ".")


# Comprehension frames vanish with Python 3.12's inlining (PEP 709): not part of an identity.
_ANONYMOUS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>"})


_LIBRARY_MODULES = (re.compile(r"(?:site-packages|dist-packages)/(?P<module>.+?)\.py$"),
                    re.compile(r"/lib(?:64)?/python[\d.]+/(?P<module>.+?)\.py$"))
_FROZEN = re.compile(r"^<frozen (?P<module>[\w.]+)>$")
_PACKAGE_NAME = re.compile(r"[a-z_][a-z0-9_]*")
# A Windows Python's own library (`...\Python310\Lib\threading.py`, `Anaconda3\lib\...`), slashes turned forward.
_WINDOWS_STDLIB = re.compile(r"/python\d{2,3}/lib/|/(?:ana|mini)conda3/(?:envs/[^/]+/)?lib/", re.IGNORECASE)


def _framework_module(path: str) -> str | None:
    """`megatron.core.pipeline_parallel.schedules` for a file inside a framework's package, wherever it lies."""
    parts = PurePosixPath(path).parts[:-1]
    for i, part in enumerate(parts):
        # A top-level package only: a checkout (`Megatron-LM/megatron/`, `transformers/src/transformers/`), not a
        # project's own subpackage of that name (`labml_nn/transformers/`).
        if part in FRAMEWORKS and (i == 0 or parts[i - 1] in (part, "src", "lib")
                                   or not _PACKAGE_NAME.fullmatch(parts[i - 1])):
            return ".".join([*parts[i:], PurePosixPath(path).stem])
    return None


def in_app(frame: Frame, root: Path) -> bool:
    """The reporter's own code, from this machine or another (module docstring)."""
    if frame.in_project:
        return True
    path = frame.file.replace("\\", "/")
    if not path or path.startswith("<"):
        return path.startswith("<ipython-input")
    return not is_library(path) and not _WINDOWS_STDLIB.search(path) and _framework_module(path) is None


def _function(frame: Frame) -> str:
    # Qualified names (py-spy, IPython: `Class.method`, `f.<locals>.g`) reduce to the plain function name.
    return (frame.function or "?").rsplit(".", 1)[-1]


def library_name(frame: Frame) -> str:
    """A library frame as `package.module:function` (`torch.nn.functional:linear`, `threading:wait`)."""
    path = frame.file.replace("\\", "/")
    m = next((m for p in _LIBRARY_MODULES if (m := p.search(path))), None) or _FROZEN.match(path)
    module = m.group("module").replace("/", ".") if m else _framework_module(path) or PurePosixPath(path).stem
    return f"{re.sub(r'[.]__init__$', '', module)}:{_function(frame)}"


def call_site(frames: list[Frame], root: Path, count: int = 3) -> list[str]:
    """Where a failure happens, innermost last: the innermost `count` in-app frames as `stem:function`; with no
    in-app frame, the innermost library frames as `package.module:function`."""
    named = [f for f in frames if (f.function or "") not in _ANONYMOUS]
    mine = [f for f in named if in_app(f, root)]
    names: list[str] = []
    for frame in reversed(mine or named):
        name = (f"{PurePosixPath(frame.file.replace(chr(92), '/')).stem}:{_function(frame)}" if mine
                else library_name(frame))
        if name not in names:
            names.append(name)
        if len(names) == count:
            break
    return list(reversed(names))
