"""Every tool, prompt and resource rootcause exposes, in one place.

Engines are named by "module:attribute" strings so that this table stays pure data; the
server and the CLI resolve them (server/app.py, server/cli.py). The `phase` column is the
protocol phase a tool advances (the engine records it in the session).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Hints:
    """MCP tool annotations. Never written by hand: `Effects.hints` derives them from what the engine can do."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False


@dataclass(frozen=True)
class Effects:
    """What a tool's engine can do, checked against its code: tests/test_tool_list.py compares every row with
    what server/effects.py finds the engine can reach (the process runner, the network, the knowledge writer).

    starts: the programs it can start, in words ("" for none). Clients auto-approve read-only tools, so a tool
        that can start one (a command, an interpreter, a codegen check) is never read-only, and since the program
        may change or reach anything, it is destructive, open-world and not idempotent.
    network: reaches outside the machine itself (the package index).
    writes: what it changes by design, besides the evidence it records under .rootcause/ ("" for nothing).
    repeatable: a second identical call changes nothing more (capture_knowledge skips a duplicate entry).
    """

    starts: str = ""
    network: bool = False
    writes: str = ""
    repeatable: bool = False

    @property
    def hints(self) -> Hints:
        starts = bool(self.starts)
        return Hints(read_only=not starts and not self.writes, destructive=starts,
                     idempotent=self.repeatable and not starts, open_world=starts or self.network)


READS = Effects(repeatable=True)


@dataclass(frozen=True)
class ToolSpec:
    """One tool. Its engine is the module named as the tool, `rootcause.tools.engines.<name>`, holding the function
    `<name>`, its input model `<Name>Input` and its result `<Name>Result` (CamelCase of the name)."""

    name: str
    phase: int | None = None
    description: str = ""
    effects: Effects = Effects()

    @property
    def hints(self) -> Hints:
        return self.effects.hints

    @property
    def module(self) -> str:
        return f"{ENGINES}.{self.name}"

    @property
    def engine(self) -> str:
        return f"{self.module}:{self.name}"

    @property
    def input(self) -> str:
        return f"{self.module}:{_camel(self.name)}Input"

    @property
    def output(self) -> str:
        return f"{self.module}:{_camel(self.name)}Result"

    def load(self) -> tuple[Any, type, type]:
        return _attr(self.engine), _attr(self.input), _attr(self.output)


ENGINES = "rootcause.tools.engines"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


@dataclass(frozen=True)
class PromptSpec:
    name: str
    description: str
    arguments: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResourceSpec:
    uri: str
    name: str
    description: str
    reader: str
    mime_type: str = "text/markdown"


def _attr(ref: str) -> Any:
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "start_session", 1,
        "Use first on any bug, crash, failing test, NaN loss, hang or OOM: opens a session, picks the Quick "
        "Path or Full Protocol and says why. Pass its session_id to later calls.",
        Effects(writes="a new session")),
    ToolSpec(
        "reproduce", 1,
        "Use when a command fails or hangs and you can run it here: runs it several times and says whether it"
        " fails with one signature or is flaky, with the diagnosis. Phase 1.",
        Effects(starts="the command")),
    ToolSpec(
        "diagnose_log", 1,
        "Use for a log you cannot rerun (cluster job, pasted traceback): the root error behind its wrappers, "
        "category, signature, location, per-rank outcomes. Phase 1.",
        READS),
    ToolSpec(
        "check_constraints", 1,
        "Use early in Phase 1, before changing code: the project's knowledge entries, pitfalls and checklists"
        " that match the symptom, and edits to generated files.",
        Effects(starts="the codegen check (check_codegen=true)")),
    ToolSpec(
        "bisect_env", 2,
        "Use when you suspect one package version: runs the reproducer in two uv environments differing only "
        "in package==version. Phase 2.",
        Effects(starts="the command, uv and the codegen step")),
    ToolSpec(
        "bisect_versions", 2,
        "Use when a package works at one release and breaks at a later one: binary-searches its releases for "
        "the first bad one. Phase 2.",
        Effects(starts="the command and uv", network=True)),
    ToolSpec(
        "bisect_commits", 2,
        "Use when a good and a bad commit are known: binary-searches the commits in worktrees (your checkout "
        "untouched) for the first bad one. Phase 2.",
        Effects(starts="the command and the setup step")),
    ToolSpec(
        "compare_setups", 2,
        "Use when a working setup exists beside the broken one: lists ALL differences in code, configs, "
        "launchers, env and packages, flagging suspects. Phase 2.",
        Effects(starts="each side's python, for its installed packages")),
    ToolSpec(
        "verify_hypothesis", 3,
        "Use to test ONE falsifiable hypothesis with a minimal one-change experiment: judges the prediction "
        "and applies the verification gate. Phase 3.",
        Effects(starts="the experiment's command")),
    ToolSpec(
        "record_fix_attempt", 4,
        "Use after each targeted fix: runs the verification command, says whether the failure is gone, and "
        "stops the session after 3 failures in a row. Phase 4.",
        Effects(starts="the verification command")),
    ToolSpec(
        "check_collateral", 4,
        "Use once a fix passes its reproducer: runs broader tests on the base commit and on your tree and "
        "lists what the fix broke or fixed. Phase 4.",
        Effects(starts="the command, on the base tree and on yours")),
    ToolSpec(
        "capture_knowledge", 5,
        "Use after the fix, always (Phase 5): appends a constraint or architecture entry (never a "
        "near-duplicate), names the test for a regression guard, or records 'none'.",
        Effects(writes="the knowledge files", repeatable=True)),
    ToolSpec(
        "close_session", None,
        "Use to finish a session: returns its final report; refused until Phase 5 (capture_knowledge) is "
        "done.",
        Effects(writes="the session's status", repeatable=True)),
    ToolSpec(
        "inspect_checkpoint", None,
        "Use when loading a checkpoint fails or gives wrong results: tensors, dtypes, NaN/Inf, and missing, "
        "unexpected, mis-shaped or renamed keys against compare_to.",
        Effects(starts="the python= interpreter (torch reads the checkpoint there)")),
    ToolSpec(
        "analyze_training_log", None,
        "Use when loss goes NaN, spikes or diverges: loss, grad norm and lr by step, the first non-finite "
        "step and spikes; with compare_to, where two runs diverge.",
        READS),
)

PROMPTS: tuple[PromptSpec, ...] = (
    PromptSpec("debug_protocol", "The full five-phase debugging protocol for a symptom.", ("symptom",)),
    PromptSpec("quick_path", "The short route for a clear error with an obvious cause.", ("symptom",)),
    PromptSpec("verification_subagent",
               "A critical reviewer's brief: challenge a conclusion against its evidence.",
               ("conclusion", "evidence")),
    PromptSpec("distributed_checklist", "Questions for distributed-training correctness."),
    PromptSpec("numerical_checklist", "Questions for numerical correctness (NaN, dtypes, weights loaded)."),
)

RESOURCES: tuple[ResourceSpec, ...] = (
    ResourceSpec("rootcause://sessions/{session_id}", "session_report",
                 "A debugging session as a Markdown report: symptom, path, phases, every piece of evidence.",
                 "rootcause.server.readers:read_session"),
    ResourceSpec("rootcause://runs/{run_id}/log", "run_log",
                 "The full output log of a run recorded by reproduce and the other tools that run commands.",
                 "rootcause.server.readers:read_run_log", "text/plain"),
)

INSTRUCTIONS = """\
rootcause runs a disciplined debugging protocol. On any bug, crash, failing test, loss NaN,
divergence, OOM, hang or checkpoint failure: call start_session first (it picks the Quick
Path or the Full Protocol and says why), then pass its session_id to every later call.
Phase 1 Investigate: reproduce (or diagnose_log for a log you cannot rerun), check_constraints.
Phase 2 Compare: compare_setups, bisect_env / bisect_versions / bisect_commits.
Phase 3 Hypothesis: verify_hypothesis, one falsifiable hypothesis at a time.
Phase 4 Fix: record_fix_attempt (stops you after 3 failures), check_collateral.
Phase 5 Knowledge: capture_knowledge (or kind 'none'), then close_session.
Numerics at any phase: inspect_checkpoint, analyze_training_log. Prompts: debug_protocol,
quick_path, verification_subagent, distributed_checklist, numerical_checklist.
"""
