"""analyze_training_log on any input in bounded memory, every step read, every cut stated (issue 24, point 3).

The pieces of a long line (tools/observe/logs/bounded.py), the compact columns (columns.py), the block-wise
whole-series passes (spikes, divergence) against their plain definitions, and the real server over stdio: a
one-line tqdm log of 300,000 updates read to its last update and a 120 MB file without a line break read in
bounded memory (the server's own peak RSS, VmHWM) with the cut in `notes`. The 2 GB and 300 MB files of the
issue are bench/bench_training_log.py's (too big for a test).
"""

from __future__ import annotations

import io
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
from rootcause.tools.numerics.series import BLOCK, divergence
from rootcause.tools.observe.logs.bounded import MAX_LINE, Cuts, pieces
from rootcause.tools.observe.logs.columns import IntSeq
from rootcause.tools.observe.logs.metrics import CHUNK, MetricExtractor, Points, find_spikes, scan_metrics

from tests.conftest import stdio_client, structured

MB = 1 << 20


def write_tqdm(path: Path, updates: int, seed: int = 7) -> float:
    """A tqdm bar redrawn `updates` times with carriage returns and no line break until the end; its last loss."""
    rng = random.Random(seed)
    loss = 0.0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("Training: starting\n")
        parts = []
        for n in range(1, updates + 1):
            loss = 2.0 + 8.0 / (1 + n / 50_000) + rng.uniform(-0.05, 0.05)
            pct = n * 100 // updates
            parts.append(f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {n}/{updates} [01:02<03:04, 1234.56it/s, "
                         f"loss={loss:.4f}]")
            if len(parts) == 10_000:
                fh.write("".join(parts))
                parts.clear()
        fh.write("".join(parts) + "\n")
    return round(loss, 4)


def write_flat(path: Path, size: int) -> None:
    """`size` bytes of metric text without a line break or carriage return."""
    block = "".join(f"step: {i} loss: {2 + 1 / (i + 1):.4f} " for i in range(20_000)).encode()
    with open(path, "wb") as fh:
        for _ in range(size // len(block)):
            fh.write(block)
        fh.write(block[:size % len(block)])


# -- the pieces of a long line ----------------------------------------------------------------------------------

def _pieces(text: str, limit: int) -> tuple[list[tuple[str, int, bool]], Cuts]:
    cuts = Cuts()
    return list(pieces(io.StringIO(text, newline="\n"), cuts, limit)), cuts


def test_a_long_line_comes_in_pieces_cut_at_carriage_returns() -> None:
    text = "short\n" + "".join(f"\rupd {i:02d}" for i in range(12)) + "\nlast"
    got, cuts = _pieces(text, 20)
    assert all(len(piece) <= 20 for piece, _, _ in got)
    assert [n for _, n, first in got if first] == [0, 1, 2]  # three physical lines, each counted once
    segments = [s for piece, n, _ in got if n == 1 for s in piece.split("\r") if s]
    assert segments == [f"upd {i:02d}" for i in range(12)]  # every update, none split
    assert got[-1] == ("last", 2, True) and not cuts.segments


def test_an_overlong_segment_keeps_its_head_and_the_cut_is_counted() -> None:
    text = "a" * 50 + "\rok\n" + "b" * 30
    got, cuts = _pieces(text, 20)
    assert [(p.split("\r")[-1], n) for p, n, _ in got] == [("a" * 20, 0), ("ok", 0), ("b" * 20, 1)]
    assert (cuts.segments, cuts.skipped, cuts.first_line, cuts.longest) == (2, 30 + 10, 0, 50)
    assert "2 segments, the first on line 1, hold more than 20 characters" in (cuts.note(20) or "")


def test_pieces_agree_with_splitting_the_whole_text() -> None:
    """Random lines of segments shorter than the cap: the pieces hold exactly the segments of each line, in order."""
    rng = random.Random(3)
    for _ in range(500):
        limit = rng.randint(4, 12)
        lines = ["\r".join("".join(rng.choice("abc") for _ in range(rng.randint(0, limit - 2)))
                           for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(0, 6))]
        text = "\n".join(lines) + rng.choice(["", "\n"])
        got, cuts = _pieces(text, limit)
        if text.endswith("\n") or not lines or not lines[-1]:
            lines = lines if text.endswith("\n") or not lines else lines[:-1]
        want = [(n, s) for n, line in enumerate(lines) for s in line.split("\r") if s]
        assert [(n, s) for p, n, _ in got for s in p.split("\r") if s] == want, (text, limit)
        assert all(len(p) <= limit for p, _, _ in got) and not cuts.segments


# -- compact columns and block-wise passes ----------------------------------------------------------------------

def test_int_sequences_are_runs_when_regular_and_flat_when_not() -> None:
    regular = IntSeq()
    for step in range(0, 3_000_000, 8):
        regular.append(step)
    values = regular.array()
    assert values.dtype == np.int32 and values[-1] == 2_999_992 and len(values) == 375_000 and regular.increasing
    assert regular._flat is None  # one run, a few bytes
    rng = random.Random(1)
    irregular, want = IntSeq(), []
    for _ in range(5000):
        want.append(rng.randint(0, 2**40) if rng.random() < 0.01 else rng.randint(0, 1000))
        irregular.append(want[-1])
    assert irregular.array().tolist() == want and irregular.array().dtype == np.int64
    assert irregular._flat is not None and not irregular.increasing


def _spikes_by_definition(values: list[float]) -> list[int]:
    """The spike rule written out: above 3x the median of the previous <= 20 finite values (>= 3 of them)."""
    history: list[float] = []
    hits = []
    for i, v in enumerate(values):
        if not np.isfinite(v):
            continue
        if len(history) >= 3:
            median = statistics.median(history[-20:])
            if median > 0 and v > 3 * median:
                hits.append(i)
        history.append(v)
    return hits


def test_spikes_across_block_boundaries_match_the_rule() -> None:
    rng = np.random.default_rng(5)
    n = CHUNK // 4 * 3 + 17  # three blocks and a bit
    values = 1.0 + rng.uniform(-0.1, 0.1, n)
    for at in (5, CHUNK // 4 - 1, CHUNK // 4, CHUNK // 4 + 2, CHUNK // 2 + 1, n - 1):
        values[at] = 9.0
    values[CHUNK // 4 - 12: CHUNK // 4 - 2] = np.nan  # non-finite values right before a boundary are skipped
    steps = np.arange(n)
    found = [s.step for s in find_spikes(steps, values, "loss")]
    assert found == _spikes_by_definition(values.tolist()) and len(found) == 6


def test_divergence_across_blocks_finds_the_first_step() -> None:
    steps = np.arange(0, 2 * BLOCK + 100, dtype=np.int32)
    a = np.ones(len(steps))
    ref = Points(steps[::2].copy(), np.ones(len(steps[::2])), np.zeros(len(steps[::2]), np.int32))
    a[BLOCK + 3] = 1.5  # an odd step: not in the reference, no divergence there
    a[BLOCK + 10] = 1.5
    run = Points(steps, a, np.zeros(len(steps), np.int32))
    found = divergence(run, ref, "loss", 0.02)
    assert found.first_step == BLOCK + 10 and found.compared_steps == len(ref)
    assert found.max_relative_difference == pytest.approx(1 / 3)


# -- through the extractor --------------------------------------------------------------------------------------

def test_every_update_of_a_one_line_tqdm_log_is_read(tmp_path: Path) -> None:
    log = tmp_path / "tqdm.log"
    last = write_tqdm(log, 20_000)
    assert log.stat().st_size > 10 * MAX_LINE
    series = scan_metrics(log)
    loss = series.stats["loss"]
    assert (series.steps, loss.count, loss.last, loss.last_step, series.lines) == (20_000, 20_000, last, 20_000, 2)
    assert not series.cuts.segments
    extractor = MetricExtractor()  # the same line fed whole (a caller's text) is read in the same pieces
    with open(log, encoding="utf-8", newline="\n") as fh:  # carriage returns kept
        text = fh.read()
    for line in text.split("\n")[:2]:
        extractor.feed(line)
    fed = extractor.result()
    assert fed.stats["loss"] == loss and fed.lines == 2 and fed.steps == 20_000


def test_repeated_steps_and_cuts_are_stated(tmp_path: Path) -> None:
    from rootcause.tools.engines.analyze_training_log import _reading_notes

    log = tmp_path / "resumed.log"
    log.write_text("".join(f"step {i} loss {1 + i / 10}\n" for i in [*range(1, 30), *range(20, 40)])
                   + "x" * (MAX_LINE + 5) + "\n")
    series = scan_metrics(log)
    assert series.steps == 39 and series.repeated == {"loss": 10}
    notes = _reading_notes(series)
    assert any("the first value printed for a step is kept" in n and "10 of loss" in n for n in notes)
    assert any(f"line 50 holds {MAX_LINE + 5:,} characters" in n and "(5 skipped)" in n for n in notes)


def test_progress_is_reported_on_a_one_line_log(tmp_path: Path) -> None:
    """Progress goes by the characters read, not the line count (a one-line log of 7 MB is 70 pieces)."""
    log = tmp_path / "tqdm.log"
    write_tqdm(log, 100_000)
    calls: list[tuple[int, int]] = []
    scan_metrics(log, lambda done, total: calls.append((done, total)))
    assert calls and all(0 < done <= total == log.stat().st_size for done, total in calls)


def test_random_bytes_never_crash_the_extractor(tmp_path: Path) -> None:
    """A leading cell of the pipe format that str.isdigit() calls a digit but float() refuses ('²', '8\\x1d')
    raised ValueError out of analyze_training_log, diagnose_log's spike check and the run observation."""
    assert scan_metrics(["² | loss 2.5 |", "8\x1d| loss 2.0 | lr 1e-3 |"]).stats["loss"].count == 2
    log = tmp_path / "random.bin"
    log.write_bytes(random.Random(4).randbytes(2 * MB))
    series = scan_metrics(log)  # whatever it finds, it reads to the end
    assert series.lines > 1000


def test_streams_listed_are_bounded() -> None:
    from rootcause.tools.observe.logs.metrics import MAX_RANKS

    series = scan_metrics([f"[rank{i}]:step 1 loss {1 + i / 1e4}" for i in range(MAX_RANKS + 500)])
    assert len(series.ranks) == MAX_RANKS and series.rank_used == "0" and series.stats["loss"].last == 1.0


@pytest.mark.anyio
async def test_findings_on_a_long_run_stay_exact(tmp_path: Path) -> None:
    """100,000 steps with the lr never capped, one spike, a NaN tail and a reference that leaves it late: every
    figure equals the one computed directly from the values written."""
    from rootcause.tools.core.context import ToolContext
    from rootcause.tools.engines.analyze_training_log import AnalyzeTrainingLogInput, analyze_training_log

    n, spike, nan_from, leaves = 100_000, 61_234, 90_001, 75_001
    rng = np.random.default_rng(2)
    loss = np.round(2.0 + rng.uniform(-0.1, 0.1, n), 4)
    loss[spike - 1] = 40.0
    ref = loss.copy()
    ref[leaves - 1:] *= 1.5
    loss[nan_from - 1:] = np.nan
    lr = np.round(np.arange(1, n + 1) * 1e-8, 12)
    for name, values in (("run.log", loss), ("ref.log", ref)):
        (tmp_path / name).write_text("".join(f"step {i + 1} loss {v} lr {r}\n" for i, (v, r) in enumerate(
            zip(values.tolist(), lr.tolist(), strict=True))))
    result = await analyze_training_log(AnalyzeTrainingLogInput(path="run.log", compare_to="ref.log"),
                                        ToolContext.for_root(tmp_path))
    finite = loss[: nan_from - 1]
    s = result.series["loss"]
    assert (result.steps, s.count, s.nonfinite, s.trailing_from_step) == (n, n, n - nan_from + 1, nan_from)
    assert (s.min, s.max, s.first, s.last) == (finite.min(), finite.max(), finite[0], finite[-1])
    assert result.first_nonfinite_step == nan_from and result.first_nonfinite.line == nan_from
    assert result.largest_spike.step == spike and result.spike_count == 1
    assert result.first_divergent_step == leaves
    assert result.lr is not None and (result.lr.step, result.lr.early_until_step) == (nan_from, 9001)
    assert result.lr.still_rising and result.lr.value == lr[nan_from - 1]
    assert result.notes == []


# -- the real server ----------------------------------------------------------------------------------------------

def _server_peak_mb() -> float:
    """VmHWM of the `rootcause serve` child of this test (its own high-water mark since it started)."""
    import psutil

    servers = [p for p in psutil.Process().children(recursive=True) if "serve" in " ".join(p.cmdline())]
    assert len(servers) == 1, servers
    for line in Path(f"/proc/{servers[0].pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.anyio
@pytest.mark.slow
async def test_long_lines_read_whole_in_bounded_memory_over_stdio(repo: Path) -> None:
    last = write_tqdm(repo / "tqdm.log", 300_000)
    write_flat(repo / "flat.log", 120 * MB)
    (repo / "small.log").write_text("".join(f"step {i} loss {2 - i / 100}\n" for i in range(1, 50)))
    async with stdio_client(repo) as client:
        structured(await client.call_tool("analyze_training_log", {"path": "small.log"}))  # the engine's imports
        before = _server_peak_mb()
        result = await client.call_tool("analyze_training_log", {"path": "tqdm.log"})
        data = structured(result)
        assert data["steps"] == 300_000 and data["series"]["loss"]["count"] == 300_000
        assert data["series"]["loss"]["last"] == last and data["series"]["loss"]["last_step"] == 300_000
        assert data["notes"] == [] and data["lines"] == 2
        assert "loss: 300000 points, steps 1-300000" in result.content[0].text
        data = structured(await client.call_tool("analyze_training_log", {"path": "flat.log"}))
        assert data["lines"] == 1 and data["steps"] == 1
        assert data["notes"] == [f"line 1 holds {120 * MB:,} characters without a line break or carriage return: "
                                 f"only its first {MAX_LINE:,} were read ({120 * MB - MAX_LINE:,} skipped)"]
        grown = _server_peak_mb() - before
    # 300,000 points are 2.4 MB in columns; the old reader held the 120 MB line as text (and decoded it).
    assert grown < 40, f"the server's peak RSS grew by {grown:.0f} MB"
