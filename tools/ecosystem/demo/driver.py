"""`rootcause demo`: debug a bundled example project through the real MCP server, as an agent would.

The example (`tools/demo/example/`, package data) is a dependency-free Python project whose
latest commit breaks the loss average: padding positions are counted as tokens. The driver
copies it into a temporary folder, makes two git commits (a working one, then the bug),
starts `rootcause serve --root <tmp>` through the official MCP stdio client, and walks the
protocol: start_session, reproduce, check_constraints, bisect_commits over the last two
commits, two hypotheses (one refuted, one supported), the fix with record_fix_attempt and
check_collateral, close_session refused before Phase 5, capture_knowledge (and a reworded
duplicate it declines), close_session.
Nothing needs torch, a GPU or the network.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rootcause.tools.core.errors import UsageError

BUG_LINE = "    count = len(values)\n"
FIX_LINE = "    count = sum(1 for keep in mask if keep)\n"
LOSS_FILE = "minitrain/loss.py"
TEST_COMMAND = "python -m unittest discover -s tests -v"
SYMPTOM = ("Wrong loss when a batch contains padding: python -m unittest discover -s tests fails with "
           "AssertionError: 1.2 != 2.0 within 7 places (0.8 difference) : padding changed the loss")
REQUIRED_TOOLS = ("start_session", "reproduce", "check_constraints", "bisect_commits", "verify_hypothesis",
                  "record_fix_attempt", "check_collateral", "capture_knowledge", "close_session")
# What the agent asks the knowledge files after reading the diagnosis: the concepts, not the command line.
CONSTRAINT_QUERY = "padding mask changes the loss average"
RENAMES = {"_agents": ".agents", "_gitignore": ".gitignore"}
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "rootcause demo", "GIT_AUTHOR_EMAIL": "demo@rootcause.invalid",
                "GIT_COMMITTER_NAME": "rootcause demo", "GIT_COMMITTER_EMAIL": "demo@rootcause.invalid"}


class Step(BaseModel):
    number: int
    tool: str
    arguments: dict[str, Any]
    is_error: bool
    text: str
    data: dict[str, Any] | None = None


class Check(BaseModel):
    name: str
    passed: bool
    detail: str = ""


class DemoTranscript(BaseModel):
    root: str
    session_id: str | None = None
    steps: list[Step] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    report: str = ""
    elapsed_s: float = 0.0
    failure: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


# ---------------------------------------------------------------- the example repository


def _example() -> Traversable:
    return files("rootcause.tools.ecosystem.demo").joinpath("example")


def _copy_tree(source: Traversable, dest: Path) -> None:
    for item in source.iterdir():
        if item.name == "__pycache__":
            continue
        target = dest / RENAMES.get(item.name, item.name)
        if item.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            _copy_tree(item, target)
        else:
            target.write_bytes(item.read_bytes())


async def _git(root: Path, *args: str) -> str:
    from rootcause.tools.core.workspace import Workspace
    from rootcause.tools.run import run_captured

    argv = ["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null",
            *args]
    record, output = await run_captured(argv, Workspace(root), env=GIT_IDENTITY, timeout_s=60, label="demo git")
    if record.outcome != "pass":
        raise RuntimeError(f"git {' '.join(args)} failed in {root}: {output.strip()[-400:]}")
    return output


async def build_example(dest: Path) -> Path:
    """The example project in `dest` with two commits: the working loss, then the bug."""
    if not shutil.which("git"):
        raise UsageError("the demo needs git on PATH.", "install git and run `rootcause demo` again")
    dest.mkdir(parents=True, exist_ok=True)
    _copy_tree(_example(), dest)
    loss = dest / LOSS_FILE
    buggy = loss.read_text(encoding="utf-8")
    if buggy.count(BUG_LINE) != 1:
        raise RuntimeError(f"the bundled {LOSS_FILE} no longer contains the demo's bug line")
    loss.write_text(buggy.replace(BUG_LINE, FIX_LINE), encoding="utf-8")
    await _git(dest, "init", "-q")
    await _git(dest, "add", "-A")
    await _git(dest, "commit", "-q", "-m", "minitrain: padded batches and a token-averaged loss")
    loss.write_text(buggy, encoding="utf-8")
    await _git(dest, "commit", "-q", "-am", "Simplify masked_mean: divide by the batch length")
    return dest


def apply_fix(root: Path) -> None:
    loss = root / LOSS_FILE
    loss.write_text(loss.read_text(encoding="utf-8").replace(BUG_LINE, FIX_LINE), encoding="utf-8")


# ---------------------------------------------------------------- the agent's script


def _experiment(code: str) -> str:
    return f'python -c "{code}"'


H1 = {
    "hypothesis": "The padded loss differs from the unpadded one only by floating-point rounding in the sum.",
    "prediction": "masked_mean of the same three tokens with and without two padding positions agrees within 1e-9.",
    "command": _experiment(
        "from minitrain.loss import masked_mean; a = masked_mean([1.0, 2.0, 3.0], [1, 1, 1]); "
        "b = masked_mean([1.0, 2.0, 3.0, 0.0, 0.0], [1, 1, 1, 0, 0]); assert abs(a - b) < 1e-9, (a, b)"),
    "expect": "pass",
    "changed": "nothing in the code: one experiment adds two padding positions to the same three tokens",
    "disproof": "an AssertionError showing the two means far apart (the failing test reports a 0.8 difference)",
    "disproof_regex": "AssertionError",
    "alternatives": ["masked_mean divides by the padded length instead of the number of real tokens",
                     "pad_batch marks padding positions as real tokens"],
    "confidence": 0.3,
}
H2 = {
    "hypothesis": "masked_mean divides the sum of the real tokens by the padded length instead of their number.",
    "prediction": "with 3 real tokens among 5 positions the padded mean is the true mean times 3/5: 2.0 * 3 / 5 = 1.2.",
    "command": _experiment(
        "from minitrain.loss import masked_mean; b = masked_mean([1.0, 2.0, 3.0, 0.0, 0.0], [1, 1, 1, 0, 0]); "
        "assert abs(b - 2.0 * 3 / 5) < 1e-9, b"),
    "expect": "pass",
    "changed": "only the number of padding positions (2 of 5)",
    "disproof": "an AssertionError printing a padded mean other than 1.2 (e.g. 2.0)",
    "disproof_regex": "AssertionError",
    "alternatives": ["floating-point rounding (refuted by the previous experiment)",
                     "pad_batch marks padding positions as real tokens (its own test passes)"],
    "confidence": 0.9,
}
KNOWLEDGE = {
    "kind": "constraint",
    "title": "Token averages divide by the number of real tokens",
    "body": ("- `minitrain/loss.py: masked_mean` divides by the count of mask-1 positions, never by the padded "
             "length.\n- Dividing by the padded length makes the loss depend on how much padding a batch has "
             "(the symptom: tests report 1.2 != 2.0 once padding is added)."),
    "section": "Batching",
}


class Demo:
    def __init__(self, client: Any, transcript: DemoTranscript, console: Any) -> None:
        self.client = client
        self.t = transcript
        self.console = console

    async def call(self, tool: str, arguments: dict[str, Any], note: str, expect_error: bool = False,
                   show: bool = True) -> Step:
        number = len(self.t.steps) + 1
        self.console.rule(f"[bold]{number}. {tool}[/bold]  [dim]{note}[/dim]", align="left")
        shown = {k: v for k, v in arguments.items() if k != "session_id"}
        for key, value in shown.items():
            self.console.print(f"  [cyan]{key}[/cyan] = {value!r}")
        result = await self.client.call_tool(tool, arguments)
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        step = Step(number=number, tool=tool, arguments=arguments, is_error=bool(result.is_error), text=text,
                    data=result.structured_content)
        self.t.steps.append(step)
        style = "yellow" if result.is_error else "green"
        label = "refused" if result.is_error else "result"
        self.console.print(f"[{style}]{label}:[/{style}]")
        self.console.print(text if show else "(the report is printed below)", markup=False, highlight=False)
        if result.is_error != expect_error:
            self.check(f"{tool} {'refused' if expect_error else 'succeeded'}", False, text[:300])
            raise DemoFailed(f"{tool} {'succeeded' if expect_error else 'failed'} unexpectedly: {text[:500]}")
        return step

    def check(self, name: str, passed: bool, detail: str = "") -> None:
        self.t.checks.append(Check(name=name, passed=passed, detail=detail))
        mark = "[green]✓[/green]" if passed else "[red]✗[/red]"
        self.console.print(f"{mark} {name}" + (f" [dim]({detail})[/dim]" if detail else ""))

    async def run(self, root: Path) -> None:
        started = await self.call("start_session", {"symptom": SYMPTOM},
                                  "the agent opens a session with the user's symptom")
        data = started.data or {}
        sid = data["session_id"]
        self.t.session_id = sid
        self.check("session started", bool(sid), f"path {data.get('path')}, category {data.get('category')}")

        rep = await self.call("reproduce", {"command": TEST_COMMAND, "runs": 2, "timeout_s": 120, "session_id": sid},
                              "Phase 1: make it fail, twice")
        status = (rep.data or {}).get("status")
        self.check("failure reproduced", status == "reproduced", f"status {status}")

        await self.call("check_constraints", {"symptom": CONSTRAINT_QUERY, "session_id": sid},
                        "Phase 1: is this a known pitfall of the project?")

        bisect = await self.call("bisect_commits", {"good": "HEAD~1", "bad": "HEAD", "command": TEST_COMMAND,
                                                    "keep": False, "session_id": sid},
                                 "Phase 2: which commit broke the tests?")
        first_bad = ((bisect.data or {}).get("first_bad_commit") or {})
        subject = first_bad.get("subject", "") if isinstance(first_bad, dict) else str(first_bad)
        self.check("first bad commit found", "Simplify masked_mean" in subject, subject)

        h1 = await self.call("verify_hypothesis", {**H1, "session_id": sid}, "Phase 3: a first hypothesis")
        result1 = (h1.data or {}).get("result")
        self.check("hypothesis 1 refuted", result1 == "refuted", f"result {result1}")
        h2 = await self.call("verify_hypothesis", {**H2, "session_id": sid}, "Phase 3: a second hypothesis")
        result2 = (h2.data or {}).get("result")
        self.check("hypothesis 2 supported", result2 == "supported", f"result {result2}")

        apply_fix(root)
        self.console.print(f"[bold]the agent edits {LOSS_FILE}:[/bold] {BUG_LINE.strip()!r} -> {FIX_LINE.strip()!r}")
        fix = await self.call("record_fix_attempt", {"session_id": sid, "command": TEST_COMMAND,
                                                     "description": "masked_mean divides by the number of real "
                                                                    "tokens (mask 1), not by the padded length"},
                              "Phase 4: verify the fix")
        fixed = (fix.data or {}).get("fixed")
        self.check("fix verified", fixed is True, f"fixed {fixed}")

        collateral = await self.call("check_collateral", {"command": TEST_COMMAND, "session_id": sid},
                                     "Phase 4: did the fix break anything else?")
        verdict = (collateral.data or {}).get("verdict")
        self.check("no collateral damage", verdict == "clean", f"verdict {verdict}")

        await self.call("close_session", {"session_id": sid}, "closing too early", expect_error=True)
        self.check("close refused before Phase 5", True)

        knowledge = await self.call("capture_knowledge", {**KNOWLEDGE, "session_id": sid},
                                    "Phase 5: keep the lesson for the next person")
        written = (knowledge.data or {}).get("written")
        where = f"{written.get('file')}:{written.get('line')}" if isinstance(written, dict) else str(written)
        self.check("constraint written", bool(written), where)
        reworded = {**KNOWLEDGE, "title": "Averages over tokens divide by the count of real tokens", "session_id": sid}
        again = await self.call("capture_knowledge", reworded, "Phase 5: the same lesson reworded is not written twice")
        duplicate = (again.data or {}).get("duplicate_of")
        self.check("reworded duplicate refused", bool(duplicate) and not (again.data or {}).get("written"))

        closed = await self.call("close_session", {"session_id": sid}, "the final report", show=False)
        self.t.report = (closed.data or {}).get("report", closed.text)
        self.check("session closed", (closed.data or {}).get("status") == "closed")


class DemoFailed(RuntimeError):
    pass


async def drive(root: Path, console: Any, transcript: DemoTranscript) -> None:
    from mcp import Client, StdioServerParameters
    from rootcause.tools.ecosystem.install import own_executable

    params = StdioServerParameters(command=str(own_executable()), args=["serve", "--root", str(root)],
                                   cwd=str(root), env=dict(os.environ))
    async with Client(params) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        missing = [name for name in REQUIRED_TOOLS if name not in listed]
        try:
            if missing:
                raise DemoFailed(f"this rootcause build lacks the tools {', '.join(missing)}")
            await Demo(client, transcript, console).run(root)
        except DemoFailed as exc:  # inside the client: a task group would wrap it in an ExceptionGroup
            transcript.failure = str(exc)


def run_demo(keep: bool = False, workdir: Path | None = None, console: Any = None) -> int:
    """Run the demo; 0 when every step behaved as the protocol says it should."""
    import anyio
    from rich.console import Console

    console = console or Console(highlight=False, soft_wrap=True)
    started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="rootcause-demo-")) if workdir is None else workdir
    root = base / "minitrain"
    transcript = DemoTranscript(root=str(root))
    try:
        console.print(f"[bold]rootcause demo[/bold]: building the example project in {root}")
        anyio.run(build_example, root)
        console.print("two commits: a working loss, then 'Simplify masked_mean: divide by the batch length' "
                      "(the bug)\n")
        anyio.run(drive, root, console, transcript)
        failure = transcript.failure
        transcript.elapsed_s = round(time.perf_counter() - started, 2)
        if transcript.report:
            console.rule("[bold]session report[/bold]", align="left")
            console.print(transcript.report, markup=False, highlight=False)
        console.rule(align="left")
        passed = sum(c.passed for c in transcript.checks)
        console.print(f"{passed}/{len(transcript.checks)} checks passed in {transcript.elapsed_s:.1f}s")
        if failure or not transcript.ok:
            console.print(f"[red]demo failed[/red]: {failure or 'a check did not pass'}")
            return 1
        console.print("[green]demo finished[/green]: the bug was reproduced, explained, fixed and recorded")
        return 0
    finally:
        if keep or workdir is not None:
            console.print(f"example repository kept at {root}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_demo())
