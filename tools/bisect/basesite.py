"""What the base interpreter's `site` adds, and how an environment built from base='current' keeps it.

Asked of the interpreter itself: `_site_probe.py`, run by it, reports its site folders, their .pth files
line by line and the distributions installed there. A copy of the interpreter's freeze alone loses what
`site` adds besides site-packages: folders a .pth file puts on sys.path (a shared torch install, `conda
develop`, a hand-written path file), packages installed editable from elsewhere (`pip install -e ../lib`;
a requirements copy drops `-e` lines), the user site's packages (`pip install --user`; not in uv's
freeze) and a venv's system site packages. The plan keeps each one: path lines are written into the
environment as the same path lines, editables are installed editable from the same folders, user-site
packages at their versions, and a venv with system site packages gets one too.

Import lines are kept by reinstalling the distribution whose RECORD lists their .pth file (setuptools'
distutils-precedence.pth, an editable's finder). An import line in a .pth that no installed distribution
owns is refused up front, naming it: it runs code at every start of the base, usually a module of the
base's own site-packages, which the environment does not have, so copied it would fail at every start
or reach back into the base, and the two sides would no longer differ in one package only.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

import yaml
from packaging.utils import canonicalize_name
from pydantic import BaseModel
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import run_captured

PROBE = Path(__file__).with_name("_site_probe.py")
DATA = Path(__file__).with_name("site_files.yaml")
SHOWN = 5


class PthLine(BaseModel):
    line: int
    kind: Literal["path", "import"]
    text: str
    path: str | None = None
    exists: bool = False


class PthFile(BaseModel):
    name: str
    lines: list[PthLine]


class Distribution(BaseModel):
    name: str
    version: str | None = None
    pth: list[str] = []
    editable: str | None = None


class SiteFolder(BaseModel):
    path: str
    kind: Literal["own", "user", "system"]
    pth: list[PthFile] = []
    distributions: list[Distribution] = []


class SiteReport(BaseModel):
    """What the base interpreter said about its own site."""

    python: str
    prefix: str
    venv: bool
    sys_path: list[str]
    folders: list[SiteFolder]


@dataclass(frozen=True)
class Carried:
    name: str
    origin: str
    paths: tuple[str, ...]


@dataclass(frozen=True)
class SitePlan:
    """How an environment keeps what the base's site adds (every field is part of the environment's key)."""

    carried: tuple[Carried, ...] = ()
    editables: tuple[str, ...] = ()
    user_packages: tuple[tuple[str, str], ...] = ()
    system_site: bool = False

    @property
    def paths(self) -> list[str]:
        return [p for c in self.carried for p in c.paths]

    def fingerprint(self) -> str:
        return json.dumps([[c.name, list(c.paths)] for c in self.carried] + [list(self.editables),
                          [list(p) for p in self.user_packages], self.system_site])

    def describe(self) -> str:
        """One line for progress: what is kept besides the freeze."""
        parts = []
        if self.carried:
            parts.append(f"{len(self.paths)} path(s) from " + ", ".join(c.name for c in self.carried))
        if self.editables:
            parts.append(f"{len(self.editables)} editable install(s)")
        if self.user_packages:
            parts.append(f"{len(self.user_packages)} user-site package(s)")
        if self.system_site:
            parts.append("the system site packages")
        return "; ".join(parts)


@lru_cache(maxsize=1)
def creator_files() -> frozenset[str]:
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return frozenset(entry["name"] for entry in data["creator_files"])


async def read_site(ws: Workspace, python: Path, timeout_s: float = 120) -> SiteReport:
    """Run the probe with `python` (-E: the server's PYTHONPATH is not the base's) and read its report."""
    out = ws.state_dir("envs") / f".site-{secrets.token_hex(6)}.json"
    code = PROBE.read_text(encoding="utf-8")
    record, output = await run_captured([str(python), "-E", "-c", code, str(out)], ws, cwd=out.parent,
                                        timeout_s=timeout_s, label="base site probe")
    try:
        if record.outcome != "pass" or not out.is_file():
            raise UsageError(f"{python} could not report what its site adds ({record.outcome}): "
                             f"{output.strip()[-500:]}", "check that the interpreter starts: "
                             f"{python} -c 'import site'")
        return SiteReport.model_validate_json(out.read_text(encoding="utf-8"))
    finally:
        out.unlink(missing_ok=True)


def _rebase(path: str, root: Path, source: Path) -> str:
    """A folder of the user's tree, as the same folder of the tree under test (a worktree) when it has it."""
    if source == root:
        return path
    try:
        rel = Path(path).relative_to(root)
    except ValueError:
        return path
    if rel.parts and rel.parts[0] == ".rootcause":
        return path
    candidate = source / rel
    return str(candidate) if candidate.exists() else path


def _url_path(url: str) -> str | None:
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else None


def plan(report: SiteReport, freeze: dict[str, str], *, root: Path, source: Path, project: str | None,
         python: Path) -> SitePlan:
    """The SitePlan for an environment whose project tree is `source`; UsageError naming what cannot be kept."""
    reinstalled = set(freeze)
    carried: list[Carried] = []
    editables: list[str] = []
    user: dict[str, str] = {}
    refused: list[str] = []
    missing: list[str] = []
    for folder in report.folders:
        if folder.kind == "system":
            continue  # the environment gets system site packages of its own (SitePlan.system_site)
        owners = {pth: dist for dist in folder.distributions for pth in dist.pth}
        for dist in folder.distributions:
            name = canonicalize_name(dist.name)
            if dist.editable:
                path = _url_path(dist.editable)
                if name == project or (path is not None and Path(path) == root):
                    continue  # the project is installed from the tree under test
                if path is None or not Path(path).is_dir():
                    missing.append(f"{dist.name} (editable from {dist.editable})")
                    continue
                editables.append(_rebase(path, root, source))
            elif folder.kind == "user" and dist.version:
                user[name] = dist.version
        for pth in folder.pth:
            if pth.name in creator_files():
                continue
            owner = owners.get(pth.name)
            if owner is not None and (canonicalize_name(owner.name) in reinstalled or owner.editable
                                      or folder.kind == "user"):
                continue  # reinstalling its distribution writes it (and whatever its import lines import)
            for line in pth.lines:
                if line.kind == "import":
                    refused.append(f"{Path(folder.path) / pth.name}:{line.line}: {line.text[:120]}")
            paths = tuple(_rebase(line.path, root, source) for line in pth.lines
                          if line.kind == "path" and line.exists and line.path)
            if paths:
                carried.append(Carried(pth.name, str(Path(folder.path) / pth.name), paths))
    if missing:
        raise UsageError(f"base='current' cannot rebuild what {python} imports: "
                         + "; ".join(missing[:SHOWN]) + (" …" if len(missing) > SHOWN else "")
                         + " — the folder it was installed from is gone.",
                         "reinstall it in that interpreter (editable from where it lives now, or from the index), "
                         "or uninstall it there, then bisect again")
    if refused:
        raise UsageError(f"base='current' cannot carry {len(refused)} import line(s) in .pth files of {python} "
                         "that no installed package owns: " + "; ".join(refused[:SHOWN])
                         + (" …" if len(refused) > SHOWN else "")
                         + ". They run code at every start of that interpreter, usually from its own "
                         "site-packages, which a bisect environment does not have.",
                         "replace each import line by a line naming the folder it adds (a path line), or install "
                         "what it sets up as a package in that interpreter, or use base='project'")
    return SitePlan(tuple(carried), tuple(dict.fromkeys(editables)), tuple(sorted(user.items())),
                    report.venv and any(f.kind == "system" for f in report.folders))


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not found:
        raise FileNotFoundError(f"{venv} has no lib/python*/site-packages")
    return found[0]


def write_carried(venv: Path, site: SitePlan) -> list[Path]:
    """The base's path lines as .pth files of the environment, one per file they came from."""
    folder = site_packages(venv)
    written = []
    for item in site.carried:
        target = folder / item.name
        if target.exists():
            target = folder / f"rootcause-{item.name}"
        target.write_text(f"# the path lines of {item.origin}, kept by rootcause\n" + "\n".join(item.paths) + "\n",
                          encoding="utf-8")
        written.append(target)
    return written


async def missing_paths(ws: Workspace, python: Path, site: SitePlan) -> list[str]:
    """The carried paths that the environment's interpreter does not have on sys.path."""
    if not site.carried:
        return []
    record, output = await run_captured([str(python), "-E", "-c", "import json, sys; print(json.dumps(sys.path))"],
                                        ws, timeout_s=120, label="environment sys.path")
    lines = [ln for ln in output.splitlines() if ln.startswith("[")]
    have = set(json.loads(lines[-1])) if record.outcome == "pass" and lines else set()
    return [p for p in site.paths if p not in have]
