"""check_collateral: did the fix break anything else? (Phase 4, "check collateral").

The broader verification command runs twice through the shared runner: on `base` in a
detached worktree under `.rootcause/worktrees/` and on the working tree that holds the fix.
For pytest the failing test ids of the two runs are compared (junit XML written under
`.rootcause/collateral/`, else the `FAILED ...` summary lines), for unittest the ids of its
`FAIL:` / `ERROR:` lines; for any other command the outcomes and failure signatures are.
Both runs get PYTHONDONTWRITEBYTECODE and pytest's cache disabled, so the user's tree is left
as it was, and PYTHONPATH starts with the tree under test, so the worktree's code is imported
rather than an editable install of the working tree.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shlex
import shutil
from itertools import pairwise
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from rootcause.tools.core import gitrepo
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.core.validate import regex_field
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.observe.evidence import (
    EXPECT_TEXT,
    PYTEST_NOT_RUN,
    Observation,
    RunFields,
    declare,
    execute,
    full_output,
    observe_record,
    pytest_position,
    yardstick,
)
from rootcause.tools.observe.evidence.expect import EXPECT_FLAGS
from rootcause.tools.record.evidence import CollateralEvidence
from rootcause.tools.record.store import SessionStore, require_open
from rootcause.tools.run.worktrees import leased

Verdict = Literal["clean", "collateral", "inconclusive"]
Mode = Literal["pytest", "unittest", "command"]
_UNITTEST_LINE = re.compile(r"^(?:FAIL|ERROR): (\S+) \(([^)\s]+)\)", re.MULTILINE)
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?: - .*)?$", re.MULTILINE)
_PYTEST_USAGE_CODES = {2, *PYTEST_NOT_RUN}  # and 2: interrupted (a collection error) gives no test ids


class CheckCollateralInput(RunFields):
    """Check a fix for collateral damage: run a broader command on the base commit and on the fixed tree.

    Use in Phase 4 after the targeted fix passes its reproducer: give the module's tests or another
    trainer's smoke test. The base run happens in a detached git worktree (your tree and HEAD are
    untouched), the fixed run in the working tree. pytest and unittest commands are compared test by
    test (new_failures = broken by the fix); other commands by outcome and failure signature.
    """

    base: str = Field("HEAD", description="The commit without the fix (default HEAD; the fix is the working tree).")
    expect: str | None = Field(None, description=f"{EXPECT_TEXT} For a command that is not a test runner: a run "
                                                 "failing otherwise gives no verdict.")
    session_id: str | None = Field(None, description="Session to record the result in (advances Phase 4).")
    check_expect = regex_field("expect", EXPECT_FLAGS)


class Side(BaseModel):
    """One side of the comparison: the tree it ran on, its observed run, and the failing tests."""

    tree: str = Field(description="'base <sha>' or 'working tree'.")
    run: Observation
    tests: int | None = Field(None, description="Tests reported (pytest, unittest).")
    failing: list[str] = Field(default_factory=list, description="Failing test ids (pytest, unittest).")
    source: str = Field("", description="Where the failing ids came from: junit, summary lines, diagnosis.")

    @property
    def outcome(self) -> str:
        return self.run.outcome

    @property
    def signature(self) -> str | None:
        return self.run.signature


class CheckCollateralResult(ToolResult):
    verdict: Verdict
    new_failures: list[str] = Field(description="Failing with the fix, not on base: collateral damage.")
    fixed: list[str] = Field(description="Failing on base, passing with the fix.")
    still_failing: list[str] = Field(description="Failing on both.")
    base_run: Side
    fix_run: Side
    interpreter: str = Field("", description="The interpreter both runs used, and why.")
    base_sha: str
    pytest: bool
    mode: Literal["pytest", "unittest", "command"] = Field(
        description="How the runs were compared: test ids (pytest, unittest) or outcome and signature (command).")
    reason: str
    notes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = [f"check_collateral: {self.verdict.upper()} — {self.reason}"]
        for name, items in (("New failures (broken by the fix)", self.new_failures), ("Fixed", self.fixed),
                            ("Still failing", self.still_failing)):
            if items:
                lines.append(f"{name} ({len(items)}): " + ", ".join(items[:20])
                             + (f", … {len(items) - 20} more" if len(items) > 20 else ""))
        for side in (self.base_run, self.fix_run):
            tests = f", {side.tests} tests, {len(side.failing)} failing" if side.tests is not None else ""
            run = side.run
            why = f" — {run.outcome_reason}" if run.outcome_reason.startswith("exit 0, but") else ""
            if run.yardstick is not None and run.yardstick.reason not in why:
                why += f" — {run.yardstick.reason}"
            lines.append(f"{side.tree}: {run.outcome} ({run.code()}{tests}) in {run.duration_s:.1f}s{why}, "
                         f"log {run.log_path}")
        if self.interpreter:
            lines.append(f"Interpreter: {self.interpreter}")
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


async def check_collateral(inp: CheckCollateralInput, ctx: ToolContext) -> CheckCollateralResult:
    ws = ctx.workspace
    store = SessionStore(ws)
    if inp.session_id:
        require_open(store, inp.session_id)
    decl = declare(inp, ws, label="collateral")
    stick = yardstick(inp.expect, None)
    argv, cwd = decl.argv, decl.cwd
    base_sha = gitrepo.resolve_ref(ws.root, inp.base)
    top = Path(gitrepo.repo_for(ws.root).working_tree_dir).resolve()  # type: ignore[union-attr]
    notes: list[str] = []
    assert decl.interpreter is not None
    if decl.interpreter.note:
        notes.append(f"ran with {decl.interpreter.note}")
    if _head(ws.root) == base_sha and not _has_changes(ws.root):
        notes.append("the working tree has no changes against base: both runs test the same code")
    folder = ws.state_dir("collateral", secrets.token_hex(4))
    pytest_at = None if inp.shell else pytest_position(argv)
    pytest = pytest_at is not None or (inp.shell and "pytest" in " ".join(argv))
    mode: Mode = "pytest" if pytest else "unittest" if _is_unittest(argv) else "command"

    async def run(tree: Path, label: str, step: int) -> tuple[Observation, Path]:
        run_cwd = tree / cwd.relative_to(top) if tree != top else cwd
        run_argv = [_outside_tree(argv[0], run_cwd, cwd), *argv[1:]]
        junit = folder / f"{label}.xml"
        run_env = {**decl.env, "PYTHONDONTWRITEBYTECODE": "1",
                   "PYTHONPATH": os.pathsep.join(_import_roots(run_cwd, tree) + _existing(decl.env.get("PYTHONPATH")))}
        extra = ["-p", "no:cacheprovider", f"--junitxml={junit}", "-rfE"]
        if pytest_at is not None:
            run_argv = run_argv[:pytest_at] + extra + run_argv[pytest_at:]
        elif pytest:
            run_env["PYTEST_ADDOPTS"] = " ".join([*map(shlex.quote, extra), decl.env.get("PYTEST_ADDOPTS", "")]).strip()
        await ctx.progress(step, 2, f"running the command on the {label} tree")
        side = decl.with_spec(argv=run_argv, cwd=run_cwd, env=run_env, label=f"collateral {label}")
        record = await execute(side, ctx)
        return await observe_record(side, record, ctx.root, stick), junit

    try:
        async with leased(ws) as lease:
            name = lease.claim(f"collateral-{folder.name}")
            tree = await asyncio.to_thread(lease.checkout, name, base_sha)
            base_obs, base_junit = await run(tree.resolve(), "base", 0)
            base_dirs = [tree.resolve() / cwd.relative_to(top), tree.resolve() / ws.root.relative_to(top)]
            base_dirs = [p.resolve() for p in base_dirs]
            base = _side(base_obs, f"base {base_sha[:10]}", mode, base_junit, base_dirs, ws)
        fix_obs, fix_junit = await run(top, "fix", 1)
        fix = _side(fix_obs, "working tree", mode, fix_junit, [cwd, ws.root], ws)
    finally:
        # The junit reports are read into the sides; the result names only the runs' logs (under runs/).
        shutil.rmtree(folder, ignore_errors=True)
    if pytest and base.source != fix.source:
        # Compare like with like: ids from summary lines when one run has no junit report.
        base = _side(base_obs, base.tree, mode, None, [], ws)
        fix = _side(fix_obs, fix.tree, mode, None, [], ws)
    await ctx.progress(2, 2, "comparing")
    result = _judge(base, fix, mode, base_sha, notes)
    result.interpreter = decl.interpreter.describe()
    if inp.session_id:
        diff_hash = gitrepo.diff_hash(ws.root)
        evidence = CollateralEvidence(verdict=result.verdict, new_failures=result.new_failures[:50],
                                      fixed=result.fixed[:50], still_failing=result.still_failing[:50],
                                      base=base_sha, command=argv, diff_hash=diff_hash, interpreter=result.interpreter,
                                      reason=result.reason, base_ref=inp.base)
        store.record(inp.session_id, "check_collateral", evidence.render(), evidence.model_dump(mode="json"), phase=4)
        store.set_facts(inp.session_id, collateral_verdict=result.verdict, collateral_diff_hash=diff_hash)
    return result


def _head(root: Path) -> str | None:
    try:
        return gitrepo.resolve_ref(root, "HEAD")
    except UsageError:
        return None


def _is_unittest(argv: list[str]) -> bool:
    words = " ".join(argv).split()
    return any(w == "-m" and n in {"unittest", "unittest.__main__"} for w, n in pairwise(words))


def _unittest_id(match: re.Match[str]) -> str:
    """`FAIL: test_x (pkg.mod.Case.test_x)` (3.11+) or `(pkg.mod.Case)` (older) -> `pkg.mod.Case.test_x`."""
    name, where = match.group(1), match.group(2)
    return where if where.endswith("." + name) else f"{where}.{name}"


def _has_changes(root: Path) -> bool:
    # `git status` once, rather than gitpython's index diff, which leaves a cat-file helper process running.
    repo = gitrepo.repo_for(root)
    return bool(repo is not None and repo.git.status("--porcelain", "--untracked-files=normal", "--", ".").strip())


def _outside_tree(program: str, run_cwd: Path, user_cwd: Path) -> str:
    """A relative program path missing from the worktree (an untracked .venv/bin/python) runs from the user's tree."""
    if os.sep in program and not os.path.isabs(program) and not (run_cwd / program).exists() \
            and (user_cwd / program).exists():
        return str((user_cwd / program).resolve())
    return program


def _import_roots(run_cwd: Path, tree: Path) -> list[str]:
    roots = [run_cwd, tree, tree / "src"]
    out: list[str] = []
    for root in roots:
        if root.is_dir() and str(root) not in out:
            out.append(str(root))
    return out


def _existing(value: str | None) -> list[str]:
    return [p for p in (value or os.environ.get("PYTHONPATH", "")).split(os.pathsep) if p]


# ---------------------------------------------------------------- reading a run


def _side(run: Observation, tree: str, mode: Mode, junit: Path | None, dirs: list[Path], ws: Workspace) -> Side:
    side = Side(tree=tree, run=run)
    if mode == "command":
        return side
    if mode == "unittest":
        output = full_output(run, ws.root)
        side.failing, side.source = sorted({_unittest_id(m) for m in _UNITTEST_LINE.finditer(output)}), "unittest"
        ran = _UNITTEST_RAN.findall(output)
        side.tests = int(ran[-1]) if ran else None
        return side
    if junit is not None and junit.is_file():
        parsed = parse_junit(junit, dirs)
        if parsed is not None:
            side.tests, side.failing, side.source = parsed[0], parsed[1], "junit"
            return side
    output = full_output(run, ws.root)
    failing = sorted(set(_FAILED_LINE.findall(output)))
    if failing or run.outcome == "pass":
        side.failing, side.source = failing, "summary lines"
        return side
    side.failing, side.source = sorted(set(run.diagnosis.failed_tests if run.diagnosis else [])), "diagnosis"
    return side


def parse_junit(path: Path, dirs: list[Path]) -> tuple[int, list[str]] | None:
    """(number of tests, failing ids) from a junit XML report; ids rebuilt as pytest node ids."""
    import xml.etree.ElementTree as ET

    try:
        tree = ET.parse(path)
    except (ET.ParseError, OSError):
        return None
    failing: set[str] = set()
    count = 0
    for case in tree.iter("testcase"):
        count += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failing.add(_node_id(case.get("classname", ""), case.get("name", ""), dirs))
    return count, sorted(failing)


def _node_id(classname: str, name: str, dirs: list[Path]) -> str:
    """`tests.test_mod.TestX` + `test_a[1]` -> `tests/test_mod.py::TestX::test_a[1]`, relative to the tree.

    The classname is relative to pytest's rootdir, which may be the run's folder, the project root,
    or (for a shell command that changes directory) something else: the module is looked up in the
    first two, else by suffix among the tree's Python files when exactly one matches.
    """
    collection_error = not classname
    parts = (name if collection_error else classname).split(".")
    for cut in range(len(parts), 0, -1):
        candidate = "/".join(parts[:cut]) + ".py"
        found = _find_module(candidate, dirs)
        if found:
            return found if collection_error else "::".join([found, *parts[cut:], name])
    return name if collection_error else f"{classname}::{name}"


def _find_module(candidate: str, dirs: list[Path]) -> str | None:
    if not dirs:
        return None
    root = dirs[-1]
    for base in dirs:
        if (base / candidate).is_file():
            return (base / candidate).relative_to(root).as_posix() if base.is_relative_to(root) else candidate
    matches = [p for p in _python_files(root) if p == candidate or p.endswith("/" + candidate)]
    return matches[0] if len(matches) == 1 else None


def _python_files(root: Path) -> list[str]:
    skip = {".git", ".rootcause", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".nox"}
    out: list[str] = []
    for folder, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in skip and not d.startswith(".")]
        out += [(Path(folder) / f).relative_to(root).as_posix() for f in files if f.endswith(".py")]
        if len(out) > 50_000:
            break
    return out


# ---------------------------------------------------------------- verdict


def _ran(side: Side, mode: Mode) -> bool:
    """The run produced a usable result: finished, and for a test runner reached the tests."""
    if side.outcome in {"hang", "crash", "inconclusive"} or side.run.matches_expected is False:
        return False
    if mode == "unittest":
        return side.tests is not None or bool(side.failing)
    return not (mode == "pytest" and side.run.exit_code in _PYTEST_USAGE_CODES and not side.failing)


def _judge(base: Side, fix: Side, mode: Mode, base_sha: str, notes: list[str]) -> CheckCollateralResult:
    def result(verdict: Verdict, reason: str, new: list[str], fixed: list[str], still: list[str]):
        return CheckCollateralResult(verdict=verdict, reason=reason, new_failures=new, fixed=fixed,
                                     still_failing=still, base_run=base, fix_run=fix, base_sha=base_sha,
                                     pytest=mode == "pytest", mode=mode, notes=notes)

    if mode != "command":
        b, f = set(base.failing), set(fix.failing)
        new, fixed, still = sorted(f - b), sorted(b - f), sorted(b & f)
        if new and _ran(base, mode):
            return result("collateral", f"{len(new)} test(s) fail with the fix and passed on base", new, fixed, still)
        if not _ran(fix, mode):
            return result("inconclusive", f"the run with the fix did not complete ({_what(fix)}): no verdict",
                          new, fixed, still)
        if not _ran(base, mode):
            if fix.outcome == "pass":
                return result("clean", f"every test passes with the fix (the base run {_what(base)})",
                              [], [], [])
            return result("inconclusive", f"the base run {_what(base)}: cannot tell which failures are new",
                          [], [], sorted(f))
        if fix.outcome != "pass" and not f:
            return result("inconclusive", f"the run with the fix failed ({_what(fix)}) but no failing test id "
                          "was found", [], fixed, still)
        why = "no test fails with the fix that passed on base"
        if still:
            why += f"; {len(still)} test(s) fail on both (not caused by the fix)"
        return result("clean", why, [], fixed, still)
    if not _ran(base, mode) or not _ran(fix, mode):
        return result("inconclusive", f"base {_what(base)}, fix {_what(fix)}: a hang, crash or unjudged run gives "
                      "no verdict",
                      [], [], [])
    if base.outcome == "pass" and fix.outcome == "pass":
        return result("clean", "the command passes on base and with the fix", [], [], [])
    if base.outcome == "pass":
        return result("collateral", f"the command passes on base and fails with the fix ({fix.signature})",
                      [fix.signature or "failure"], [], [])
    if fix.outcome == "pass":
        return result("clean", "the command failed on base and passes with the fix", [], [base.signature or "failure"],
                      [])
    if base.signature == fix.signature:
        return result("inconclusive", "the command fails the same way on base and with the fix, so it cannot show "
                      "whether the fix broke something behind that failure", [], [], [fix.signature or "failure"])
    return result("collateral", "the command fails differently with the fix than on base", [fix.signature or ""],
                  [base.signature or ""], [])


def _what(side: Side) -> str:
    if side.outcome == "hang":
        return "hung (timed out)"
    if side.outcome == "crash":
        return "crashed"
    if side.outcome == "inconclusive":
        return f"cannot be judged ({side.run.problem})"
    if side.run.matches_expected is False:
        return f"failed otherwise than expected ({side.run.error})"
    if side.run.outcome_reason.startswith("exit 0, but"):
        return side.run.outcome_reason
    return f"ended with exit code {side.run.exit_code}"
