"""Flight-recorder dumps: real gloo hangs made here (tests/fixtures/flight_recorder/make_dumps.py) and public
16-rank NCCL dumps (nvrx/, README.md), read safely and analysed per group; diagnose_log on folders and archives."""

from __future__ import annotations

import io
import os
import pickle
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.diagnose_log import DiagnoseLogInput, diagnose_log
from rootcause.tools.observe.collectives import DumpError, analyse, lines, read_dumps
from rootcause.tools.observe.collectives.dumps import MAX_DUMP_BYTES

from tests.conftest import FIXTURES

DUMPS = FIXTURES / "flight_recorder"
NVRX = {"gpu_error_1st": [12, 14], "gpu_error_2nd": [9, 14], "lock_gil_1st": [9, 14], "lock_gil_2nd": [10, 15]}


def _report(folder: Path):
    return analyse(read_dumps(folder))


def test_a_rank_that_skips_a_collective_for_a_barrier_is_the_culprit() -> None:
    report = _report(DUMPS / "skip")
    m = report.mismatch
    assert report.category == "hang" and report.waiting == [0, 1]
    assert (m.group, m.seq, m.kind, m.ops, m.culprit_ranks, m.missing_ranks) == (
        "the default group", 4, "op", {"0": "all_reduce(4)", "1": "barrier"}, [1], [])
    said = lines(report, Path(__file__).resolve().parent.parent)
    assert said[0].startswith("ranks disagree at collective #4 of the default group: rank 0 all_reduce(4) — "
                              "rank 1 barrier; rank 1 last called a collective in end_of_epoch at "
                              "tests/fixtures/flight_recorder/make_dumps.py:")
    places = {(p.rank, p.last_entered.seq, p.last_entered.state, p.last_completed.seq) for p in report.collectives}
    assert places == {(0, 4, "entered", 3), (1, 4, "entered", 3)}


def test_mismatched_sizes_name_the_rank_that_breaks_its_own_run() -> None:
    report = _report(DUMPS / "sizes")
    m = report.mismatch
    # 1 rank against 1: rank 1's all_reduce(2) breaks its run of all_reduce(4); it completed, rank 0 waits.
    assert (m.seq, m.kind, m.ops, m.culprit_ranks) == (4, "sizes", {"0": "all_reduce(4)", "1": "all_reduce(2)"}, [1])
    assert m.missing_ranks == []  # both entered #4 (rank 1 went on: rank 0 is behind at #5, not at #4)
    assert report.findings[0].stalled == [0]
    assert report.category == "hang" and report.waiting == [0]


def test_a_rank_that_never_entered_the_collective_is_missing() -> None:
    report = _report(DUMPS / "missing")
    m = report.mismatch
    assert (m.seq, m.kind, m.missing_ranks, m.culprit_ranks, m.ops) == (
        4, "missing", [1], [1], {"0": "all_reduce(4)", "1": "(not entered)"})
    rank1 = next(p for p in report.collectives if p.rank == 1)
    assert rank1.last_entered == rank1.last_completed and rank1.last_completed.seq == 3  # NeMo's rule
    assert lines(report)[0].startswith("rank 1 never entered collective #4 of the default group "
                                       "(rank 0 all_reduce(4)); its last, #3 all_reduce(4), completed")


def test_a_rank_stuck_before_its_first_collective_is_missing() -> None:
    """Its dump holds no entry; gloo's pg_config names the default group unnamed ('') with both ranks."""
    report = _report(DUMPS / "first")
    m = report.mismatch
    assert (m.seq, m.kind, m.missing_ranks, m.culprit_ranks) == (1, "missing", [1], [1])
    assert report.category == "hang" and report.waiting == [0]
    assert lines(report)[0].startswith("rank 1 never entered collective #1 of the default group")


def test_a_deadlock_across_process_groups_names_the_rank_that_skipped() -> None:
    """tp [0,1] [2,3], dp [0,2] [1,3], default: rank 3 skips its tp all_reduce at step 4. Every group has ranks
    missing (each waits for another group); the rank breaking its own pattern of calls across groups is 3."""
    report = _report(DUMPS / "groups")
    m = report.mismatch
    assert (m.group, m.seq, m.kind, m.culprit_ranks) == ("tp (group 2, ranks 2,3)", 4, "missing", [3])
    assert {f.group.desc for f in report.findings} == {"tp", "dp", "default_pg"}
    said = lines(report)
    assert said[-1] == "culprit rank 3"
    assert "disagree only because ranks wait in the groups above" in said[1]


def test_the_json_form_reads_as_the_pickle() -> None:
    found = read_dumps(DUMPS / "json")
    assert {d.form for d in found.dumps.values()} == {"json"}
    m = analyse(found).mismatch
    assert (m.seq, m.ops, m.culprit_ranks) == (4, {"0": "all_reduce(4)", "1": "barrier"}, [1])


@pytest.mark.parametrize("case", sorted(NVRX))
def test_public_nccl_dumps_name_the_faulty_ranks(case: str) -> None:
    """16-rank Megatron jobs (tensor, pipeline, data, context, expert groups) with faults injected into two ranks
    (nvidia-resiliency-ext's fault_injection.log): the culprits are exactly the faulty ranks."""
    report = _report(DUMPS / "nvrx" / case)
    assert report.mismatch.culprit_ranks == NVRX[case]
    assert report.category == "hang" and len(report.dumps) == 16
    said = lines(report)
    assert said[-1] == f"culprit ranks {NVRX[case][0]}, {NVRX[case][1]}"
    assert all(len(line) < 1_000 for line in said) and len(said) <= 8


def test_a_pickle_that_runs_code_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    (tmp_path / "dumps").mkdir()
    (tmp_path / "dumps" / "rank0.pkl").write_bytes(pickle.dumps({"entries": [Evil()]}))
    with pytest.raises(DumpError, match=r"rank0.pkl was not loaded: it names (posix|os)\.system"):
        read_dumps(tmp_path / "dumps")
    ctx = ToolContext.for_root(tmp_path)
    with pytest.raises(UsageError, match="would run code when loaded"):
        diagnose_log(DiagnoseLogInput(path="dumps/rank0.pkl"), ctx)
    for dump in (DUMPS / "skip").iterdir():  # beside real dumps, it is left out and said
        shutil.copy(dump, tmp_path / "dumps" / f"job_{dump.name}")
    (tmp_path / "dumps" / "rank0.pkl").rename(tmp_path / "dumps" / "evil_rank7.pkl")
    found = read_dumps(tmp_path / "dumps")
    assert sorted(found.dumps) == [0, 1] and found.notes[0].startswith("evil_rank7.pkl was not loaded: it names")
    assert analyse(found).mismatch.culprit_ranks == [1]
    assert not marker.exists()


def test_archives_are_read_in_memory_and_a_member_leaving_the_archive_is_refused(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "dumps.tar.gz", "w:gz") as tar:
        for dump in sorted((DUMPS / "groups").iterdir()):
            tar.add(dump, arcname=f"job/{dump.name}")
        evil = (DUMPS / "skip" / "rank1.pkl").read_bytes()
        info = tarfile.TarInfo("../../escaped_rank1.pkl")
        info.size = len(evil)
        tar.addfile(info, io.BytesIO(evil))
    with zipfile.ZipFile(tmp_path / "dumps.zip", "w") as archive:
        for dump in sorted((DUMPS / "skip").iterdir()):
            archive.write(dump, f"fr/{dump.name}")
    found = read_dumps(tmp_path / "dumps.tar.gz")
    assert sorted(found.dumps) == [0, 1, 2, 3]
    assert found.notes == ["../../escaped_rank1.pkl: refused, a path outside the archive"]
    assert analyse(found).mismatch.culprit_ranks == [3]
    assert lines(analyse(found))[-1] == "left out: ../../escaped_rank1.pkl: refused, a path outside the archive"
    assert not (tmp_path.parent / "escaped_rank1.pkl").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "dumps.tar.gz", "dumps.zip"]
    ctx = ToolContext.for_root(tmp_path)
    result = diagnose_log(DiagnoseLogInput(path="dumps.zip"), ctx)
    d = result.diagnosis
    assert d.category == "hang" and d.mismatch.culprit_ranks == [1] and d.mismatch.seq == 4
    assert d.message.startswith("ranks disagree at collective #4 of the default group")
    assert "culprit rank 1" in result.summary()


def test_a_member_bigger_than_a_dump_is_refused(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("rank0.pkl", b"\0" * (MAX_DUMP_BYTES + 1))  # 64 MB of zeros: a 64 KB member
    assert (tmp_path / "bomb.zip").stat().st_size < 1_000_000
    with pytest.raises(DumpError, match="is over 64 MB"):
        read_dumps(tmp_path / "bomb.zip")


def test_diagnose_log_of_a_folder_with_the_job_log_and_its_dumps(tmp_path: Path) -> None:
    """The log is diagnosed (here a real-format NCCL watchdog timeout) and the dumps attached to it."""
    folder = tmp_path / "job"
    shutil.copytree(DUMPS / "missing", folder)
    (folder / "train.log").write_text(
        "[rank0]:[E1201 23:41:30 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600010 "
        "milliseconds before timing out.\n")
    d = diagnose_log(DiagnoseLogInput(path="job"), ToolContext.for_root(tmp_path)).diagnosis
    assert d.category == "hang" and "flight_recorder" in d.evidence
    assert d.mismatch.culprit_ranks == [1] and d.mismatch.kind == "missing"
    assert d.excerpt.startswith("Flight recorder (2 ranks):\nrank 1 never entered collective #4")
    assert {(c.rank, c.last_entered.seq) for c in d.collectives} == {(0, 4), (1, 3)}


def test_two_different_dump_folders_have_different_signatures(tmp_path: Path) -> None:
    ctx = ToolContext.for_root(FIXTURES.parent.parent)
    signatures = {case: diagnose_log(DiagnoseLogInput(path=str(DUMPS / case)), ctx).diagnosis.signature
                  for case in ("skip", "sizes", "missing", "groups")}
    assert len(set(signatures.values())) == 4, signatures


@pytest.mark.parametrize("case", sorted(NVRX))
def test_a_dump_left_out_never_makes_its_rank_a_culprit(case: str) -> None:
    """Each of the 16 dumps dropped in turn: a healthy rank without a dump is never named (every rank of a hung
    job waits somewhere); a faulty one is said to have left no dump, the other faulty rank still named."""
    faulty = NVRX[case]
    for rank in range(16):
        found = read_dumps(DUMPS / "nvrx" / case)
        del found.dumps[rank]
        report = analyse(found)
        expected = [r for r in faulty if r != rank]
        assert report.mismatch.culprit_ranks == expected, rank
        assert f"no dump from rank {rank} (listed as group members)" in lines(report)


@pytest.mark.parametrize(("case", "seq", "ops", "culprits"), [
    ("minority", 3, {"0": "all_reduce(4)", "1": "all_reduce(4)", "2": "broadcast(4)", "3": "all_reduce(4)"}, [2]),
    ("uneven", 5, {"0": "all_reduce(4)", "1": "barrier"}, [1]),
    ("conditional_barrier", 3, {"0": "barrier", "1": "barrier", "2": "all_reduce(4)"}, [2]),
])
def test_hangs_labelled_before_they_were_made(case: str, seq: int, ops: dict[str, str], culprits: list[int]) -> None:
    """Added after the rules, culprits in the fixtures' README committed first: first run 3 of 3, untuned."""
    m = _report(DUMPS / case).mismatch
    assert (m.seq, m.kind, m.ops, m.culprit_ranks) == (seq, "op", ops, culprits)


def test_diagnose_log_of_dumps_records_its_evidence_in_the_session(tmp_path: Path) -> None:
    from rootcause.tools.engines.start_session import StartSessionInput, start_session
    from rootcause.tools.record.store import SessionStore

    shutil.copytree(DUMPS / "nvrx" / "lock_gil_1st", tmp_path / "dumps")
    ctx = ToolContext.for_root(tmp_path)
    session = start_session(StartSessionInput(symptom="training hangs at step 20947 on 16 ranks"), ctx).session_id
    result = diagnose_log(DiagnoseLogInput(path="dumps", session_id=session), ctx)
    assert result.diagnosis.mismatch.culprit_ranks == [9, 14]
    events = (tmp_path / ".rootcause" / "sessions" / session / "events.jsonl").read_text()
    assert "never entered collective #" in events and len(events) < 200_000
    assert SessionStore(ctx.workspace).load(session) is not None


@pytest.mark.parametrize("case", sorted(NVRX))
def test_faulty_ranks_that_left_no_dump_are_named_when_the_dumps_name_no_one(case: str) -> None:
    """Both faulty ranks' dumps dropped: every other rank waits alike in the expert group, and the members
    without a dump are the ones not seen there (kind no_dump)."""
    found = read_dumps(DUMPS / "nvrx" / case)
    for rank in NVRX[case]:
        del found.dumps[rank]
    m = analyse(found).mismatch
    assert (m.kind, m.culprit_ranks) == ("no_dump", NVRX[case])
    assert "EXPERT_MODEL_PARALLEL_GROUP" in m.group


def test_the_order_of_an_archive_never_changes_the_analysis(tmp_path: Path) -> None:
    """One NCCL case as tars in six member orders and as a folder: one mismatch, one first line."""
    import random

    files = sorted(p for p in (DUMPS / "nvrx" / "gpu_error_1st").iterdir() if p.is_file())
    seen = set()
    for seed in range(6):
        order = files[:]
        random.Random(seed).shuffle(order)
        archive = tmp_path / f"order{seed}.tar"
        with tarfile.open(archive, "w") as tar:
            for f in order:
                tar.add(f, arcname=f.name)
        report = _report(archive)
        seen.add((lines(report)[0], report.mismatch.seq, report.mismatch.group, tuple(report.mismatch.culprit_ranks)))
    report = _report(DUMPS / "nvrx" / "gpu_error_1st")
    seen.add((lines(report)[0], report.mismatch.seq, report.mismatch.group, tuple(report.mismatch.culprit_ranks)))
    assert len(seen) == 1 and next(iter(seen))[3] == (12, 14)


def test_the_one_line_names_the_culprits_place_once() -> None:
    from rootcause.tools.observe.evidence import diagnosis_line

    ctx = ToolContext.for_root(FIXTURES.parent.parent)
    d = diagnose_log(DiagnoseLogInput(path=str(DUMPS / "groups")), ctx).diagnosis
    line = diagnosis_line(d)
    assert d.location and line.count(d.location) == 1 and line == d.one_line(), line
    assert d.ranks["3"].first_error.startswith("missing at collective #4 of tp")
