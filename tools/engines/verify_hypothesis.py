"""verify_hypothesis: Phase 3 — one falsifiable hypothesis, one minimal experiment, the verification gate."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator
from rootcause import prompts
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult, bounded
from rootcause.tools.core.validate import regex_field
from rootcause.tools.judge import protocol
from rootcause.tools.judge.baseline import (
    FALLBACK_FACT,
    Baseline,
    TreeChanges,
    baseline_of,
    tree_changes,
    worktree_changes,
)
from rootcause.tools.judge.experiment import run_command
from rootcause.tools.judge.gate import (
    Expectation,
    Verdict,
    alternatives_named,
    check_falsifiable,
    disproof_checked,
    disproof_patterns,
    evidence_vs_correlation,
    judge,
    one_variable,
    parse_expect,
)
from rootcause.tools.observe.evidence import Observation, RunFields, declare, yardstick
from rootcause.tools.observe.evidence.trees import ExperimentTree, experiment_tree, settle_tree
from rootcause.tools.record.evidence import Gate, HypothesisEvidence
from rootcause.tools.record.registry import evidence_of
from rootcause.tools.record.store import SessionState, SessionStore, require_open

REVIEW_BELOW = 0.8
FLAKY_RUNS = 3
_TAIL_CHARS = 1_200


class VerifyHypothesisInput(RunFields):
    """Phase 3: test ONE falsifiable hypothesis with a minimal experiment that changes one thing.

    Runs the experiment command, compares the outcome with the prediction and with the session's
    baseline reproduction (supported / refuted / inconclusive), and applies the verification gate:
    one variable changed, evidence rather than correlation, alternatives named, disproof looked for.
    When confidence is below 0.8 or a gate check fails, needs_review is true and review_prompt is a
    critical-reviewer brief to hand to a subagent before acting. Refuses a hypothesis that joins
    several causes ("A or B") or lacks a prediction or a disproof. A supported result re-opens a
    session stopped after three failed fixes.
    """

    session_id: str = Field(description="The id returned by start_session (required).")
    hypothesis: str = Field(description="ONE specific cause, e.g. 'load() drops every value because the "
                                        "default THRESHOLD is above all of them'.")
    prediction: str = Field(description="What the experiment shows if the hypothesis is true.")
    expect: str = Field(description="How the run decides: pass | fail | same_signature | different_signature "
                                    "(against the session's reproduced failure) | a regex the output must match.")
    changed: str = Field(description="The one thing this experiment changes against the reproduction "
                                     "(a line of code, an env var, an argument).")
    disproof: str = Field(description="The observation that would disprove the hypothesis, recorded as stated; "
                                      "only text marked between slashes is searched for in the output "
                                      "(\"still fails with /ZeroDivisionError/\").")
    alternatives: list[str] = Field(default_factory=list,
                                    description="Other causes that would produce the same symptom.")
    confidence: float = Field(0.8, ge=0, le=1,
                              description="Your confidence in the hypothesis, 0..1; below 0.8 asks for a "
                                          "critical review.")
    disproof_regex: str | None = Field(None, description="A regex for the disproof, searched for in the output "
                                                         "(instead of the /marked/ text).")
    runs: int = Field(1, ge=1, le=10,
                      description="Runs of the experiment (1..10); raised to 3 when the baseline was flaky.")
    check_disproof_regex = regex_field("disproof_regex", re.MULTILINE)

    @field_validator("expect")
    @classmethod
    def _expect_word_or_regex(cls, value: str) -> str:
        parse_expect(value)  # refused naming expect
        return value

    @model_validator(mode="after")
    def _marked_patterns_compile(self) -> VerifyHypothesisInput:
        disproof_patterns(self.disproof, self.disproof_regex)  # refused naming the /pattern/ marked in disproof
        return self


class VerifyHypothesisResult(ToolResult):
    session_id: str
    number: int = Field(description="This hypothesis's number in the session (H1, H2...).")
    result: Verdict
    reason: str
    expect: str
    runs: list[Observation]
    baseline: Baseline | None
    changes: str = Field(description="What differs in the tree the experiment ran in: the working tree since the "
                                     "session started, or a worktree / copy against its own HEAD.")
    experiment_tree: str = Field("", description="Which tree the experiment's code came from.")
    gate: Gate
    disproof_observed: bool | None
    needs_review: bool
    review_prompt: str | None
    confidence: float
    session_status: str
    path: str
    path_switched: str | None = Field(None, description="Why the session left the Quick Path on this call.")
    next: str

    def summary(self) -> str:
        lines = [f"H{self.number}: {self.result.upper()} — {self.reason}",
                 "Runs: " + "; ".join(f"{r.run_id} {r.one_line()}" for r in self.runs),
                 f"Gate: {'passed' if self.gate.passed else 'FAILED'}"]
        lines += [f"  [{'x' if c.passed else ' '}] {c.name}: {c.why}" for c in self.gate.checks]
        if self.needs_review:
            lines.append(f"Needs review (confidence {self.confidence:.2f}): hand review_prompt to a critical-"
                         "reviewer subagent before acting.")
        lines.append(f"Next: {self.next}")
        return "\n".join(lines)


def _validate(inp: VerifyHypothesisInput) -> Expectation:
    for name in ("hypothesis", "changed"):
        if not getattr(inp, name).strip():
            raise UsageError(f"{name} is empty.", f"fill {name}: verify_hypothesis needs hypothesis, prediction, "
                                                  "command, expect, changed and disproof")
    if not 0.0 <= inp.confidence <= 1.0:
        raise UsageError(f"confidence must be between 0 and 1, got {inp.confidence}.", "give e.g. 0.7 for 70%")
    if not 1 <= inp.runs <= 10:
        raise UsageError(f"runs must be between 1 and 10, got {inp.runs}.", "use 1, or 3 for a flaky failure")
    check_falsifiable(inp.hypothesis, inp.prediction, inp.disproof)
    disproof_patterns(inp.disproof, inp.disproof_regex)
    return parse_expect(inp.expect)


def _conclusion(inp: VerifyHypothesisInput, number: int, verdict: Verdict, reason: str) -> str:
    return (f"Hypothesis H{number}: {inp.hypothesis.strip()}\n\nPrediction: {inp.prediction.strip()}\n\n"
            f"Conclusion drawn from the experiment: the hypothesis is {verdict.upper()} ({reason}). "
            f"Stated confidence: {inp.confidence:.0%}.")


def _evidence(inp: VerifyHypothesisInput, state: SessionState, observed_runs: list[tuple[Observation, str]],
              baseline: Baseline | None, changes: TreeChanges | None, gate: Gate, observed: bool | None,
              expect: Expectation) -> str:
    runs = [r for r, _ in observed_runs]
    lines = [f"- Session symptom: {state.symptom[:400]}",
             f"- Baseline reproduction: {baseline.one_line() if baseline else 'none recorded in this session'}",
             f"- Experiment command: `{inp.describe()}` ({len(runs)} run(s))"]
    for run in runs:
        lines.append(f"  - run {run.run_id}: {run.one_line()}; signature `{run.signature or '-'}`; "
                     f"log {run.log_path}")
    tail = observed_runs[0][1].strip()[-_TAIL_CHARS:] if observed_runs else ""
    if tail:
        lines += ["  - output of the first run (tail):", "", "```text", tail, "```", ""]
    lines += [f"- Expected: {expect.describe()}",
              f"- The one thing changed (as stated): {inp.changed.strip()}",
              f"- What changed in the tree the experiment ran in: {changes.summary() if changes else 'not seen'}",
              f"- Disproof stated: {inp.disproof.strip()} — "
              f"{ {True: 'observed', False: 'not observed', None: 'not checkable by the run'}[observed] }",
              f"- Alternatives named: {'; '.join(inp.alternatives) or 'none'}"]
    failed = [c for c in gate.checks if not c.passed]
    lines.append("- Gate checks failed: " + ("; ".join(f"{c.name}: {c.why}" for c in failed) if failed else "none"))
    earlier = [evidence_of(e.tool, e.data) for e in state.evidence if e.tool == "verify_hypothesis"]
    for ev in earlier[-5:]:
        if isinstance(ev, HypothesisEvidence):
            lines.append(f"- Earlier H{ev.number}: {ev.result} — {ev.hypothesis[:200]}")
    return "\n".join(lines)


def _next(verdict: Verdict, needs_review: bool, reopened: bool) -> str:
    if verdict == "inconclusive":
        text = ("do not act on this: fix what kept the experiment from deciding (timeout, tests not run, unstable "
                "outcome) and rerun it, or design a sharper experiment")
    elif verdict == "refuted":
        text = ("update your understanding and form ONE new hypothesis from the evidence (no guess-and-check); "
                "the named alternatives are the first candidates")
    elif needs_review:
        text = ("before acting, launch a critical-reviewer subagent with review_prompt; act only on a CONFIRMED "
                "verdict, otherwise run the experiment it asks for")
    else:
        text = ("Phase 4: write a failing test first, make one targeted fix at the root cause, then "
                "record_fix_attempt with the reproducer and the module's tests")
    if reopened:
        text = "session re-opened, the fix-attempt count restarts; " + text
    return text


def _changes_in(tree: ExperimentTree, ctx: ToolContext, state: SessionState) -> TreeChanges | None:
    """The working tree since the session start; a worktree or copy inside the root against its own HEAD;
    code from outside the root: not seen."""
    if tree.kind == "root":
        return tree_changes(ctx.root, state)
    return worktree_changes(tree.path) if tree.kind == "other_tree" and tree.path else None


async def verify_hypothesis(inp: VerifyHypothesisInput, ctx: ToolContext) -> VerifyHypothesisResult:
    store = SessionStore(ctx.workspace)
    state = require_open(store, inp.session_id)
    expect = _validate(inp)
    switched = protocol.quick_path_overdue(state)
    if switched:
        state = protocol.switch_to_full(store, state, switched)
    baseline = baseline_of(state)
    runs_wanted = max(inp.runs, FLAKY_RUNS) if baseline is not None and baseline.flaky else inp.runs
    decl = declare(inp, ctx.workspace, label="verify_hypothesis")
    tree = experiment_tree(decl, ctx.root)
    changes = _changes_in(tree, ctx, state)  # before the run: what the run writes itself is not the experiment's
    observed_runs = await run_command(inp, ctx, runs=runs_wanted, label="verify_hypothesis",
                                      yardstick=yardstick(None, state))
    runs = [r for r, _ in observed_runs]
    settled = settle_tree(tree, ctx.root, decl.cwd, [f.file for r in runs if r.diagnosis for f in r.diagnosis.frames],
                          [p for r in runs for p in r.outside_root])
    if settled != tree:
        tree, changes = settled, _changes_in(settled, ctx, state)
    if baseline is None:
        first_fail = next((r for r in runs if r.outcome != "pass" and r.signature), None)
        if first_fail is not None:
            store.set_facts(inp.session_id, **{FALLBACK_FACT: {
                "status": "fallback", "signature": first_fail.signature, "outcomes": [first_fail.outcome],
                "error": first_fail.error}})
    verdict, reason = judge(expect, observed_runs, baseline)
    unjudged = [r for r in runs if r.outcome == "inconclusive"]
    if unjudged:  # a run the metric yardstick cannot judge (the metric missing) decides nothing, never a pass
        verdict, reason = "inconclusive", f"{len(unjudged)}/{len(runs)} run(s) cannot be judged: {unjudged[0].problem}"
    disproof, observed = disproof_checked(inp.disproof, inp.disproof_regex, verdict, observed_runs, baseline)
    gate = Gate.of([
        one_variable(changes, inp.changed, {**inp.env}, tree),
        evidence_vs_correlation(verdict, reason, expect, runs, baseline),
        alternatives_named(inp.alternatives),
        disproof,
    ])
    needs_review = inp.confidence < REVIEW_BELOW or not gate.passed
    number = sum(1 for e in state.evidence if e.tool == "verify_hypothesis") + 1
    review_prompt = None
    if needs_review:
        review_prompt = prompts.render(
            "verification_subagent", conclusion=_conclusion(inp, number, verdict, reason),
            evidence=bounded(_evidence(inp, state, observed_runs, baseline, changes, gate, observed, expect), 12_000))
    reopened = verdict == "supported" and state.status == "stopped"
    result = VerifyHypothesisResult(
        session_id=state.session_id, number=number, result=verdict, reason=reason, expect=expect.describe(),
        runs=runs, baseline=baseline, experiment_tree=tree.why,
        changes=changes.summary() if changes else ("not seen" if tree.kind == "unseen" else "not a git repository"),
        gate=gate, disproof_observed=observed, needs_review=needs_review, review_prompt=review_prompt,
        confidence=inp.confidence, session_status="open" if reopened else state.status,
        next=(f"{switched}. " if switched else "") + _next(verdict, needs_review, reopened),
        path=state.path, path_switched=switched,
    )
    evidence = HypothesisEvidence(
        number=number, hypothesis=inp.hypothesis.strip(), prediction=inp.prediction.strip(),
        expect=expect.describe(), changed=inp.changed.strip(), disproof=inp.disproof.strip(),
        alternatives=inp.alternatives, confidence=inp.confidence, command=inp.describe(),
        result=verdict, reason=reason, gate=gate.model_dump(mode="json"), needs_review=needs_review,
        disproof_observed=observed, runs=runs, changes=result.changes,
    )
    data = evidence.model_dump(mode="json")
    data["baseline"] = baseline.model_dump(mode="json") if baseline else None
    store.record(inp.session_id, "verify_hypothesis", evidence.render(), data, phase=3)
    store.set_facts(inp.session_id, **{protocol.HYPOTHESES: number})
    if reopened:
        protocol.reopen(store, state, f"H{number} supported: {inp.hypothesis.strip()[:200]}")
    return result

