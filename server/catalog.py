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
class ToolSpec:
    name: str
    engine: str
    input: str
    output: str
    phase: int | None = None

    def load(self) -> tuple[Any, type, type]:
        return _attr(self.engine), _attr(self.input), _attr(self.output)


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
    ToolSpec("start_session", "tools.sessions:start_session", "tools.sessions:StartSessionInput",
             "tools.sessions:StartSessionResult", 1),
    ToolSpec("reproduce", "tools.reproduce:reproduce", "tools.reproduce:ReproduceInput",
             "tools.reproduce:ReproduceResult", 1),
    ToolSpec("diagnose_log", "tools.reproduce:diagnose_log", "tools.reproduce:DiagnoseLogInput",
             "tools.reproduce:DiagnoseLogResult", 1),
    ToolSpec("check_constraints", "tools.knowledge.check:check_constraints",
             "tools.knowledge.check:CheckConstraintsInput", "tools.knowledge.check:CheckConstraintsResult", 1),
    ToolSpec("bisect_env", "tools.bisect.env:bisect_env", "tools.bisect.env:BisectEnvInput",
             "tools.bisect.env:BisectEnvResult", 2),
    ToolSpec("bisect_versions", "tools.bisect.versions:bisect_versions",
             "tools.bisect.versions:BisectVersionsInput", "tools.bisect.versions:BisectVersionsResult", 2),
    ToolSpec("bisect_commits", "tools.bisect.commits:bisect_commits", "tools.bisect.commits:BisectCommitsInput",
             "tools.bisect.commits:BisectCommitsResult", 2),
    ToolSpec("compare_setups", "tools.compare:compare_setups", "tools.compare:CompareSetupsInput",
             "tools.compare:CompareSetupsResult", 2),
    ToolSpec("verify_hypothesis", "tools.hypothesis:verify_hypothesis", "tools.hypothesis:VerifyHypothesisInput",
             "tools.hypothesis:VerifyHypothesisResult", 3),
    ToolSpec("record_fix_attempt", "tools.fixes:record_fix_attempt", "tools.fixes:RecordFixAttemptInput",
             "tools.fixes:RecordFixAttemptResult", 4),
    ToolSpec("check_collateral", "tools.collateral:check_collateral", "tools.collateral:CheckCollateralInput",
             "tools.collateral:CheckCollateralResult", 4),
    ToolSpec("capture_knowledge", "tools.knowledge.capture:capture_knowledge",
             "tools.knowledge.capture:CaptureKnowledgeInput", "tools.knowledge.capture:CaptureKnowledgeResult", 5),
    ToolSpec("close_session", "tools.sessions:close_session", "tools.sessions:CloseSessionInput",
             "tools.sessions:CloseSessionResult"),
    ToolSpec("inspect_checkpoint", "tools.numerics.checkpoint:inspect_checkpoint",
             "tools.numerics.checkpoint:InspectCheckpointInput", "tools.numerics.checkpoint:InspectCheckpointResult"),
    ToolSpec("analyze_training_log", "tools.numerics.training_log:analyze_training_log",
             "tools.numerics.training_log:AnalyzeTrainingLogInput",
             "tools.numerics.training_log:AnalyzeTrainingLogResult"),
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
                 "server.readers:read_session"),
    ResourceSpec("rootcause://runs/{run_id}/log", "run_log",
                 "The full output log of a run recorded by reproduce and the other tools that run commands.",
                 "server.readers:read_run_log", "text/plain"),
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
