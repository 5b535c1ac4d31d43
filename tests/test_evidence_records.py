"""Typed session evidence: the registry, old sessions that still read, the report's sections, the baseline."""

from __future__ import annotations

from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.engines.reproduce import ReproduceInput, reproduce
from rootcause.tools.engines.start_session import StartSessionInput, start_session
from rootcause.tools.judge.baseline import baseline_of
from rootcause.tools.record.evidence import FixAttemptEvidence, HypothesisEvidence, ReproduceEvidence
from rootcause.tools.record.registry import evidence_of, protocol_sections
from rootcause.tools.record.report import render_report
from rootcause.tools.record.store import SessionStore

pytestmark = pytest.mark.anyio


def test_old_session_data_still_reads() -> None:
    old = {"status": "flaky", "consistent": False,
           "runs": [{"outcome": "fail", "signature": "v1|ZeroDivisionError|division by zero"}, {"outcome": "pass"}],
           "diagnosis": {"signature": "v1|ZeroDivisionError|division by zero", "exception_type": "ZeroDivisionError",
                         "message": "division by zero"}}
    typed = evidence_of("reproduce", old)
    assert isinstance(typed, ReproduceEvidence)
    assert [r.outcome for r in typed.runs] == ["fail", "pass"]
    assert typed.signature() == "v1|ZeroDivisionError|division by zero"
    assert typed.error() == "ZeroDivisionError: division by zero"
    assert evidence_of("no_such_tool", {}) is None
    assert evidence_of("record_fix_attempt", {"run": {"outcome": "pass", "run_id": "r"}}).run.outcome == "pass"


def test_protocol_sections_render_each_tool_model() -> None:
    class Ev:
        def __init__(self, seq: int, tool: str, data: dict) -> None:
            self.seq, self.tool, self.data = seq, tool, data

    hypothesis = HypothesisEvidence(number=1, hypothesis="the cap is missing", result="supported", reason="passed",
                                    expect="pass", confidence=0.9, gate={"passed": True, "checks": []})
    fix = FixAttemptEvidence(attempt=1, description="cap the warm-up", command="python train.py", fixed=False,
                             judged=False, reason="not judged: outside the root", consecutive_failures=0)
    lines = protocol_sections([Ev(2, "verify_hypothesis", hypothesis.model_dump(mode="json")),
                               Ev(3, "record_fix_attempt", fix.model_dump(mode="json")),
                               Ev(4, "capture_knowledge", {})])
    text = "\n".join(lines)
    assert "## Hypotheses" in text and "1. **SUPPORTED** — the cap is missing" in text
    assert "## Fix attempts" in text and "1. **not judged** — cap the warm-up" in text
    assert text.index("## Hypotheses") < text.index("## Fix attempts")
    assert "**Fix attempt 1: not judged**" in fix.render()


async def test_reproduce_evidence_round_trip_and_interpreter_note(repo: Path) -> None:
    (repo / "boom.py").write_text("raise KeyError('missing_key')\n")
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="KeyError: 'missing_key' when loading"), ctx).session_id
    result = await reproduce(ReproduceInput(command="python boom.py", runs=1, session_id=sid), ctx)
    assert result.status == "reproduced" and result.matches_symptom is True
    assert result.interpreter.startswith("rootcause's own interpreter")  # the repo has no .venv
    assert "no .venv in the project; pass python=" in result.summary()
    state = SessionStore(ctx.workspace).load(sid)
    baseline = baseline_of(state)
    assert baseline is not None and baseline.signature == result.diagnosis.signature
    report = render_report(state)
    assert "**reproduced**" in report and "Expected: the session's symptom (KeyError" in report


REPORT_PY = Path(__file__).resolve().parent.parent / "tools" / "record" / "report.py"


def _every_tool(ctx: ToolContext, sid: str) -> dict[str, str]:
    """Record one evidence of every registered tool, each the way its tool records it; returns tool -> a line
    its rendering must show in the report."""
    from rootcause.tools.bisect.common import record_evidence
    from rootcause.tools.engines.bisect_commits import BisectCommitsResult, CommitInfo, TestedCommit
    from rootcause.tools.engines.bisect_env import BisectEnvResult, EnvSide
    from rootcause.tools.engines.bisect_versions import BisectVersionsResult, TestedVersion
    from rootcause.tools.record.evidence import CollateralEvidence, DiagnoseLogEvidence
    from rootcause.tools.record.findings import CheckpointEvidence, CompareSetupsEvidence, TrainingLogEvidence, dump
    from rootcause.tools.record.knowledge_evidence import CaptureEvidence, ConstraintsEvidence

    store = SessionStore(ctx.workspace)
    typed = [
        ReproduceEvidence(status="reproduced", command=["python", "train.py"]),
        DiagnoseLogEvidence(diagnosis={"category": "nonfinite", "exception_type": "RuntimeError",
                                       "message": "loss is nan at step 40"}, source="train.log"),
        HypothesisEvidence(number=1, hypothesis="the warm-up is uncapped", result="supported", reason="lr 3x peak"),
        FixAttemptEvidence(attempt=1, description="cap the warm-up", command="python train.py", fixed=True),
        CollateralEvidence(verdict="clean", command=["pytest", "-q"], base="abc1234567", reason="no new failures"),
        CompareSetupsEvidence(summary={"package": 1}, total=1, suspect=["[package] torch"], suspect_count=1,
                              good={"tree": "main"}, bad={"tree": "feature"}),
        ConstraintsEvidence(matches=[{"title": "Warm-up factor must be capped", "file": "c.md", "line": 5}],
                            pitfalls=["lr_too_high"], documented_pitfalls=["lr_warmup_uncapped"]),
        CaptureEvidence(kind="constraint", written={"title": "Cap the ramp", "file": "c.md", "line": 9,
                                                    "section": "Optimizer"}, pitfall="lr_warmup_uncapped"),
        TrainingLogEvidence(path="train.log", steps=120, first_nonfinite_step=40, spike_count=2,
                            largest_spike={"step": 38, "metric": "grad_norm", "value": 90.0, "factor": 12.5},
                            plot_path=".rootcause/plots/p.png"),
        CheckpointEvidence(path="ckpt.pt", format="torch", tensors=4, parameters=1000, values_checked=True,
                           nonfinite_tensors=1, nonfinite=["layer.weight"],
                           likely_renames=[{"from": "_orig_mod.w", "to": "w"}]),
    ]
    for evidence in typed:
        store.record(sid, evidence.tool, evidence.render() if evidence.tool != "diagnose_log" else "diagnosed: nan",
                     dump(evidence))
    record_evidence(ctx, sid, "bisect_commits", BisectCommitsResult(
        good="v1", bad="HEAD", good_sha="a" * 40, bad_sha="b" * 40, status="found",
        first_bad_commit=CommitInfo(sha="c" * 40, short="ccccccc", subject="drop the warm-up cap"),
        tested=[TestedCommit(sha="c" * 40, short="ccccccc", subject="s", outcome="fail")]))
    record_evidence(ctx, sid, "bisect_versions", BisectVersionsResult(
        package="torch", good="2.1.0", bad="2.2.0", status="found", first_bad="2.2.0", last_good="2.1.0",
        tested=[TestedVersion(version="2.2.0", outcome="fail")], builds=2))
    record_evidence(ctx, sid, "bisect_env", BisectEnvResult(
        package="numpy", version="2.0.0", env_a=EnvSide(package_version="1.26.4", outcome="pass"),
        env_b=EnvSide(package_version="2.0.0", outcome="fail", error="AttributeError: np.float_"), freeze_diff=[],
        reconciled=[], verdict="version_flips_outcome", detail="numpy 2.0.0 flips the outcome"))
    return {
        "reproduce": "**reproduced** — `python train.py`", "diagnose_log": "diagnosed: nan",
        "verify_hypothesis": "**H1: SUPPORTED** — the warm-up is uncapped",
        "record_fix_attempt": "**Fix attempt 1: fixed** — cap the warm-up",
        "check_collateral": "**clean** — no new failures",
        "compare_setups": "1 difference(s) (package 1), 1 suspect.",
        "check_constraints": "- Documented by the project (not listed): lr_warmup_uncapped",
        "capture_knowledge": "Linked to built-in pitfall lr_warmup_uncapped.",
        "analyze_training_log": "![analyze_training_log plot](.rootcause/plots/p.png)",
        "inspect_checkpoint": "- Likely renames: _orig_mod.w → w",
        "bisect_commits": "- First bad commit: ccccccc drop the warm-up cap",
        "bisect_versions": "- First bad: torch==2.2.0 (last good 2.1.0)",
        "bisect_env": "- B: numpy==2.0.0 → fail — AttributeError: np.float_",
    }


def test_a_session_with_every_tools_evidence_renders_through_the_models(repo: Path) -> None:
    from rootcause.tools.record.tool_evidence import _REGISTRY

    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="loss is NaN after the warm-up"), ctx).session_id
    expected = _every_tool(ctx, sid)
    assert set(expected) == set(_REGISTRY), "a tool with an evidence model is missing from this session"
    state = SessionStore(ctx.workspace).load(sid)
    assert all(evidence_of(ev.tool, ev.data) is not None for ev in state.evidence)
    report = render_report(state)
    for seq, tool in enumerate([ev.tool for ev in state.evidence], start=1):
        assert f"### {seq}. {tool}" in report
        assert expected[tool] in report, (tool, report)
    assert report.count("![analyze_training_log plot]") == 1
    source = REPORT_PY.read_text(encoding="utf-8")
    assert ".data[" not in source and ".data.get" not in source and "ev.data" not in source.replace(
        "render_evidence(ev.tool, ev.data, ev.summary)", "")


def test_old_evidence_still_reads_and_shows_its_plot(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="loss is NaN"), ctx).session_id
    store = SessionStore(ctx.workspace)
    # As recorded before the models: the tool's own summary text and a plain dict.
    store.record(sid, "analyze_training_log", "train.log: 50 steps.\nFIRST NON-FINITE at step 44",
                 {"path": "train.log", "steps": 50, "first_nonfinite_step": 44, "plot_path": ".rootcause/plots/o.png",
                  "lr": None, "largest_spike": None, "spikes": []})
    store.record(sid, "check_constraints", "2 entries matched",
                 {"matches": [{"title": "t", "file": "c.md", "line": 3, "score": 1.5}], "pitfalls": ["lr_too_high"],
                  "guard_violations": [], "codegen_stale": None})
    store.record(sid, "bisect_env", "bisect_env numpy==2.0.0: conflict", {"package": "numpy", "verdict": "conflict",
                 "env_a": {"outcome": "skip"}, "env_b": {}, "freeze_diff": [{"package": "x", "a": "1", "b": "2"}]})
    state = store.load(sid)
    report = render_report(state)
    assert "FIRST NON-FINITE at step 44\n\n![analyze_training_log plot](.rootcause/plots/o.png)" in report
    assert "2 entries matched" in report and "bisect_env numpy==2.0.0: conflict" in report
    constraints = evidence_of("check_constraints", state.evidence[1].data)
    assert constraints.top_pitfall() == "lr_too_high" and constraints.documented_pitfalls == []
    assert evidence_of("bisect_env", state.evidence[2].data).env_a.outcome == "skip"


async def test_check_constraints_reads_the_diagnosis_through_the_models(repo: Path) -> None:
    from rootcause.tools.engines.check_constraints import CheckConstraintsInput, check_constraints

    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="training broke"), ctx).session_id
    # A diagnose_log entry recorded with only part of a diagnosis (an older session).
    SessionStore(ctx.workspace).record(sid, "diagnose_log", "diagnosed", {"diagnosis": {
        "category": "nonfinite", "exception_type": "FloatingPointError", "message": "loss is nan",
        "keywords": ["GradScaler", "fp16"]}})
    result = await check_constraints(CheckConstraintsInput(session_id=sid, paths=[]), ctx)
    assert result.category == "nonfinite"
    assert "fp16" in result.query and "FloatingPointError" in result.query
    assert "fp16_overflow_gradscaler" in [p.name for p in result.pitfalls]
