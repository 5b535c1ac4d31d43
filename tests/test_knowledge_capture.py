"""capture_knowledge: format-following appends, duplicates, bad input, regression guards, docs, none, sessions."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.capture_knowledge import CaptureKnowledgeInput, capture_knowledge
from rootcause.tools.engines.check_constraints import CheckConstraintsInput, check_constraints
from rootcause.tools.engines.close_session import SessionIdInput, close_session
from rootcause.tools.engines.start_session import StartSessionInput, start_session
from rootcause.tools.knowledge.entries import parse_markdown
from rootcause.tools.record.store import SessionStore

from tests.conftest import FIXTURES, SHARED

VEOMNI = SHARED / "fixtures" / "veomni-knowledge"
OWN = FIXTURES / "knowledge"
needs_veomni = pytest.mark.skipif(not VEOMNI.is_dir(), reason=f"shared fixture folder {VEOMNI} is absent")
pytestmark = pytest.mark.anyio


def knowledge(root: Path, *names: str, source: Path = VEOMNI) -> Path:
    folder = root / ".agents" / "knowledge"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(source / name, folder / name)
    return folder


def capture(root: Path, **kwargs) -> object:
    return capture_knowledge(CaptureKnowledgeInput(**kwargs), ToolContext.for_root(root))


def only_inserted(old: str, new: str) -> list[str]:
    """The inserted blocks; fails if anything of old was changed or removed."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    assert all(tag in ("equal", "insert") for tag, *_ in ops), [op for op in ops if op[0] != "equal"]
    return ["".join(b[j1:j2]) for tag, _i1, _i2, j1, j2 in ops if tag == "insert"]


def single_insertion(old: str, new: str, block: str) -> int:
    """new is old with block inserted at one offset; returns the offset."""
    at = new.index(block)
    assert new[:at] == old[:at] and new[at + len(block):] == old[at:]
    assert len(new) == len(old) + len(block)
    return at


def numbered(text: str) -> list:
    return [e for e in parse_markdown(text, "c.md").entries if e.kind == "numbered"]


@needs_veomni
def test_append_follows_format_and_keeps_every_byte(tmp_path: Path) -> None:
    folder = knowledge(tmp_path, "constraints.md")
    old = (folder / "constraints.md").read_text(encoding="utf-8")
    result = capture(tmp_path, kind="constraint", title="SP loss must be reduced across the Ulysses group",
                     body="- Call `reduce_sequence_parallel_loss()` before backward.\n"
                          "- A per-rank loss trains on one slice of the sequence only.")
    new = (folder / "constraints.md").read_text(encoding="utf-8")
    w = result.written
    assert w.number == 28 and w.file == ".agents/knowledge/constraints.md"
    assert w.section == "Hard Constraints > Distributed Training > Sequence Parallel (Ulysses)"
    offset = single_insertion(old, new, "\n28. **SP loss must be reduced across the Ulysses group**\n"
                              "    - Call `reduce_sequence_parallel_loss()` before backward.\n"
                              "    - A per-rank loss trains on one slice of the sequence only.\n")
    assert old[:offset].endswith("`docs/design/local_parallel_state.md`.\n")
    assert new.splitlines()[w.line - 1].startswith("28. **SP loss must")
    entries = numbered(new)
    assert sorted(e.number for e in entries) == list(range(1, 29))
    assert next(e for e in entries if e.number == 28).section == w.section
    assert "### Expert Parallel (MoE)" in new[offset:offset + 300]


@needs_veomni
def test_given_section_and_new_section(tmp_path: Path) -> None:
    folder = knowledge(tmp_path, "constraints.md")
    path = folder / "constraints.md"
    old = path.read_text(encoding="utf-8")
    first = capture(tmp_path, kind="constraint", title="Async checkpoint writers need a flush at exit",
                    body="Pending async saves are lost when the process exits without waiting.", section="checkpoint")
    assert first.written.section == "Hard Constraints > Checkpoint" and first.written.number == 28
    mid = path.read_text(encoding="utf-8")
    only_inserted(old, mid)
    assert mid.index("28. **Async") < mid.index("## Code Quality") and mid.index("18. **") < mid.index("28. **")
    second = capture(tmp_path, kind="constraint", title="Profiler traces must be gated by rank",
                     body="Every rank writing a trace fills the disk.", section="Observability")
    assert second.written.new_section and second.written.number == 29
    new = path.read_text(encoding="utf-8")
    assert new.endswith("\n## Observability\n\n29. **Profiler traces must be gated by rank**\n"
                        "    - Every rank writing a trace fills the disk.\n")
    only_inserted(mid, new)
    assert len(numbered(new)) == 29


def test_missing_folder_and_file_are_created(tmp_path: Path) -> None:
    result = capture(tmp_path, kind="constraint", title="Seeds must be set before building the sampler",
                     body="The sampler draws its permutation at construction.")
    path = tmp_path / ".agents" / "knowledge" / "constraints.md"
    text = path.read_text(encoding="utf-8")
    assert result.written.created_file and result.written.number == 1
    assert text.startswith("# Constraints\n\n")
    assert text.endswith("\n1. **Seeds must be set before building the sampler**\n"
                         "   - The sampler draws its permutation at construction.\n")
    again = capture(tmp_path, kind="constraint", title="Eval batches must not be shuffled",
                    body="Shuffled eval batches make step-to-step comparisons meaningless.")
    assert again.written.number == 2 and not again.written.created_file
    assert [e.number for e in numbered(path.read_text(encoding="utf-8"))] == [1, 2]
    # default sections are reused, not repeated
    assert path.read_text(encoding="utf-8").count("#") == 1


def test_other_formats_are_followed(tmp_path: Path) -> None:
    folder = tmp_path / ".agents" / "knowledge"
    folder.mkdir(parents=True)
    shutil.copyfile(OWN / "headings.md", folder / "architecture.md")
    shutil.copyfile(OWN / "bullets.md", folder / "constraints.md")
    arch_old = (folder / "architecture.md").read_text(encoding="utf-8")
    res = capture(tmp_path, kind="architecture", title="Checkpoint shards are written per host",
                  body="Each host writes its own shard folder; the index file is written by rank 0.")
    arch_new = (folder / "architecture.md").read_text(encoding="utf-8")
    single_insertion(arch_old, arch_new, "\n## 3. Checkpoint shards are written per host\n\n- Each host writes "
                     "its own shard folder; the index file is written by rank 0.\n")
    assert res.written.number == 3
    notes_old = (folder / "constraints.md").read_text(encoding="utf-8")
    res = capture(tmp_path, kind="constraint", title="Gradient checkpointing needs use_reentrant=False",
                  body="With FSDP2 the reentrant variant recomputes without the sharding hooks.")
    notes_new = (folder / "constraints.md").read_text(encoding="utf-8")
    single_insertion(notes_old, notes_new, "- **Gradient checkpointing needs use_reentrant=False**: With FSDP2 the "
                     "reentrant variant recomputes without the sharding hooks.\n")
    parsed = parse_markdown(notes_new, "constraints.md")
    assert parsed.layout.kind == "bullets" and len([e for e in parsed.entries if e.kind == "bullet"]) == 6
    assert res.written.line == 10 and notes_new.splitlines()[9].startswith("- **Gradient checkpointing")


@needs_veomni
@pytest.mark.parametrize(("title", "body", "line"), [
    ("Files generated by patchgen must never be edited by hand",
     "Hand edits under veomni/models/transformers/*/generated/ are lost: patchgen overwrites them on the next run.",
     16),
    ("DCP checkpoint keys have to equal the model state dict keys",
     "Renaming parameters or altering the model structure between saving and loading breaks DCP loading.", 137),
    ("Checkpoint save and load need every rank",
     "DCP is collective: every rank must call save or load at the same time; only rank 0 calling it deadlocks.", 142),
])
def test_near_duplicates_are_refused(tmp_path: Path, title: str, body: str, line: int) -> None:
    folder = knowledge(tmp_path, "constraints.md")
    before = (folder / "constraints.md").read_bytes()
    result = capture(tmp_path, kind="constraint", title=title, body=body)
    assert result.written is None and result.duplicate_of.line == line
    assert result.duplicate_of.file == ".agents/knowledge/constraints.md"
    assert (folder / "constraints.md").read_bytes() == before
    assert "near-duplicate" in result.summary()


@needs_veomni
def test_related_but_new_constraint_is_written(tmp_path: Path) -> None:
    knowledge(tmp_path, "constraints.md")
    result = capture(tmp_path, kind="constraint", title="Optimizer state must be resharded with the model on resume",
                     body="Loading optimizer state saved with 8 ranks into 4 ranks needs DCP resharding of "
                          "the optimizer too, not only of the weights.")
    assert result.written is not None and result.written.number == 28


@needs_veomni
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"kind": "constraint", "title": " ", "body": "x"}, "title is empty"),
    ({"kind": "constraint", "title": "T", "body": ""}, "body is empty"),
    ({"kind": "architecture", "title": "T", "body": None}, "body is empty"),
    ({"kind": "constraint", "title": "T", "body": "b", "section": "Checkpoint\n## Injected"}, "Markdown structure"),
    ({"kind": "constraint", "title": "T", "body": "b", "section": "## Checkpoint"}, "Markdown structure"),
    ({"kind": "constraint", "title": "two\nlines", "body": "b"}, "one line"),
    ({"kind": "constraint", "title": "T", "body": "ok\n## not a heading"}, "Markdown structure"),
    ({"kind": "constraint", "title": "T", "body": "b", "knowledge_dir": "../elsewhere"}, "outside the root"),
    ({"kind": "none"}, "needs the reason"),
    ({"kind": "docs", "title": "T", "body": "b", "file": "README.md"}, "under docs/"),
    ({"kind": "docs", "title": "T", "body": "# heading"}, "headings"),
])
def test_bad_input_leaves_files_untouched(tmp_path: Path, kwargs: dict, message: str) -> None:
    folder = knowledge(tmp_path, "constraints.md", "architecture.md")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(UsageError, match=message):
        capture(tmp_path, **kwargs)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not (tmp_path / "docs").exists()


def test_non_utf8_file_is_refused_untouched(tmp_path: Path) -> None:
    folder = tmp_path / ".agents" / "knowledge"
    folder.mkdir(parents=True)
    data = "# Constraints\n\n1. **Caf\u00e9 rule**\n   - ok\n".encode("latin-1")
    (folder / "constraints.md").write_bytes(data)
    with pytest.raises(UsageError, match=r"not valid UTF-8 \(byte \d+, line 3\).*untouched"):
        capture(tmp_path, kind="constraint", title="New rule", body="text")
    assert (folder / "constraints.md").read_bytes() == data


async def test_check_skips_non_utf8_file_with_a_note(repo: Path) -> None:
    folder = repo / ".agents" / "knowledge"
    folder.mkdir(parents=True)
    (folder / "bad.md").write_bytes(b"# x\n\n1. **\xff rule**\n")
    shutil.copyfile(OWN / "bullets.md", folder / "notes.md")
    result = await check_constraints(CheckConstraintsInput(symptom="job hangs at exit until the NCCL watchdog"),
                                     ToolContext.for_root(repo))
    assert result.matches[0].title.startswith("Barrier before destroying the process group")
    assert any("bad.md skipped: not valid UTF-8" in n for n in result.notes)


@needs_veomni
def test_regression_guard_reads_testing_md(tmp_path: Path) -> None:
    knowledge(tmp_path, "constraints.md", "architecture.md", "testing.md")
    folder_before = {p.name: p.read_bytes() for p in (tmp_path / ".agents" / "knowledge").iterdir()}
    res = capture(tmp_path, kind="regression_guard", title="DCP round-trip drops the extra state",
                  paths=["veomni/checkpoint/dcp_checkpointer.py"])
    s = res.suggested_test
    assert s.test == "tests/checkpoints/test_checkpoint_callback.py" and s.wired
    assert s.workflows == ["gpu_unit_tests.yml", "npu_unit_tests.yml"] and s.source.startswith("testing.md:")
    res = capture(tmp_path, kind="regression_guard", paths=["tests/trainer/test_new_lifecycle.py"])
    assert not res.suggested_test.wired and "wire it into CI" in res.suggested_test.statement
    res = capture(tmp_path, kind="regression_guard", paths=["tests/data/test_packing_labels.py"])
    assert res.suggested_test.wired and res.suggested_test.workflows == ["gpu_unit_tests.yml", "npu_unit_tests.yml"]
    res = capture(tmp_path, kind="regression_guard", paths=["veomni/optim/muon.py"])
    assert res.suggested_test.test == "tests/optim/test_muon_*.py"
    res = capture(tmp_path, kind="regression_guard", paths=["veomni/data/data_collator.py"])
    assert res.suggested_test.test == "tests/data/" and res.suggested_test.wired
    assert {p.name: p.read_bytes() for p in (tmp_path / ".agents" / "knowledge").iterdir()} == folder_before


def test_regression_guard_without_testing_md(repo: Path) -> None:
    (repo / "src").mkdir()
    (repo / "src" / "mod.py").write_text("x = 1\n")
    res = capture(repo, kind="regression_guard")
    assert res.suggested_test.changed_path == "src/mod.py"
    assert "no table mapping tests to CI" in res.suggested_test.statement


def test_docs_append_and_duplicate(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "debugging.md").write_text("# Debugging\n\n## Hangs\n\nUse py-spy.\n", encoding="utf-8")
    res = capture(tmp_path, kind="docs", title="Loss spikes after resume", file="docs/debugging.md",
                  body="Check that the LR scheduler state was restored.\n\n- compare lr of the first steps")
    text = (docs / "debugging.md").read_text(encoding="utf-8")
    assert text == ("# Debugging\n\n## Hangs\n\nUse py-spy.\n\n## Loss spikes after resume\n\n"
                    "Check that the LR scheduler state was restored.\n\n- compare lr of the first steps\n")
    assert res.written.line == 7 and res.written.file == "docs/debugging.md"
    dup = capture(tmp_path, kind="docs", title="Loss spikes after resuming", file="docs/debugging.md",
                  body="Check the LR scheduler state was restored")
    assert dup.duplicate_of.line == 7 and (docs / "debugging.md").read_text(encoding="utf-8") == text


def test_none_with_session_marks_phase5_and_allows_close(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="ValueError: bad config key"), ctx).session_id
    res = capture(repo, kind="none", body="typo in a config key; nothing a future reader needs", session_id=sid)
    assert res.recorded_none.statement == "no new knowledge to capture" and res.phase5 == "done"
    state = SessionStore(ctx.workspace).load(sid)
    assert state.phase(5).status == "done" and state.evidence[-1].tool == "capture_knowledge"
    assert "typo in a config key" in state.evidence[-1].summary
    assert close_session(SessionIdInput(session_id=sid), ctx).closed
    with pytest.raises(UsageError, match="closed"):
        capture(repo, kind="none", body="again", session_id=sid)


@needs_veomni
async def test_check_with_session_uses_its_symptom_and_records_phase1(repo: Path) -> None:
    knowledge(repo, "constraints.md")
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom="all ranks hang in the checkpoint save when only rank 0 saves"),
                        ctx).session_id
    result = await check_constraints(CheckConstraintsInput(session_id=sid), ctx)
    assert result.category == "hang" and result.matches[0].number == 17
    state = SessionStore(ctx.workspace).load(sid)
    assert state.evidence[-1].tool == "check_constraints" and state.phase(1).status == "in_progress"
    assert state.evidence[-1].data["matches"][0]["line"] == 142
    with pytest.raises(UsageError, match="unknown session"):
        await check_constraints(CheckConstraintsInput(session_id="20200101-000000-abcdef"), ctx)


WARMUP = "learning rate keeps rising after warmup, loss NaN at the end of warmup"


async def test_capture_links_the_sessions_top_pitfall_and_check_stops_listing_it(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom=WARMUP), ctx).session_id
    first = await check_constraints(CheckConstraintsInput(session_id=sid, paths=[]), ctx)
    assert first.pitfalls[0].name == "lr_warmup_uncapped"
    res = capture(repo, kind="constraint", session_id=sid, title="Warm-up factor must be capped",
                  body="The LambdaLR ramp in train/sched.py must stop at 1.0, or the learning rate overshoots.")
    assert res.written is not None and res.pitfall_link is not None and res.pitfall_link.id == "lr_warmup_uncapped"
    assert res.pitfall_link.why == "the session's top pitfall, which the entry's own text ranks first of the built-ins"
    text = (repo / res.written.file).read_text(encoding="utf-8")
    assert "   - Pitfall: `lr_warmup_uncapped`\n" in text
    state = SessionStore(ctx.workspace).load(sid)
    assert state.evidence[-1].data["pitfall"] == "lr_warmup_uncapped"
    again = await check_constraints(CheckConstraintsInput(session_id=sid, paths=[]), ctx)
    assert "lr_warmup_uncapped" not in [p.name for p in again.pitfalls]
    assert any(n.startswith("built-in pitfall lr_warmup_uncapped is not listed: the project documents it")
               for n in again.notes), again.notes
    recorded = SessionStore(ctx.workspace).load(sid).evidence[-1].data
    assert recorded["documented_pitfalls"] == ["lr_warmup_uncapped"]


async def test_capture_link_is_not_guessed_across_concepts(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    sid = start_session(StartSessionInput(symptom=WARMUP), ctx).session_id
    await check_constraints(CheckConstraintsInput(session_id=sid, paths=[]), ctx)
    res = capture(repo, kind="constraint", session_id=sid, title="Dataloader workers need a seed each",
                  body="Seed every worker in worker_init_fn or the shards repeat across workers.")
    assert res.written is not None and res.pitfall_link is None
    assert "Pitfall:" not in (repo / res.written.file).read_text(encoding="utf-8")


def test_capture_pitfall_given_by_the_caller_none_and_unknown(tmp_path: Path) -> None:
    res = capture(tmp_path, kind="constraint", title="Cap the warm-up ramp", pitfall="lr_warmup_uncapped",
                  body="The ramp must stop at 1.0.")
    assert res.pitfall_link.why == "named by the caller"
    assert "Linked to built-in pitfall lr_warmup_uncapped (named by the caller)" in res.summary()
    assert "   - Pitfall: `lr_warmup_uncapped`" in (tmp_path / res.written.file).read_text(encoding="utf-8")
    res = capture(tmp_path, kind="architecture", title="Schedules live in train/sched.py", pitfall="none",
                  body="Every scheduler is built there.")
    assert res.pitfall_link is None
    with pytest.raises(UsageError, match="not a built-in pitfall id") as err:
        capture(tmp_path, kind="constraint", title="Another rule", pitfall="lr_warmup", body="text here")
    assert "lr_warmup_uncapped" in err.value.hint


@pytest.mark.parametrize(("name", "max_missed", "max_wrong"), [("pitfall_links_fresh.json", 0, 0),
                                                               ("pitfall_links_heldout.json", 0, 1)])
def test_automatic_link_on_labelled_entries(name: str, max_missed: int, max_wrong: int) -> None:
    import json

    from rootcause.tools.engines.capture_knowledge import session_link

    cases = json.loads((OWN / name).read_text(encoding="utf-8"))["cases"]
    linked = [(c, session_link(c["top"], c["title"], c["body"]) is not None) for c in cases]
    missed = [c["title"] for c, got in linked if c["link"] and not got]
    wrong = [c["title"] for c, got in linked if got and not c["link"]]
    assert len(missed) <= max_missed and len(wrong) <= max_wrong, (missed, wrong)
