"""The evidence of reproduce, diagnose_log, verify_hypothesis, record_fix_attempt and check_collateral as
typed models with their own renderers (the registry that finds them: registry.py).

A tool records `SomeEvidence(...).model_dump(mode="json")` as its session evidence data; the
session report, the baseline and later tools read it back with `evidence_of(ev)`, never by
another tool's dict keys. Models ignore unknown keys and default missing ones, so sessions
recorded by an older version still read.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, Field
from rootcause.tools.observe.diagnosis import Diagnosis
from rootcause.tools.observe.evidence.observation import Observation, diagnosis_line
from rootcause.tools.record.tool_evidence import ToolEvidence, register
from rootcause.tools.run.environment import EnvironmentFacts


class GateCheck(BaseModel):
    name: Literal["one_variable", "evidence_vs_correlation", "alternatives_named", "disproof_checked"]
    passed: bool
    why: str


class Gate(BaseModel):
    passed: bool
    checks: list[GateCheck]

    @classmethod
    def of(cls, checks: list[GateCheck]) -> Gate:
        return cls(passed=all(c.passed for c in checks), checks=checks)


def _old_run(value: Any) -> Any:
    """Runs recorded before the evidence layer lack outcome_reason and log_uri."""
    if isinstance(value, dict):
        value = {"outcome_reason": f"exit {value.get('exit_code')}", "duration_s": 0.0, "log_path": "",
                 "log_uri": f"rootcause://runs/{value.get('run_id', '')}/log", "run_id": "", "outcome": "fail",
                 **{k: v for k, v in value.items() if v is not None or k not in ("outcome_reason",)}}
    return value


def _partial_diagnosis(value: Any) -> Any:
    """A diagnosis recorded with only some of its fields still reads."""
    if isinstance(value, dict):
        return {"category": "python_exception", "signature": "", **value}
    return value


def _old_runs(value: Any) -> Any:
    return [_old_run(v) for v in value] if isinstance(value, list) else value


Runs = Annotated[list[Observation], BeforeValidator(_old_runs)]
OneRun = Annotated[Observation | None, BeforeValidator(_old_run)]
PartialDiagnosis = Annotated[Diagnosis | None, BeforeValidator(_partial_diagnosis)]


@register
class ReproduceEvidence(ToolEvidence):
    tool: ClassVar[str] = "reproduce"

    status: str | None = None
    command: list[str] = Field(default_factory=list)
    runs: Runs = Field(default_factory=list)
    diagnosis: PartialDiagnosis = None
    consistent: bool | None = None
    matches_symptom: bool | None = None
    expected: str | None = None
    outside_root: list[str] = Field(default_factory=list)
    recent_commits: list[str] = Field(default_factory=list)
    environment: EnvironmentFacts | None = None

    def render(self) -> str:
        lines = [f"**{self.status}** — `{' '.join(self.command)[:200]}`, runs: "
                 + ", ".join(f"{r.outcome} ({r.duration_s:.1f}s)" for r in self.runs)]
        if self.expected:
            lines.append(f"- Expected: {self.expected} — matches: {self.matches_symptom}")
        swallowed = [r.outcome_reason for r in self.runs if r.outcome_reason.startswith("exit 0, but")]
        if swallowed:
            lines.append(f"- {swallowed[0]}")
        read = [f"{r.yardstick.reason} ({r.outcome})" for r in self.runs if r.yardstick is not None]
        if read and read[0].split(" (")[0] not in (swallowed or [""])[0]:
            lines.append(f"- Metric read: {read[0]}" + (f"; {len(read) - 1} more run(s)" if len(read) > 1 else ""))
        if self.outside_root:
            lines.append(f"- Imports project code from outside the root: {', '.join(self.outside_root[:3])}")
        if self.diagnosis:
            d = self.diagnosis
            lines += [f"- Diagnosis: {diagnosis_line(d)}", f"- Signature: `{d.signature}`"]
            if d.keywords:
                lines.append(f"- Keywords: {', '.join(d.keywords)}")
            not_ok = {k: v.outcome for k, v in d.ranks.items() if v.outcome != "ok"}
            if d.ranks:
                shown = ", ".join(f"{k}:{v}" for k, v in list(not_ok.items())[:8])
                lines.append(f"- Ranks: {len(not_ok)}/{len(d.ranks)} not ok ({shown})")
            for stack in d.stacks[:4]:
                if stack.collective:
                    who = f"rank {stack.rank}" if stack.rank is not None else f"pid {stack.pid}"
                    lines.append(f"- {who} waits in {stack.collective}")
        if self.environment is not None:
            lines.append(f"- Environment: {self.environment.one_line()}")
        if self.recent_commits:
            lines.append(f"- Recent commits: {'; '.join(self.recent_commits[:3])}")
        lines.append(f"- Logs: {', '.join(r.log_path for r in self.runs)}")
        return "\n".join(lines)

    def found_diagnosis(self) -> Diagnosis | None:
        return self.diagnosis

    def error(self) -> str | None:
        d = self.diagnosis
        if d is None or not d.exception_type:
            return None
        return f"{d.exception_type}: {d.message or ''}".strip()

    def signature(self) -> str | None:
        if self.diagnosis is not None and self.diagnosis.signature:
            return self.diagnosis.signature
        return next((r.signature for r in self.runs if r.failed and r.signature), None)


@register
class DiagnoseLogEvidence(ToolEvidence):
    tool: ClassVar[str] = "diagnose_log"

    diagnosis: PartialDiagnosis = None
    source: str = ""

    def found_diagnosis(self) -> Diagnosis | None:
        return self.diagnosis


@register
class HypothesisEvidence(ToolEvidence):
    tool: ClassVar[str] = "verify_hypothesis"
    section: ClassVar[str | None] = "Hypotheses"

    number: int | None = None
    hypothesis: str = ""
    prediction: str = ""
    expect: str | None = None
    changed: str = ""
    disproof: str = ""
    alternatives: list[str] = Field(default_factory=list)
    confidence: float | None = None
    command: str = ""
    result: str = "?"
    reason: str = ""
    gate: Gate = Field(default_factory=lambda: Gate(passed=False, checks=[]))
    needs_review: bool = False
    disproof_observed: bool | None = None
    runs: Runs = Field(default_factory=list)
    changes: str = ""

    def render(self) -> str:
        lines = [f"**H{self.number}: {self.result.upper()}** — {self.hypothesis}", "",
                 f"- Prediction: {self.prediction} (expect `{self.expect}`)",
                 f"- Changed: {self.changed}",
                 f"- Experiment: `{self.command}` → " + "; ".join(r.one_line() for r in self.runs),
                 f"- Why: {self.reason}",
                 f"- Disproof: {self.disproof}",
                 f"- Alternatives: {'; '.join(self.alternatives) or 'none named'}",
                 f"- Confidence: {self.confidence or 0:.2f}; gate {'passed' if self.gate.passed else 'failed'}"
                 + ("; **needs review**" if self.needs_review else "")]
        lines += [f"  - [{'x' if c.passed else ' '}] {c.name}: {c.why}" for c in self.gate.checks]
        return "\n".join(lines)

    def protocol_lines(self, seq: int) -> list[str]:
        failed = [c.name for c in self.gate.checks if not c.passed]
        review = "; needs review" if self.needs_review else ""
        gate = "passed" if self.gate.passed else "failed: " + ", ".join(failed)
        return [f"{self.number or '?'}. **{self.result.upper()}** — {self.hypothesis} "
                f"_(expect {self.expect}; confidence {self.confidence}; gate {gate}{review}; evidence {seq})_",
                f"   - {self.reason}"]


@register
class FixAttemptEvidence(ToolEvidence):
    tool: ClassVar[str] = "record_fix_attempt"
    section: ClassVar[str | None] = "Fix attempts"

    attempt: int | None = None
    description: str = ""
    command: str = ""
    fixed: bool = False
    judged: bool = True
    reason: str = ""
    run: OneRun = None
    original_signature: str | None = None
    signature_gone: bool | None = None
    consecutive_failures: int | None = None
    stop: bool = False
    path_switched: list[str] = Field(default_factory=list)

    def render(self) -> str:
        from rootcause.tools.record.protocol_facts import STOP_AFTER, STOP_MESSAGE

        verdict = "fixed" if self.fixed else "STOP" if self.stop else "not fixed" if self.judged else "not judged"
        run = self.run.one_line() if self.run is not None else "no run"
        return (f"**Fix attempt {self.attempt}: {verdict}** — {self.description}\n\n"
                f"- Verification: `{self.command}` → {run}\n- Why: {self.reason}\n"
                f"- Consecutive failures: {self.consecutive_failures}/{STOP_AFTER}"
                + "".join(f"\n- Path: {s}" for s in self.path_switched)
                + (f"\n- {STOP_MESSAGE}" if self.stop else ""))

    def protocol_lines(self, seq: int) -> list[str]:
        verdict = "fixed" if self.fixed else "STOP" if self.stop else "not fixed" if self.judged else "not judged"
        return [f"{self.attempt or '?'}. **{verdict}** — {self.description} _(`{self.command}`; consecutive "
                f"failures {self.consecutive_failures}; evidence {seq})_", f"   - {self.reason}"]


@register
class CollateralEvidence(ToolEvidence):
    tool: ClassVar[str] = "check_collateral"

    verdict: str = "inconclusive"
    new_failures: list[str] = Field(default_factory=list)
    fixed: list[str] = Field(default_factory=list)
    still_failing: list[str] = Field(default_factory=list)
    base: str = ""
    command: list[str] = Field(default_factory=list)
    diff_hash: str | None = None
    interpreter: str = ""
    reason: str = ""
    base_ref: str = ""

    def render(self) -> str:
        text = (f"check_collateral `{' '.join(self.command)[:300]}` against {self.base_ref or self.base[:10]} "
                f"({self.base[:10]}): **{self.verdict}** — {self.reason}")
        if self.new_failures:
            text += "\n\nNew failures: " + ", ".join(self.new_failures[:20])
        if self.interpreter:
            text += f"\n\nInterpreter: {self.interpreter}"
        return text


__all__ = ["CollateralEvidence", "DiagnoseLogEvidence", "FixAttemptEvidence", "Gate", "GateCheck",
           "HypothesisEvidence", "ReproduceEvidence", "diagnosis_line"]
