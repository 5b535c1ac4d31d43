"""verify_hypothesis: falsifiability, the expectation, the gate, real experiments in a real repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.close_session import SessionIdInput
from rootcause.tools.engines.start_session import StartSessionInput, start_session
from rootcause.tools.engines.verify_hypothesis import VerifyHypothesisInput, verify_hypothesis
from rootcause.tools.judge.baseline import Baseline
from rootcause.tools.judge.gate import check_falsifiable, disproof_patterns, judge_run, parse_expect
from rootcause.tools.observe.evidence import Observation as RunObservation
from rootcause.tools.record.report import render_report
from rootcause.tools.record.store import SessionStore

from tests.conftest import error_text, git, memory_client, structured
from tests.protocol_project import REPRODUCER, SYMPTOM, edit, make_project, record_baseline

GOOD = {
    "hypothesis": "load() drops every value because the default THRESHOLD of 10 is above all of them",
    "prediction": "with THRESHOLD=0 the reproducer prints the mean and exits 0",
    "command": "THRESHOLD=0 python stats.py data.json",
    "expect": "pass",
    "changed": "the THRESHOLD environment variable (10 -> 0)",
    "disproof": "the run still fails with /ZeroDivisionError/",
    "alternatives": ["data.json has no values at all", "mean() is called on the wrong list"],
    "confidence": 0.9,
}


# ---------------------------------------------------------------- pure rules


@pytest.mark.parametrize(
    ("hypothesis", "fragment"),
    [
        ("the cast to bf16 or the loss scaler overflows", "'or'"),
        ("either the sampler or the collate function drops the labels", "'either'"),
        ("the all_gather and/or the reduce_scatter mismatches shapes", "'and/or'"),
        ("The data loader causes the hang. The NCCL timeout is also responsible for it.", "2 separate causal"),
    ],
)
def test_joined_hypotheses_are_refused(hypothesis: str, fragment: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_falsifiable(hypothesis, "the run passes", "it still fails")
    text = str(caught.value)
    assert fragment in text and "one cause" in text.lower()


@pytest.mark.parametrize(
    "hypothesis",
    [
        "the hang appears whether or not the profiler is on, because the barrier is unmatched",
        "with 2 or more ranks the sampler shards the data twice",
        "`x or y` in collate() returns the empty batch",
        "The sampler shards the data twice. It then hands rank 1 an empty batch.",
    ],
)
def test_single_hypotheses_pass(hypothesis: str) -> None:
    check_falsifiable(hypothesis, "the run passes", "it still fails the same way")


@pytest.mark.parametrize(
    ("prediction", "disproof", "message"),
    [("", "it fails", "no prediction"), ("it passes", " ", "no disproof"), ("it passes", "It passes!", "repeats")],
)
def test_missing_prediction_or_disproof(prediction: str, disproof: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_falsifiable("the threshold drops every value", prediction, disproof)


def test_parse_expect() -> None:
    assert parse_expect(" PASS ").kind == "pass"
    assert parse_expect("same_signature").kind == "same_signature"
    regex = parse_expect(r"loss=nan at step \d+")
    assert regex.kind == "regex" and regex.describe() == r"output matches /loss=nan at step \d+/"
    with pytest.raises(UsageError, match="neither"):
        parse_expect("shape (4, 8")
    with pytest.raises(UsageError, match="expect is empty"):
        parse_expect("  ")


def test_disproof_patterns_only_what_is_marked() -> None:
    assert disproof_patterns("still fails with /ZeroDivisionError/", None) == ("marked", ["ZeroDivisionError"])
    assert disproof_patterns(r"prints /loss=nan at step \d+/.", None) == ("marked", [r"loss=nan at step \d+"])
    assert disproof_patterns("anything /x/", "nan") == ("disproof_regex", ["nan"])
    for prose in ("still fails with 'ZeroDivisionError'", "the same error comes back", "the test passes",
                  "`mean()` still returns 0", "it fails in /usr/lib/x.so and/or a/b/c"):
        assert disproof_patterns(prose, None) == ("prose", []), prose
    with pytest.raises(UsageError, match="marked in disproof"):
        disproof_patterns("fails with /shape (4/", None)
    with pytest.raises(UsageError, match="disproof_regex"):
        disproof_patterns("x", "shape (4")


def _run(outcome: str, signature: str | None = None, **extra: Any) -> RunObservation:
    return RunObservation(run_id="r", outcome=outcome, outcome_reason="test", duration_s=1.0, log_path="x",
                          log_uri="rootcause://runs/r/log", signature=signature,
                          error=signature, **extra)


def test_judge_run_decides_and_abstains() -> None:
    base = Baseline(source="reproduce", status="reproduced", signature="S", outcomes=["fail", "fail"])
    assert judge_run(parse_expect("same_signature"), _run("fail", "S"), "", base)[0] == "supported"
    assert judge_run(parse_expect("same_signature"), _run("fail", "T"), "", base)[0] == "refuted"
    assert judge_run(parse_expect("different_signature"), _run("pass"), "", base)[0] == "inconclusive"
    assert judge_run(parse_expect("different_signature"), _run("fail", "T"), "", base)[0] == "supported"
    assert judge_run(parse_expect("same_signature"), _run("fail", "S"), "", None)[0] == "inconclusive"
    hang = _run("hang", "H", timed_out="wall")
    assert judge_run(parse_expect("fail"), hang, "", base)[0] == "inconclusive"
    hang_base = Baseline(source="reproduce", status="reproduced", signature="H", outcomes=["hang"])
    assert judge_run(parse_expect("same_signature"), hang, "", hang_base)[0] == "supported"
    assert judge_run(parse_expect("pass"), _run("fail", problem="pytest collected no tests (exit 5)"), "",
                     base)[0] == "inconclusive"
    assert judge_run(parse_expect(r"mean=\d"), _run("pass"), "mean=2.0\n", base)[0] == "supported"


# ---------------------------------------------------------------- the engine in a real repository


@pytest.fixture
def project(repo: Path) -> Path:
    return make_project(repo)


async def _session(root: Path, baseline: bool = True) -> str:
    sid = start_session(StartSessionInput(symptom=SYMPTOM), ToolContext.for_root(root)).session_id
    if baseline:
        data = await record_baseline(root, sid)
        assert data["status"] == "reproduced", data
    return sid


@pytest.fixture
def sid(project: Path) -> str:
    """A session with its baseline reproduced; created before no_leftover_processes takes its snapshot
    (gitpython keeps one `git cat-file` child per cached repository for the life of the process)."""
    import anyio

    return anyio.run(_session, project)


async def _verify(root: Path, sid: str, **changes: Any):
    return await verify_hypothesis(VerifyHypothesisInput(session_id=sid, **{**GOOD, **changes}),
                                   ToolContext.for_root(root))


@pytest.mark.anyio
async def test_supported_with_a_clean_gate(project: Path, sid: str, no_leftover_processes: None) -> None:
    result = await _verify(project, sid)
    assert result.result == "supported", result.reason
    assert result.gate.passed, result.gate
    assert {c.name for c in result.gate.checks} == {"one_variable", "evidence_vs_correlation",
                                                    "alternatives_named", "disproof_checked"}
    assert not result.needs_review and result.review_prompt is None
    assert result.disproof_observed is False
    assert "env overrides" not in result.gate.checks[0].why  # THRESHOLD came from the command prefix
    assert "Phase 4" in result.next
    state = SessionStore(ToolContext.for_root(project).workspace).load(sid)
    assert state.phase(3).status == "in_progress" and state.facts["hypotheses"] == 1
    report = render_report(state)
    assert "## Hypotheses" in report and "1. **SUPPORTED** — load() drops every value" in report


@pytest.mark.anyio
async def test_refuted_and_numbered_in_order(project: Path) -> None:
    sid = await _session(project)
    refuted = await _verify(
        project, sid, hypothesis="data.json holds no usable values, the file itself is the trigger",
        prediction="on sample.json, whose values are 4, 5 and 6, the program prints a mean",
        command="python stats.py sample.json", changed="the input file argument (data.json -> sample.json)",
        disproof="sample.json fails with the same /ZeroDivisionError/")
    assert refuted.result == "refuted" and refuted.number == 1
    assert refuted.disproof_observed is True
    gate = {c.name: c for c in refuted.gate.checks}
    assert gate["evidence_vs_correlation"].passed and gate["disproof_checked"].passed
    assert "new hypothesis" in refuted.next
    supported = await _verify(project, sid)
    assert supported.number == 2
    report = render_report(SessionStore(ToolContext.for_root(project).workspace).load(sid))
    assert report.index("1. **REFUTED**") < report.index("2. **SUPPORTED**")


@pytest.mark.anyio
async def test_timeout_is_inconclusive(project: Path, sid: str, no_leftover_processes: None) -> None:
    result = await _verify(project, sid, command='python -c "import time; time.sleep(60)"', timeout_s=1.5)
    assert result.result == "inconclusive" and "timeout" in result.reason
    assert result.runs[0].outcome == "hang"
    assert result.needs_review and "do not act" in result.next
    assert not {c.name: c for c in result.gate.checks}["evidence_vs_correlation"].passed


@pytest.mark.anyio
async def test_two_file_change_is_flagged(project: Path) -> None:
    sid = await _session(project)
    edit(project, *("return sum(values) / len(values)", "return sum(values) / max(len(values), 1)"))
    edit(project, "1, 2, 3", "11, 12, 13", name="data.json")
    result = await _verify(project, sid, command="python stats.py data.json",
                           changed="the division guard in mean()")
    check = {c.name: c for c in result.gate.checks}["one_variable"]
    assert not check.passed and "2 files changed" in check.why
    assert "data.json" in check.why and "stats.py" in check.why
    assert result.needs_review and "data.json" in (result.review_prompt or "")


@pytest.mark.anyio
async def test_one_file_change_passes_and_low_confidence_asks_for_review(project: Path) -> None:
    sid = await _session(project)
    edit(project, 'os.environ.get("THRESHOLD", "10")', 'os.environ.get("THRESHOLD", "0")')
    result = await _verify(project, sid, command="python stats.py data.json", changed="THRESHOLD default 10 -> 0",
                           confidence=0.6)
    assert result.result == "supported" and result.gate.passed
    assert "one change since the session start: stats.py (+1 -1, 1 hunk) — 1 change: load()" in \
        result.gate.checks[0].why
    assert result.needs_review
    prompt = result.review_prompt or ""
    assert "Verdict: CONFIRMED | CHALLENGED | INSUFFICIENT_EVIDENCE" in prompt
    assert GOOD["hypothesis"] in prompt and "SUPPORTED" in prompt and "60%" in prompt
    assert "`python stats.py data.json`" in prompt and "ZeroDivisionError" in prompt
    assert "stats.py (+1 -1, 1 hunk)" in prompt and "{{" not in prompt


@pytest.mark.anyio
async def test_without_reproduce_the_evidence_check_says_so(project: Path) -> None:
    sid = await _session(project, baseline=False)
    result = await _verify(project, sid, command=REPRODUCER, expect="same_signature",
                           prediction="the reproducer fails the same way on a clean checkout")
    assert result.result == "inconclusive" and "no baseline signature" in result.reason
    check = {c.name: c for c in result.gate.checks}["evidence_vs_correlation"]
    assert not check.passed and "no reproduce evidence" in check.why
    again = await _verify(project, sid, command=REPRODUCER, expect="same_signature",
                          prediction="the reproducer fails the same way on a clean checkout")
    assert again.baseline is not None and again.baseline.source == "fallback"
    assert again.result == "supported"
    assert not {c.name: c for c in again.gate.checks}["evidence_vs_correlation"].passed


@pytest.mark.anyio
async def test_flaky_baseline_reruns_the_experiment(project: Path) -> None:
    sid = await _session(project, baseline=False)
    store = SessionStore(ToolContext.for_root(project).workspace)
    store.record(sid, "reproduce", "1/2 runs failed", {
        "status": "flaky", "consistent": False,
        "runs": [{"outcome": "fail", "signature": "v1|ZeroDivisionError|division by zero"}, {"outcome": "pass"}],
        "diagnosis": {"signature": "v1|ZeroDivisionError|division by zero"}}, phase=1)
    result = await _verify(project, sid)
    assert len(result.runs) == 3 and result.result == "supported"
    assert "3/3 runs agree" in result.reason
    assert "flaky" in {c.name: c for c in result.gate.checks}["evidence_vs_correlation"].why


@pytest.mark.anyio
async def test_bad_input(project: Path) -> None:
    sid = await _session(project, baseline=False)
    with pytest.raises(UsageError, match="unknown session"):
        await _verify(project, "20200101-000000-abcdef")
    with pytest.raises(ValueError, match="confidence"):  # the input model's bound or the engine's check
        await _verify(project, sid, confidence=1.5)
    with pytest.raises(UsageError, match="changed is empty"):
        await _verify(project, sid, changed=" ")
    with pytest.raises(UsageError, match="command is empty"):
        await _verify(project, sid, command="  ")
    with pytest.raises(UsageError, match="command not found"):
        await _verify(project, sid, command="no-such-program-xyz --flag")
    store = SessionStore(ToolContext.for_root(project).workspace)
    store.record(sid, "capture_knowledge", "none", phase=5, phase_status="done")
    from rootcause.tools.engines.close_session import close_session

    close_session(SessionIdInput(session_id=sid), ToolContext.for_root(project))
    with pytest.raises(UsageError, match="is closed"):
        await _verify(project, sid)
    assert "verify_hypothesis" not in {e.tool for e in store.load(sid).evidence}


# ---------------------------------------------------------------- through MCP (in memory)


@pytest.mark.anyio
async def test_mcp_schema_and_refusal(project: Path) -> None:
    sid = await _session(project, baseline=False)
    async with memory_client(project) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["verify_hypothesis"].input_schema
        assert set(schema["required"]) >= {"session_id", "hypothesis", "prediction", "command", "expect", "changed",
                                           "disproof"}
        assert "ONE falsifiable" in tools["verify_hypothesis"].description
        assert "result" in tools["verify_hypothesis"].output_schema["properties"]
        text = error_text(await client.call_tool("verify_hypothesis", {
            **GOOD, "session_id": sid, "hypothesis": "the threshold or the file drops the values"}))
        assert "joins several causes" in text and "alternatives" in text
        data = structured(await client.call_tool("verify_hypothesis", {**GOOD, "session_id": sid}))
        assert data["result"] == "supported" and data["gate"]["checks"]


@pytest.mark.anyio
async def test_one_variable_is_quietly_not_checked_for_a_copy_outside_the_root(project: Path, tmp_path: Path) -> None:
    sid = await _session(project)
    edit(project, "1, 2, 3", "1, 2, 3, 4", name="data.json")  # the user's unrelated edit
    copy = tmp_path / "patched-copy"
    copy.mkdir()
    (copy / "stats.py").write_text((project / "stats.py").read_text().replace(
        'os.environ.get("THRESHOLD", "10")', 'os.environ.get("THRESHOLD", "0")'))
    result = await _verify(project, sid, command=f"python {copy / 'stats.py'} data.json",
                           changed="THRESHOLD default 10 -> 0 in a patched copy")
    check = {c.name: c for c in result.gate.checks}["one_variable"]
    assert check.passed and check.why.startswith("not checked:") and str(copy) in check.why
    assert "data.json" not in check.why and result.changes == "not seen"
    assert result.gate.passed and not result.needs_review


@pytest.mark.anyio
async def test_one_variable_checks_the_worktree_the_experiment_ran_in(project: Path) -> None:
    sid = await _session(project)
    edit(project, "1, 2, 3", "1, 2, 3, 4", name="data.json")  # the user's unrelated edit, not the experiment's
    tree = project / ".rootcause" / "worktrees" / "exp"
    git(project, "worktree", "add", "-q", "--detach", str(tree), "HEAD")
    edit(tree, 'os.environ.get("THRESHOLD", "10")', 'os.environ.get("THRESHOLD", "0")')
    result = await _verify(project, sid, command="python stats.py data.json", cwd=".rootcause/worktrees/exp",
                           changed="THRESHOLD default 10 -> 0")
    check = {c.name: c for c in result.gate.checks}["one_variable"]
    assert check.passed, check.why
    assert f"in {tree.resolve()} against its HEAD" in check.why and "stats.py" in check.why
    assert "data.json" not in check.why
