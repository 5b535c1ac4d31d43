"""bisect_env: the reproducer in two uv environments that differ in exactly one package version."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from rootcause.tools.bisect import basesite, uvenv
from rootcause.tools.bisect.common import (
    Judged,
    Outcome,
    Prepared,
    Progress,
    ReproducerFields,
    describe_run,
    prepare,
    record_evidence,
    run_reproducer,
    value_read,
)
from rootcause.tools.core import gitrepo
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.core.validate import package_name, version
from rootcause.tools.observe.evidence import MetricReading
from rootcause.tools.run import RunSpec, parse_command, run_process, worktrees
from rootcause.tools.run.interpreters import activation_env, freeze, resolve_python

Verdict = Literal["version_flips_outcome", "no_difference", "both_fail_differently", "conflict", "setup_failed",
                  "inconclusive"]
CODEGEN_PACKAGES = {"transformers"}
WORKTREE_NAMES = ("bisect-env-a", "bisect-env-b")


EnvPython = Annotated[str | None, Field(
    description="Interpreter the venvs are created from (and, for base='current', whose packages are replicated). "
                "Default: <root>/.venv/bin/python, else the server's.")]


class EnvFields(BaseModel):
    base: Literal["project", "current"] = Field(
        "project", description="'project': environment A is the uv project as pinned by its uv.lock (uv sync). "
                               "'current': A replicates the packages installed in the `python` interpreter "
                               "and the paths its .pth files add (for projects not managed by uv).")
    python: EnvPython = None
    extras: list[str] | None = Field(None, description="Project extras to install (uv sync --extra).")
    groups: list[str] | None = Field(None, description="Dependency groups to install; None means uv's defaults.")
    keep: bool = Field(True, description="Leave the environments cached for the next bisect; false removes them "
                                         "at the end (worktrees are always removed).")


class BisectEnvInput(ReproducerFields, EnvFields):
    """Does one package version flip the outcome? Runs a reproducer in two uv environments that differ only in it.

    Under .rootcause/envs/: A is the project as pinned, B the same with package==version (every other package
    pinned to A's version, checked by diffing the two freezes). With
    worktrees (auto: a codegen command, a Makefile 'patchgen' target, or transformers) each environment gets its
    own detached worktree of HEAD and the codegen command runs in each before the reproducer. Both environments
    hold the project itself, installed (editable) from the tree under test, so its console scripts and metadata
    exist. When both sides fail the same way for a reason that is not the package (the project does not import,
    a command is missing, uv cannot reach the index), or a side fails with another failure than `expect`, the
    verdict is inconclusive with that reason."""

    python: EnvPython = None

    package: str = Field(description="Distribution name of the suspected package, e.g. 'click' (PEP 508 name).")
    version: str = Field(description="The version to put in environment B, e.g. '8.2.0' (PEP 440).")
    worktrees: Literal["auto", "on", "off"] | bool = Field(
        "auto", description="Build each environment in its own detached git worktree of HEAD. 'auto': on when a "
                            "codegen command is given or detected (Makefile 'patchgen') or the package is "
                            "transformers.")
    codegen: str | list[str] | None = Field(
        None, description="Command that generates code from the installed packages (e.g. 'make patchgen'), run in "
                          "each worktree with its environment active before the reproducer.")


class EnvSide(BaseModel):
    path: str | None = Field(None, description="The venv folder, relative to the root.")
    package_version: str | None = None
    outcome: Outcome = "not_run"
    outcome_reason: str | None = Field(None, description="Why that outcome (the evidence layer's outcome_reason), "
                                                         "or why this side decides nothing.")
    matches_expected: bool | None = Field(None, description="Whether the failure shows the expected one (expect, "
                                                            "else the session's symptom); null when not compared.")
    project: str | None = Field(None, description="The project as installed in this environment ('name version "
                                                  "(editable)'); null for a project that is not packaged.")
    signature: str | None = None
    group: str | None = None
    error: str | None = Field(None, description="One line for the failure, when the reproducer failed.")
    exit_code: int | None = None
    run_id: str | None = None
    log_path: str | None = None
    cached: bool = False
    yardstick: MetricReading | None = Field(None, description="The metric / reference reading (value, step, line).")
    check: str | None = Field(None, description="'ok', or uv pip check's report of incompatible requirements.")
    worktree: str | None = None
    codegen_log: str | None = None


class Reconciled(BaseModel):
    package: str
    from_: str | None = Field(alias="from")
    to: str | None


class BisectEnvResult(ToolResult):
    package: str
    version: str
    env_a: EnvSide
    env_b: EnvSide
    freeze_diff: list[uvenv.FreezeDiff]
    reconciled: list[Reconciled]
    verdict: Verdict
    detail: str
    reason: str | None = Field(None, description="Why the verdict is inconclusive (or setup_failed): what made both "
                                                 "sides fail or pass the same way other than the package.")
    failed_step: str | None = None
    failed_log: str | None = None
    worktrees: bool = False
    duration_s: float = 0.0

    def summary(self) -> str:
        def side(name: str, s: EnvSide) -> str:
            if s.outcome in ("skip", "not_run"):
                what = s.outcome + (f" — {s.outcome_reason}" if s.outcome_reason else "")
            else:
                what = s.outcome + (f" — {s.error}" if s.error else "")
                what += " [not the expected failure]" if s.matches_expected is False else ""
            project = f"; project {s.project}" if s.project else ""
            what += value_read(s.yardstick)
            return (f"{name}: {self.package}=={s.package_version or '?'}{project} → {what}"
                    + (" (cached)" if s.cached else ""))

        lines = [f"bisect_env {self.package}=={self.version}: {self.verdict}", self.detail,
                 side("A", self.env_a), side("B", self.env_b)]
        if self.freeze_diff:
            lines.append("freeze diff: " + ", ".join(f"{d.package} {d.a}→{d.b}" for d in self.freeze_diff[:10]))
        if self.reconciled:
            lines.append("reconciled: " + ", ".join(f"{r.package} {r.from_}→{r.to}" for r in self.reconciled))
        if self.failed_log:
            lines.append(f"log of the failing step: {self.failed_log}")
        return "\n".join(lines)


def detect_codegen(root: Path) -> str | None:
    makefile = root / "Makefile"
    if makefile.is_file() and re.search(r"^patchgen\s*:", makefile.read_text(errors="replace"), re.MULTILINE):
        return "make patchgen"
    return None


def use_worktrees(setting: str | bool, codegen: str | list[str] | None, package: str) -> bool:
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        return setting == "on"
    return codegen is not None or package in CODEGEN_PACKAGES


@dataclass
class CurrentBase:
    """base='current': the interpreter's freeze and what its site adds, as the interpreter reported them."""

    python: Path
    freeze: dict[str, str]
    site: basesite.SiteReport

    def plan(self, root: Path, source: Path) -> basesite.SitePlan:
        return basesite.plan(self.site, self.freeze, root=root, source=source, project=uvenv.project_name(root),
                             python=self.python)


async def read_current(ctx: ToolContext, inp: EnvFields, python: Path) -> CurrentBase | None:
    """For base='current', before anything is built: ask the interpreter, and refuse what cannot be kept."""
    if inp.base != "current":
        return None
    packages, site = await asyncio.gather(freeze(ctx.workspace, python), basesite.read_site(ctx.workspace, python))
    current = CurrentBase(python, packages, site)
    current.plan(ctx.root, ctx.root)
    return current


async def make_base(ctx: ToolContext, inp: EnvFields, source: Path, python: Path, *, tag: str,
                    current: CurrentBase | None = None) -> uvenv.Base:
    if inp.base == "current":
        current = current or await read_current(ctx, inp, python)
        assert current is not None
        return uvenv.current_base(source, python, current.freeze, current.plan(ctx.root, source))
    return uvenv.project_base(source, python, extras=tuple(inp.extras or ()),
                              groups=None if inp.groups is None else tuple(inp.groups), tag=tag)


def check_base_inputs(ctx: ToolContext, inp: EnvFields) -> Path:
    """The interpreter venvs are made from; refuses a project base without pyproject.toml."""
    for value, what in [(e, "extra") for e in inp.extras or []] + [(g, "group") for g in inp.groups or []]:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", value):
            raise UsageError(f"{what} {value!r} is not a valid name.", f"give the {what} name as in pyproject.toml")
    if inp.base == "project" and not (ctx.root / "pyproject.toml").is_file():
        raise UsageError(f"{ctx.root} has no pyproject.toml, so there is no uv project to sync.",
                         "pass base='current' with python=<the interpreter whose packages to replicate>")
    return resolve_python(ctx.workspace, inp.python)


async def run_codegen(ctx: ToolContext, codegen: str | list[str], source: Path, python: Path, label: str,
                      timeout_s: float) -> tuple[bool, str]:
    argv, env = parse_command(codegen, isinstance(codegen, str) and any(c in codegen for c in "|&;><"))
    env.update(activation_env(python))
    env["PYTHONPATH"] = uvenv.site_path(source)
    record = await run_process(RunSpec(argv=argv, cwd=source, env=env, timeout_s=timeout_s, label=label),
                               ctx.workspace, ctx.progress)
    return record.outcome == "pass", record.log_path


def verdict_of(a: Judged, b: Judged) -> tuple[Verdict, str, str | None]:
    """(verdict, detail, reason) of the two sides: A as pinned, B with the package moved."""
    skipped = [(name, j) for name, j in (("A", a), ("B", b)) if j.verdict == "skip"]
    if skipped:
        if len(skipped) == 2 and a.reason == b.reason:
            reason = f"both sides: {a.reason}"
        else:
            reason = "; ".join(f"{name}: {j.reason}" for name, j in skipped)
        return ("inconclusive", "the reproducer decides nothing here, so this says nothing about the version: "
                + reason + ".", reason)
    if (a.verdict == "good") != (b.verdict == "good"):
        good, bad, failed = ("A", "B", b) if a.verdict == "good" else ("B", "A", a)
        return ("version_flips_outcome",
                f"the version change flips the outcome: {good} passes, {bad} {describe_run(failed)}.", None)
    if a.verdict == "good":
        return "no_difference", "both environments pass: this version change does not explain the failure.", None
    if a.signature == b.signature:
        for side in (a, b):
            cause = side.not_the_package(("both",))
            if cause is not None:
                reason = f"both sides fail the same way before the package matters: {cause}"
                return "inconclusive", reason + "; fix that first, then bisect again.", reason
        return "no_difference", "both environments fail with the same signature: the version is not the cause.", None
    return "both_fail_differently", "both environments fail, with different signatures (see each side's error).", None


async def bisect_env(inp: BisectEnvInput, ctx: ToolContext) -> BisectEnvResult:
    started = time.monotonic()
    package = package_name(inp.package)
    target_version = str(version(inp.version))
    prepared = prepare(inp, ctx)
    python = check_base_inputs(ctx, inp)
    codegen = inp.codegen if inp.codegen is not None else detect_codegen(ctx.root)
    if isinstance(codegen, str) and not codegen.strip():
        raise UsageError("codegen is empty.", "give a command like 'make patchgen' or omit it")
    with_worktrees = use_worktrees(inp.worktrees, codegen, package)
    if with_worktrees:
        gitrepo.resolve_ref(ctx.root, "HEAD")
    current = await read_current(ctx, inp, python)
    progress = Progress(ctx, 12 if with_worktrees else 9)
    result = BisectEnvResult(package=package, version=target_version, env_a=EnvSide(), env_b=EnvSide(),
                             freeze_diff=[], reconciled=[], verdict="setup_failed", detail="",
                             worktrees=with_worktrees)
    envs: list[uvenv.Env] = []
    lease: worktrees.WorktreeLease | None = None
    try:
        async with worktrees.leased(ctx.workspace) as lease:
            await _run(ctx, inp, prepared, python, package, target_version, codegen, with_worktrees, progress,
                       result, envs, lease, current)
    except uvenv.StepFailed as exc:
        result.verdict = "conflict" if exc.conflict else "setup_failed"
        result.failed_step, result.failed_log = exc.step, exc.log_path
        what = (f"{package}=={target_version} cannot be installed with A's other versions pinned"
                if exc.conflict else f"{exc.step} failed")
        result.detail = f"{what}: {exc.message}"
        result.reason = result.detail
    finally:
        # Environments installed from a one-off worktree name (another call held the usual one) are never found
        # again: they go too.
        if not inp.keep or (lease is not None and set(lease.names) - set(WORKTREE_NAMES)):
            for env in envs:
                uvenv.remove(env)
    result.duration_s = round(time.monotonic() - started, 3)
    await progress.step(f"verdict: {result.verdict}")
    record_evidence(ctx, inp.session_id, "bisect_env", result)
    return result


async def _run(ctx: ToolContext, inp: BisectEnvInput, prepared: Prepared, python: Path, package: str, target: str,
               codegen: str | list[str] | None, with_worktrees: bool, progress: Progress, result: BisectEnvResult,
               envs: list[uvenv.Env], lease: worktrees.WorktreeLease, current: CurrentBase | None) -> None:
    ws = ctx.workspace
    if with_worktrees:
        await progress.step("checking out two detached worktrees of HEAD")
        names = [lease.claim(name) for name in WORKTREE_NAMES]
        sources = tuple(await asyncio.gather(*(asyncio.to_thread(lease.checkout, name, "HEAD", inp.setup_timeout_s)
                                               for name in names)))
        result.env_a.worktree, result.env_b.worktree = (ws.relative(s) for s in sources)
        for source in sources:
            # An untracked uv.lock in the user's tree is still "the project as pinned".
            if (ctx.root / "uv.lock").is_file() and not (source / "uv.lock").exists():
                shutil.copy2(ctx.root / "uv.lock", source / "uv.lock")
    else:
        sources = (ctx.root, ctx.root)
    bases = await asyncio.gather(
        make_base(ctx, inp, sources[0], python, tag="a" if with_worktrees else "", current=current),
        make_base(ctx, inp, sources[1], python, tag="b" if with_worktrees else "", current=current))
    await progress.step(f"building A (as pinned) and B ({package}=={target}) concurrently")
    outcomes = await asyncio.gather(
        uvenv.build(ws, bases[0], None, timeout_s=inp.setup_timeout_s, step=progress.step, label="A"),
        uvenv.build(ws, bases[1], (package, target), timeout_s=inp.setup_timeout_s, step=progress.step, label="B"),
        return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, uvenv.Env):
            envs.append(outcome)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    env_a, env_b = envs
    for side, env, source in ((result.env_a, env_a, sources[0]), (result.env_b, env_b, sources[1])):
        side.path, side.cached = ws.relative(env.venv), env.cached
        side.project = uvenv.installed_project(env.venv, source)
    diff = uvenv.diff_freezes(env_a.freeze, env_b.freeze, package, sources if with_worktrees else ())
    drift = [d for d in diff if d.kind in ("drift", "removed")]
    if drift:
        await progress.step(f"pinning {len(drift)} drifted package(s) of B back to A's versions")
        reconciled = await uvenv.reconcile(ws, env_b, env_a.freeze, (package, target), drift, inp.setup_timeout_s)
        result.reconciled = [Reconciled.model_validate(r) for r in reconciled]
        diff = uvenv.diff_freezes(env_a.freeze, env_b.freeze, package, sources if with_worktrees else ())
    result.freeze_diff = diff
    for side, env in ((result.env_a, env_a), (result.env_b, env_b)):
        side.package_version = env.freeze.get(package)
        side.check = "ok" if env.check_ok else env.check_output or "uv pip check failed"
    still = [d for d in diff if d.kind in ("drift", "removed")]
    if still:
        result.verdict = "conflict"
        result.detail = ("B still differs from A outside the target after pinning back: "
                         + ", ".join(f"{d.package} {d.a}→{d.b}" for d in still))
        return
    if codegen is not None and with_worktrees:
        await progress.step(f"running codegen in both worktrees: {codegen}")
        gens = await asyncio.gather(*(run_codegen(ctx, codegen, src, env.python, f"codegen {name}",
                                                  inp.setup_timeout_s)
                                      for src, env, name in zip(sources, envs, "AB", strict=True)))
        result.env_a.codegen_log, result.env_b.codegen_log = gens[0][1], gens[1][1]
        for (ok, log), name in zip(gens, "AB", strict=True):
            if not ok:
                raise uvenv.StepFailed(f"codegen in {name}", f"`{codegen}` failed", log)
    runs = []
    for name, side, env, src in (("A", result.env_a, env_a, sources[0]), ("B", result.env_b, env_b, sources[1])):
        await progress.step(f"running the reproducer in {name} ({package}=={side.package_version})")
        run = await run_reproducer(ctx, inp, prepared, source=src, python=env.python, label=f"bisect_env {name}")
        side.outcome, side.outcome_reason, side.matches_expected = run.outcome, run.reason, run.matches_expected
        side.signature, side.group, side.error, side.yardstick = run.signature, run.group, run.error, run.yardstick
        side.exit_code, side.run_id, side.log_path = run.exit_code, run.run_id, run.log_path
        runs.append(run)
    result.verdict, result.detail, result.reason = verdict_of(runs[0], runs[1])
    notes = []
    if env_a.freeze.get(package) == target:
        notes.append(f"A already has {package}=={target}, so A and B hold the same versions")
    if env_a.freeze.get(package) is None:
        notes.append(f"{package} is not installed in A; B adds it")
    added = [d.package for d in diff if d.kind == "added"]
    if added:
        notes.append(f"B adds {', '.join(added)} (required by {package}=={target})")
    if not (env_a.check_ok and env_b.check_ok):
        notes.append("uv pip check reports incompatible requirements (see each side's check)")
    if notes:
        result.detail += " Note: " + "; ".join(notes) + "."
