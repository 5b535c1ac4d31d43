"""bisect_versions: the first released version of a package that breaks the reproducer."""

from __future__ import annotations

import asyncio
import time

from packaging.version import Version
from pydantic import BaseModel, Field
from rootcause.tools.bisect import uvenv
from rootcause.tools.bisect.common import (
    Judged,
    Outcome,
    Prepared,
    Progress,
    ReproducerFields,
    SearchStatus,
    check_endpoint,
    prepare,
    record_evidence,
    run_reproducer,
    value_read,
)
from rootcause.tools.bisect.index import IndexError_, between, index_url, list_releases
from rootcause.tools.bisect.search import Verdict, bisect, steps_left
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.core.validate import package_name, version
from rootcause.tools.engines.bisect_env import EnvFields, EnvPython, check_base_inputs, make_base, read_current
from rootcause.tools.observe.evidence import MetricReading

Status = SearchStatus


class BisectVersionsInput(ReproducerFields, EnvFields):
    """Find the first release of a package that breaks the reproducer, by binary search over its releases.

    Lists the releases between good and bad from the package index (PEP 440 order; yanked and pre-releases left
    out unless asked), then binary-searches them, each step a uv environment under .rootcause/envs/ that is the
    project as pinned with only that package moved, the project itself installed (editable) from the tree under
    test. Both endpoints are checked first. A version that cannot be installed, or whose run fails with another
    failure than `expect` or never reaches the code (command missing, index unreachable), is skipped with the
    reason, never counted bad; a hang (timeout_s / idle_timeout_s) counts as bad."""

    python: EnvPython = None

    package: str = Field(description="Distribution name, e.g. 'click' (PEP 508 name).")
    good: str = Field(description="A version where the reproducer passes, e.g. '8.1.0'.")
    bad: str = Field(description="A version where the reproducer fails, e.g. '8.3.0'.")
    include_prereleases: bool = Field(False, description="Also test pre-releases and dev releases in the range.")
    include_yanked: bool = Field(False, description="Also test yanked releases in the range.")
    versions: list[str] | None = Field(None, description="Test exactly these versions instead of asking the index "
                                                         "(e.g. a private index the server cannot read).")
    hang_is_bad: bool = Field(True, description="Count a reproducer timeout (timeout_s / idle_timeout_s) as bad; "
                                                "false skips a version that hangs.")


class TestedVersion(BaseModel):
    version: str
    outcome: Outcome
    outcome_reason: str | None = Field(None, description="Why that outcome, or why the version was skipped.")
    matches_expected: bool | None = None
    error: str | None = None
    signature: str | None = None
    group: str | None = None
    log_path: str | None = None
    env_path: str | None = None
    cached: bool = False
    yardstick: MetricReading | None = Field(None, description="The metric / reference reading (value, step, line).")


class BisectVersionsResult(ToolResult):
    package: str
    good: str
    bad: str
    status: Status
    first_bad: str | None = None
    last_good: str | None = None
    tested: list[TestedVersion]
    candidates: list[str] = Field(default_factory=list, description="The ordered versions searched (good first).")
    left_out: list[str] = Field(default_factory=list, description="Versions in range not searched, and why.")
    ambiguous: list[str] = Field(default_factory=list,
                                 description="Skipped versions between last_good and first_bad.")
    builds: int = Field(0, description="Environments used, endpoints included (cached ones too).")
    fresh_builds: int = Field(0, description="Of those, environments built by this call (not from the cache).")
    detail: str = ""
    reason: str | None = Field(None, description="Why the search is inconclusive or could not be set up.")
    project: str | None = Field(None, description="The project as installed in the environments ('name version "
                                                  "(editable)').")
    failed_log: str | None = None
    duration_s: float = 0.0

    def summary(self) -> str:
        lines = [f"bisect_versions {self.package} {self.good}..{self.bad}: {self.status}", self.detail]
        if self.tested:
            lines.append("tested: " + ", ".join(f"{t.version} {t.outcome}{value_read(t.yardstick)}"
                                                for t in self.tested))
            lines += [f"skipped {t.version}: {t.outcome_reason}" for t in self.tested if t.outcome == "skip"][:5]
        lines.append(f"builds: {self.builds} ({self.fresh_builds} fresh) for {len(self.candidates)} candidates")
        if self.left_out:
            lines.append("left out: " + ", ".join(self.left_out[:10]))
        return "\n".join(line for line in lines if line)


async def candidate_versions(inp: BisectVersionsInput, package: str, good: Version,
                             bad: Version) -> tuple[list[Version], list[str]]:
    low, high = min(good, bad), max(good, bad)
    if inp.versions is not None:
        given = sorted({version(v, "versions item") for v in inp.versions} | {good, bad})
        return [v for v in given if low <= v <= high], []
    releases = await list_releases(package)
    known = {r.version for r in releases}
    for end, what in ((good, "good"), (bad, "bad")):
        if end not in known:
            raise UsageError(f"{what} {end} is not a release of {package} on {index_url()}.",
                             "pick a version from the index, or pass versions=[...] to test your own list")
    return between(releases, low, high, prereleases=inp.include_prereleases, yanked=inp.include_yanked,
                   keep=(good, bad))


async def bisect_versions(inp: BisectVersionsInput, ctx: ToolContext) -> BisectVersionsResult:
    started = time.monotonic()
    package = package_name(inp.package)
    good, bad = version(inp.good, "good"), version(inp.bad, "bad")
    if good == bad:
        raise UsageError(f"good and bad are the same version ({good}).", "give two different versions")
    prepared = prepare(inp, ctx)
    python = check_base_inputs(ctx, inp)
    current = await read_current(ctx, inp, python)
    result = BisectVersionsResult(package=package, good=str(good), bad=str(bad), status="setup_failed", tested=[])
    progress = Progress(ctx)
    await progress.step(f"listing releases of {package} between {good} and {bad}")
    try:
        chosen, result.left_out = await candidate_versions(inp, package, good, bad)
    except IndexError_ as exc:
        result.detail = f"could not list the releases of {package}: {exc}"
        return _finish(ctx, inp, result, started)
    order = chosen if good < bad else list(reversed(chosen))
    result.candidates = [str(v) for v in order]
    expected = 2 + steps_left(0, len(order) - 1)
    base = await make_base(ctx, inp, ctx.root, python, tag="", current=current)
    envs: list[uvenv.Env] = []
    try:
        await _search(ctx, inp, prepared, base, package, order, progress, result, envs, expected)
    finally:
        if not inp.keep:
            for env in envs:
                uvenv.remove(env)
    return _finish(ctx, inp, result, started)


async def _search(ctx: ToolContext, inp: BisectVersionsInput, prepared: Prepared, base: uvenv.Base, package: str,
                  order: list[Version], progress: Progress, result: BisectVersionsResult,
                  envs: list[uvenv.Env], expected: int) -> None:
    ws = ctx.workspace

    async def build(v: Version) -> uvenv.Env | uvenv.StepFailed:
        try:
            env = await uvenv.build(ws, base, (package, str(v)), timeout_s=inp.setup_timeout_s, step=progress.step,
                                    label=str(v))
        except uvenv.StepFailed as exc:
            return exc
        envs.append(env)
        result.project = result.project or uvenv.installed_project(env.venv, ctx.root)
        result.builds += 1
        result.fresh_builds += 0 if env.cached else 1
        return env

    verdicts: dict[str, Verdict] = {}

    async def test(v: Version, built: uvenv.Env | uvenv.StepFailed) -> TestedVersion:
        if isinstance(built, uvenv.StepFailed):
            why = f"could not be set up: {built.step}: {built.message}"[:500]
            tested = TestedVersion(version=str(v), outcome="skip", outcome_reason=why, error=why,
                                   log_path=built.log_path)
            verdicts[str(v)] = "skip"
        else:
            await progress.step(f"running the reproducer with {package}=={v}")
            run = await run_reproducer(ctx, inp, prepared, source=ctx.root, python=built.python,
                                       label=f"bisect_versions {v}")
            if run.outcome == "hang" and not inp.hang_is_bad and run.verdict == "bad":
                run.verdict, run.reason = "skip", f"{run.reason} (hang_is_bad is false)"
            tested = TestedVersion(version=str(v), outcome="skip" if run.verdict == "skip" else run.outcome,
                                   outcome_reason=run.reason, matches_expected=run.matches_expected,
                                   error=run.error, signature=run.signature, group=run.group, log_path=run.log_path,
                                   env_path=ws.relative(built.venv), cached=built.cached, yardstick=run.yardstick)
            verdicts[str(v)] = run.verdict
            runs[str(v)] = run
        result.tested.append(tested)
        return tested

    runs: dict[str, Judged] = {}

    def verdict(t: TestedVersion) -> Verdict:
        return verdicts[t.version]

    await progress.step(f"building both endpoints concurrently: {order[0]} and {order[-1]}")
    built_good, built_bad = await asyncio.gather(build(order[0]), build(order[-1]))
    first, last = await test(order[0], built_good), await test(order[-1], built_bad)
    for tested, want in ((first, "good"), (last, "bad")):
        stop = check_endpoint(want, tested.version, verdict(tested), runs.get(tested.version),
                              tested.outcome_reason, "the package")
        if stop is not None:
            result.status, result.detail, result.reason = stop.status, stop.detail, stop.reason
            result.failed_log = tested.log_path if tested.version not in runs else None
            return

    async def judge(i: int) -> Verdict:
        v = order[i]
        await progress.step(f"testing {package}=={v} (version {len(result.tested) + 1} of about {expected})")
        return verdict(await test(v, await build(v)))

    found = await bisect(len(order), judge)
    result.status = "found"
    result.first_bad, result.last_good = str(order[found.first_bad]), str(order[found.last_good])
    result.ambiguous = [str(order[i]) for i in found.ambiguous]
    result.detail = f"{package} {result.last_good} passes and {result.first_bad} fails: {result.first_bad} " \
                    f"is the first bad release"
    if result.ambiguous:
        result.detail += f" — or one of the skipped {', '.join(result.ambiguous)}"
    result.detail += "."


def _finish(ctx: ToolContext, inp: BisectVersionsInput, result: BisectVersionsResult,
            started: float) -> BisectVersionsResult:
    result.duration_s = round(time.monotonic() - started, 3)
    record_evidence(ctx, inp.session_id, "bisect_versions", result)
    return result
