"""bisect_commits: the first bad commit, found in a detached worktree under .rootcause/worktrees/.

The user's HEAD, branch, index and working tree (uncommitted edits included) are never
touched: every commit is checked out in one detached worktree reused for the whole call and
removed when the call ends (success, failure, cancellation alike), and git's own read-only
commands (rev-list, show) run through the shared runner.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

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
from rootcause.tools.bisect.search import Verdict, bisect, steps_left
from rootcause.tools.core import gitrepo
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult, bounded
from rootcause.tools.observe.evidence import MetricReading
from rootcause.tools.run import RunSpec, parse_command, run_captured, run_process, worktrees
from rootcause.tools.run.interpreters import activation_env, resolve_python

Status = SearchStatus
WORKTREE = "bisect-commits"
SKIP_EXIT = 125  # git bisect run's "cannot test this commit"
SKIPPED_125 = f"exit code {SKIP_EXIT}: commit cannot be tested"
MAX_MERGE_DEPTH = 5


class BisectCommitsInput(ReproducerFields):
    """Find the first bad commit between a good and a bad ref by binary search, without touching your checkout.

    Each commit is tested in a detached git worktree under .rootcause/worktrees/ (your HEAD, branch, index and
    uncommitted edits are never touched). The reproducer exits 0 on good commits; a failure (a hang past
    timeout_s / idle_timeout_s included) that shows `expect` is bad. Exit code 125, a failing `setup` command, a
    failure other than `expect`, or a run that never reaches the code (command missing) skips the commit with the
    reason. Merges: the search follows the first-parent line of bad (like `git bisect --first-parent`); when the
    first bad commit there is a merge, it goes on inside the merged branch. Both endpoints are checked first."""

    good: str = Field(description="A ref where the reproducer passes (commit, tag, branch), an ancestor of bad.")
    bad: str = Field(description="A ref where the reproducer fails, e.g. 'HEAD'.")
    setup: str | list[str] | None = Field(None, description="Command run in the worktree before each test (build, "
                                                            "codegen); when it fails the commit is skipped.")
    keep: bool = Field(True, description="No effect: the worktree is always removed when the call ends.")


class CommitInfo(BaseModel):
    sha: str
    short: str
    subject: str
    author: str | None = None
    author_date: str | None = None
    diff_stat: str | None = None


class TestedCommit(BaseModel):
    sha: str
    short: str
    subject: str
    outcome: Outcome
    outcome_reason: str | None = Field(None, description="Why that outcome, or why the commit was skipped.")
    matches_expected: bool | None = None
    error: str | None = None
    signature: str | None = None
    group: str | None = None
    log_path: str | None = None
    yardstick: MetricReading | None = Field(None, description="The metric / reference reading (value, step, line).")


class BisectCommitsResult(ToolResult):
    good: str
    bad: str
    good_sha: str
    bad_sha: str
    status: Status
    first_bad_commit: CommitInfo | None = None
    last_good: str | None = None
    tested: list[TestedCommit]
    candidates: int = Field(0, description="Commits in the searched range, endpoints included.")
    ambiguous: list[str] = Field(default_factory=list,
                                 description="Skipped commits between last_good and first_bad (short shas).")
    detail: str = ""
    reason: str | None = Field(None, description="Why the search is inconclusive or could not be set up.")
    interpreter_note: str | None = Field(None, description="Said when the reproducer did not run with the project's "
                                                           "own interpreter (no .venv in the project).")
    via_merges: list[str] = Field(default_factory=list, description="Merges (short shas) the search went through: "
                                                                    "the first bad commit came in with each one's "
                                                                    "merged branch.")
    duration_s: float = 0.0

    def summary(self) -> str:
        lines = [f"bisect_commits {self.good}..{self.bad}: {self.status}", self.detail]
        if self.interpreter_note:
            lines.append(f"interpreter: {self.interpreter_note}")
        c = self.first_bad_commit
        if c:
            lines.append(f"first bad commit: {c.short} {c.subject} ({c.author}, {c.author_date})")
            if c.diff_stat:
                lines.append(bounded(c.diff_stat, 1500))
        if self.tested:
            lines.append("tested: " + ", ".join(f"{t.short} {t.outcome}{value_read(t.yardstick)}" for t in self.tested))
            lines += [f"skipped {t.short}: {t.outcome_reason}" for t in self.tested if t.outcome == "skip"][:5]
        return "\n".join(line for line in lines if line)


async def _git(ctx: ToolContext, *args: str) -> tuple[int | None, str]:
    limit = gitrepo.default_timeout()
    record, output = await run_captured(["git", *args], ctx.workspace, cwd=ctx.root, env=gitrepo.GIT_ENV,
                                        timeout_s=limit, label=f"git {args[0]}")
    if record.timed_out:
        raise gitrepo.stopped(args, limit, ctx.root)
    return record.exit_code, output


async def commit_info(ctx: ToolContext, sha: str, stat: bool = False) -> CommitInfo:
    code, out = await _git(ctx, "show", "-s", "--format=%H%x00%h%x00%s%x00%an%x00%aI", sha)
    parts = out.strip().split("\x00") if code == 0 else [sha, sha[:10], "", None, None]
    info = CommitInfo(sha=parts[0], short=parts[1], subject=parts[2], author=parts[3], author_date=parts[4])
    if stat:
        _, info.diff_stat = await _git(ctx, "show", "--stat", "--format=", sha)
        info.diff_stat = info.diff_stat.strip("\n")
    return info


async def merged_branch(ctx: ToolContext, sha: str) -> list[str] | None:
    """For a merge: its merge base and the first-parent line of its second parent ([base, ..., parent 2])."""
    code, out = await _git(ctx, "rev-list", "--parents", "-n", "1", sha)
    parents = out.split()[1:] if code == 0 else []
    if len(parents) < 2:
        return None
    code, base = await _git(ctx, "merge-base", parents[0], parents[1])
    if code != 0:
        return None
    code, out = await _git(ctx, "rev-list", "--first-parent", "--reverse", f"{base.strip()}..{parents[1]}")
    return [base.strip(), *out.split()] if code == 0 and out.split() else None


async def commit_range(ctx: ToolContext, good: str, bad: str) -> list[str]:
    code, out = await _git(ctx, "merge-base", "--is-ancestor", good, bad)
    if code != 0:
        raise UsageError(f"good {good[:10]} is not an ancestor of bad {bad[:10]}.",
                         "give a good commit that is older than bad on the same history (or swap them)")
    # The first-parent line of bad: each commit holds the one before it, so good -> bad is monotone even
    # across merges (a merge that brought the change in is the first bad commit, as git bisect --first-parent).
    code, out = await _git(ctx, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}")
    if code != 0:
        raise UsageError(f"git rev-list {good[:10]}..{bad[:10]} failed: {out.strip()[-300:]}", "check the refs")
    return [good, *out.split()]


async def bisect_commits(inp: BisectCommitsInput, ctx: ToolContext) -> BisectCommitsResult:
    started = time.monotonic()
    good = gitrepo.resolve_ref(ctx.root, inp.good)
    bad = gitrepo.resolve_ref(ctx.root, inp.bad)
    if good == bad:
        raise UsageError(f"good and bad are the same commit ({good[:10]}).", "give two different commits")
    prepared = prepare(inp, ctx)
    python = resolve_python(ctx.workspace, inp.python)
    setup = None
    if inp.setup is not None:
        setup = parse_command(inp.setup, isinstance(inp.setup, str) and any(c in inp.setup for c in "|&;><"))
    order = await commit_range(ctx, good, bad)
    result = BisectCommitsResult(good=inp.good, bad=inp.bad, good_sha=good, bad_sha=bad, status="setup_failed",
                                 tested=[],
                                 candidates=len(order))
    progress = Progress(ctx, 2 + steps_left(0, len(order) - 1) + 1)
    async with worktrees.leased(ctx.workspace) as lease:
        await _search(ctx, inp, prepared, python, setup, order, progress, result, lease)
    result.duration_s = round(time.monotonic() - started, 3)
    await progress.step(f"done: {result.status}")
    record_evidence(ctx, inp.session_id, "bisect_commits", result)
    return result


async def _search(ctx: ToolContext, inp: BisectCommitsInput, prepared: Prepared, python: Path,
                  setup: tuple[list[str], dict[str, str]] | None, order: list[str], progress: Progress,
                  result: BisectCommitsResult, lease: worktrees.WorktreeLease) -> None:
    verdicts: dict[str, Verdict] = {}
    name = lease.claim(WORKTREE)
    runs: dict[str, Judged] = {}

    async def test(sha: str) -> TestedCommit:
        info = await commit_info(ctx, sha)
        await progress.step(f"testing {info.short} {info.subject[:60]}")
        tree = await asyncio.to_thread(lease.checkout, name, sha, inp.setup_timeout_s)
        tested = TestedCommit(sha=sha, short=info.short, subject=info.subject, outcome="skip")
        result.tested.append(tested)
        verdicts[sha] = "skip"
        if setup is not None:
            env = {**setup[1], **activation_env(python), "PYTHONPATH": uvenv.site_path(tree)}
            record = await run_process(RunSpec(argv=setup[0], cwd=tree, env=env, timeout_s=inp.setup_timeout_s,
                                               label=f"setup {info.short}"), ctx.workspace, ctx.progress)
            if record.outcome != "pass":
                tested.error = tested.outcome_reason = f"setup failed ({record.outcome})"
                tested.log_path = record.log_path
                return tested
        run = await run_reproducer(ctx, inp, prepared, source=tree, python=None, label=f"bisect_commits {info.short}")
        runs[sha] = run
        if run.observation is not None and run.observation.interpreter_note:
            result.interpreter_note = run.observation.interpreter_note
        tested.log_path, tested.error = run.log_path, run.error
        tested.signature, tested.group = run.signature, run.group
        tested.outcome_reason, tested.matches_expected = run.reason, run.matches_expected
        tested.yardstick = run.yardstick
        if run.exit_code == SKIP_EXIT:
            tested.outcome_reason = tested.error = SKIPPED_125
            return tested
        tested.outcome = "skip" if run.verdict == "skip" else run.outcome
        verdicts[sha] = run.verdict
        return tested

    def verdict(t: TestedCommit) -> Verdict:
        return verdicts[t.sha]

    for sha, want in ((order[0], "good"), (order[-1], "bad")):
        tested = await test(sha)
        run = runs.get(sha) if tested.outcome_reason != SKIPPED_125 else None
        stop = check_endpoint(want, tested.short, verdict(tested), run, tested.outcome_reason, "the commit")
        if stop is not None:
            result.status, result.detail, result.reason = stop.status, stop.detail, stop.reason
            return

    async def judge(i: int) -> Verdict:
        return verdict(await test(order[i]))

    found = await bisect(len(order), judge)
    line = order
    merge_note = ""
    for _ in range(MAX_MERGE_DEPTH):
        if found.ambiguous:
            break
        branch = await merged_branch(ctx, line[found.first_bad])
        if branch is None:
            break
        merge = line[found.first_bad]
        await progress.step(f"{merge[:10]} is a merge: testing the branch it merged")
        tip = await test(branch[-1])
        if verdicts[tip.sha] == "good":
            merge_note = (f"; it is a merge whose merged branch passes on its own ({tip.short}) as does its first "
                          f"parent: the combination (or the conflict resolution) breaks it")
            break
        if verdicts[tip.sha] != "bad":
            merge_note = f"; it is a merge, and its merged branch could not be tested ({tip.outcome_reason})"
            break
        # Descend: the merged branch's first-parent line from the merge base (good: an ancestor of the good side).
        result.via_merges.append(merge[:10])

        async def judge_branch(i: int, branch: list[str] = branch) -> Verdict:
            return verdict(await test(branch[i]))

        line = branch
        found = await bisect(len(line), judge_branch)
    result.status = "found"
    result.first_bad_commit = await commit_info(ctx, line[found.first_bad], stat=True)
    result.last_good = line[found.last_good]
    result.ambiguous = [line[i][:10] for i in found.ambiguous]
    c = result.first_bad_commit
    result.detail = f"{c.short} \"{c.subject}\" is the first bad commit ({len(result.tested)} commits tested; " \
                    f"{len(order)} on the first-parent line"
    if result.via_merges:
        result.detail += f", then {len(line) - 1} on the branch merged by {', '.join(result.via_merges)}"
    result.detail += ")" + merge_note
    if result.ambiguous:
        result.detail += f" — or one of the skipped {', '.join(result.ambiguous)}"
    result.detail += "."
