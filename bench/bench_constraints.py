"""check_constraints query latency on a generated 5,000-entry knowledge file (goal: < 100 ms warm).

The file has 100 sections of 50 numbered entries each, in the real constraints.md shape
(bold titles, 3-4 space sub-bullets, code spans), built from the field's vocabulary so the
synonym concepts fire. Figures:
- cold: the first query of a process (markdown-it parse + index build + ranking);
- warm index: one ranked search on the cached index;
- warm tool: the whole check_constraints engine (mtime check, ranking, pitfalls, guards);
- pitfall ranking: the built-in pitfall library ranked alone (60 entries, cached index);
- baseline: the same query scored without an index (tokenising every entry per query), i.e.
  what a per-call re-read would cost; reported as a ratio to the warm tool figure.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rootcause.tools.core.context import ToolContext  # noqa: E402
from rootcause.tools.engines.check_constraints import CheckConstraintsInput, check_constraints  # noqa: E402
from rootcause.tools.knowledge.index import CACHE, load_index  # noqa: E402
from rootcause.tools.knowledge.pitfalls import rank_pitfalls  # noqa: E402
from rootcause.tools.vocabulary.words import tokens  # noqa: E402

ENTRIES = 5_000
PER_SECTION = 50
WARM_RUNS = 30
GOAL_MS = 100.0
QUERIES = (
    "RuntimeError: Error(s) in loading state_dict: Missing key(s) after renaming the projection",
    "training hangs at the barrier after checkpoint save on rank 0",
    "loss becomes NaN with sequence parallel ulysses after 1200 steps",
    "CUDA out of memory at the first step after resuming an MoE job",
    "grad norm explodes with gradient accumulation under FSDP2",
)
NOUNS = ("checkpoint", "state dict", "collator", "ulysses group", "device mesh", "expert router", "grad norm",
         "micro batch", "position_ids", "attention mask", "optimizer state", "lr scheduler", "dataloader",
         "tokenizer", "patchgen output", "NCCL communicator", "bf16 autocast", "loss scaler", "DTensor", "barrier")
VERBS = ("must match", "must be gathered before", "must not be edited after", "must be created before",
         "must be resharded with", "must be synchronized across ranks with", "must stay in float32 next to")


def generate(path: Path, entries: int = ENTRIES, seed: int = 1) -> None:
    rng = random.Random(seed)
    lines = ["# Hard Constraints", "", "Generated for the check_constraints benchmark.", ""]
    for number in range(1, entries + 1):
        if (number - 1) % PER_SECTION == 0:
            lines += [f"## Area {(number - 1) // PER_SECTION + 1}: {rng.choice(NOUNS)}", ""]
        a, b = rng.sample(NOUNS, 2)
        indent = " " * (len(str(number)) + 2)
        lines.append(f"{number}. **The {a} {rng.choice(VERBS)} the {b} (rule {number})**")
        for _ in range(rng.randint(2, 4)):
            c, d = rng.sample(NOUNS, 2)
            lines.append(f"{indent}- `pkg/mod_{rng.randint(1, 400)}.py`: the {c} {rng.choice(VERBS)} the {d}; "
                         f"otherwise runs {rng.choice(['hang', 'diverge', 'crash', 'produce NaN'])} on step "
                         f"{rng.randint(1, 9999)}.")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def naive_scores(folder: Path, root: Path, query: str) -> list[tuple[float, int]]:
    """Baseline: overlap scoring that tokenises every entry for every query (no index)."""
    entries = load_index(folder, root).entries
    wanted = Counter(tokens(query))
    scored = []
    for i, entry in enumerate(entries):
        have = Counter(tokens(f"{entry.title}\n{entry.section}\n{entry.body}"))
        scored.append((sum(min(n, have[t]) for t, n in wanted.items()), i))
    return sorted(scored, reverse=True)[:5]


async def _engine(ctx: ToolContext, query: str) -> float:
    started = time.perf_counter()
    await check_constraints(CheckConstraintsInput(symptom=query, paths=[]), ctx)
    return (time.perf_counter() - started) * 1000


def main() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = root / ".agents" / "knowledge"
        folder.mkdir(parents=True)
        generate(folder / "constraints.md")
        ctx = ToolContext.for_root(root)
        CACHE.clear()
        cold_ms = asyncio.run(_engine(ctx, QUERIES[0]))
        index = load_index(folder, root)
        assert len(index.entries) >= ENTRIES, len(index.entries)
        search_ms = []
        for i in range(WARM_RUNS):
            started = time.perf_counter()
            index.search(QUERIES[i % len(QUERIES)], 5)
            search_ms.append((time.perf_counter() - started) * 1000)
        tool_ms = [asyncio.run(_engine(ctx, QUERIES[i % len(QUERIES)])) for i in range(WARM_RUNS)]
        pitfall_ms = []
        for i in range(WARM_RUNS):
            started = time.perf_counter()
            rank_pitfalls(QUERIES[i % len(QUERIES)], None)
            pitfall_ms.append((time.perf_counter() - started) * 1000)
        baseline_ms = []
        for query in QUERIES:
            started = time.perf_counter()
            naive_scores(folder, root, query)
            baseline_ms.append((time.perf_counter() - started) * 1000)
    figures = {
        "entries": len(index.entries),
        "cold_ms": round(cold_ms, 1),
        "warm_search_ms_median": round(statistics.median(search_ms), 2),
        "warm_tool_ms_median": round(statistics.median(tool_ms), 2),
        "warm_tool_ms_p95": round(sorted(tool_ms)[int(0.95 * (len(tool_ms) - 1))], 2),
        "warm_pitfall_ranking_ms_median": round(statistics.median(pitfall_ms), 2),
        "baseline_no_index_ms_median": round(statistics.median(baseline_ms), 1),
        "goal_ms": GOAL_MS,
    }
    figures["speedup_vs_baseline"] = round(figures["baseline_no_index_ms_median"] / figures["warm_tool_ms_median"], 1)
    figures["meets_goal"] = figures["warm_tool_ms_median"] < GOAL_MS
    return figures


if __name__ == "__main__":
    f = main()
    print(f"check_constraints on a generated knowledge file with {f['entries']} entries")
    print(f"  cold (parse + index + query):   {f['cold_ms']:8.1f} ms")
    print(f"  warm index search, median:      {f['warm_search_ms_median']:8.2f} ms")
    print(f"  warm tool call, median / p95:   {f['warm_tool_ms_median']:8.2f} / {f['warm_tool_ms_p95']:.2f} ms "
          f"(goal < {f['goal_ms']:.0f} ms: {'met' if f['meets_goal'] else 'NOT met'})")
    print(f"  built-in pitfall ranking, median: {f['warm_pitfall_ranking_ms_median']:8.2f} ms (part of the tool call)")
    print(f"  baseline without index, median: {f['baseline_no_index_ms_median']:8.1f} ms "
          f"({f['speedup_vs_baseline']}x the warm tool call)")
