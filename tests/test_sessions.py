"""The session engine: triage, the event log, phases, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.close_session import SessionIdInput, close_session
from rootcause.tools.engines.start_session import StartSessionInput, start_session
from rootcause.tools.judge.triage import triage
from rootcause.tools.record.report import render_report
from rootcause.tools.record.store import SessionStore


@pytest.mark.parametrize(
    ("symptom", "path", "category"),
    [
        ("training hangs at step 10 on 8 GPUs, rank 3 waits in all_reduce", "full", "hang"),
        ("loss becomes NaN after 1200 steps", "full", "nonfinite"),
        ("ImportError: cannot import name 'LlamaFlashAttention2' from 'transformers'", "quick", "import_error"),
        ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", "quick", "cuda_oom"),
        ("RuntimeError: Error(s) in loading state_dict for Model: Missing key(s)", "quick", "checkpoint_mismatch"),
        ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x8 and 16x2)", "quick", "shape_mismatch"),
        ("grad norm explodes to 1e6 at step 300", "full", "gradient_explosion"),
        ("the output is sometimes wrong", "full", "python_exception"),
        ("KeyError: 'labels' in collate, tried two fixes already", "full", "python_exception"),
    ],
)
def test_triage_picks_path_and_category(symptom: str, path: str, category: str) -> None:
    result = triage(symptom)
    assert result.path == path, result.reasons
    assert result.category == category
    assert 1 <= len(result.keywords) <= 3
    assert result.reasons


def test_triage_checklists_and_hint() -> None:
    assert triage("FSDP loss differs between 1 and 8 GPUs").checklists == [
        "distributed_checklist", "numerical_checklist"]
    forced = triage("ValueError: bad value", path_hint="full")
    assert forced.path == "full" and "path_hint" in forced.reasons[-1]
    kept_full = triage("training hangs", path_hint="quick")
    assert kept_full.path == "full" and "overridden" in kept_full.reasons[-1]


def test_start_session_writes_log_and_snapshot(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    result = start_session(StartSessionInput(symptom="loss is NaN at step 5"), ctx)
    folder = repo / ".rootcause" / "sessions" / result.session_id
    events = (folder / "events.jsonl").read_text().splitlines()
    assert json.loads(events[0])["type"] == "created"
    assert json.loads((folder / "snapshot.json").read_text())["symptom"] == "loss is NaN at step 5"
    assert (repo / ".rootcause" / ".gitignore").read_text() == "*\n"
    assert result.head and len(result.head) == 40
    assert [p.status for p in result.phases] == ["in_progress", "pending", "pending", "pending", "pending"]


def test_evidence_phases_and_truncated_line(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="x fails"), ctx).session_id
    store = SessionStore(ctx.workspace)
    store.record(sid, "reproduce", "2/2 runs failed with one signature", {"status": "reproduced"}, phase=1)
    state = store.record(sid, "verify_hypothesis", "supported", phase=3)
    assert [p.status for p in state.phases] == ["done", "skipped", "in_progress", "pending", "pending"]
    log = repo / ".rootcause" / "sessions" / sid / "events.jsonl"
    with open(log, "a") as fh:
        fh.write('{"type": "evidence", "evid')  # a crash in the middle of a write
    state = store.load(sid)
    assert len(state.evidence) == 2
    report = render_report(state)
    assert "### 1. reproduce (Phase 1)" in report and "2/2 runs failed" in report
    assert "[x] Phase 1" in report and "[~] Phase 3" in report


def test_bad_session_ids(repo: Path) -> None:
    store = SessionStore(ToolContext.for_root(repo).workspace)
    with pytest.raises(UsageError, match="malformed"):
        store.load("../../etc")
    with pytest.raises(UsageError, match="unknown session '20200101-000000-abcdef'"):
        store.load("20200101-000000-abcdef")


def test_empty_symptom_refused(repo: Path) -> None:
    with pytest.raises(UsageError, match="symptom is empty"):
        start_session(StartSessionInput(symptom="   "), ToolContext.for_root(repo))


def test_close_refused_before_phase5(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="x fails"), ctx).session_id
    with pytest.raises(UsageError, match="Phase 5"):
        close_session(SessionIdInput(session_id=sid), ctx)
    SessionStore(ctx.workspace).record(sid, "capture_knowledge", "no new knowledge", phase=5, phase_status="done")
    closed = close_session(SessionIdInput(session_id=sid), ctx)
    assert closed.status == "closed" and "[x] Phase 5" in closed.report


def test_session_state_and_start_result_share_the_triage_fields(repo: Path) -> None:
    from rootcause.tools.engines.start_session import StartSessionResult
    from rootcause.tools.record.store import SessionState, Triage

    triage_fields = {"path", "reasons", "category", "category_basis", "negated", "keywords", "checklists"}
    assert set(Triage.model_fields) == triage_fields
    for model in (SessionState, StartSessionResult):
        assert issubclass(model, Triage) and triage_fields <= set(model.model_fields)
    ctx = ToolContext.for_root(repo)
    started = start_session(StartSessionInput(symptom="NCCL timeout on rank 3 after 30 minutes"), ctx)
    state = SessionStore(ctx.workspace).load(started.session_id)
    assert {f: getattr(state, f) for f in triage_fields} == {f: getattr(started, f) for f in triage_fields}
    assert started.path == "full" and started.category == state.category and started.next
