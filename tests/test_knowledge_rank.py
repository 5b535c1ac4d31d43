"""Ranking: the right entry first for realistic symptoms, synonyms, category boost, cache (latency: bench/)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import anyio
import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.engines.check_constraints import CheckConstraintsInput, check_constraints
from rootcause.tools.judge.classify import classify_text
from rootcause.tools.knowledge.index import CACHE, load_index

from tests.conftest import FIXTURES, SHARED

VEOMNI = SHARED / "fixtures" / "veomni-knowledge"
QUERIES = json.loads((FIXTURES / "knowledge" / "veomni_queries.json").read_text(encoding="utf-8"))
needs_veomni = pytest.mark.skipif(not VEOMNI.is_dir(), reason=f"shared fixture folder {VEOMNI} is absent")


def hit_rates(folder: Path) -> tuple[float, float, list[str]]:
    """Top-1 / top-3 hit rate of the query set, ranked as check_constraints ranks (category from the symptom)."""
    index = load_index(folder, folder)
    top1 = top3 = 0
    misses = []
    for symptom, number in QUERIES:
        hits = index.search(symptom, 3, classify_text(symptom)[0])
        found = [(h.entry.file, h.entry.number) for h in hits]
        top1 += found[:1] == [("constraints.md", number)]
        top3 += ("constraints.md", number) in found
        if found[:1] != [("constraints.md", number)]:
            misses.append(f"{symptom!r}: expected {number}, got {found}")
    return top1 / len(QUERIES), top3 / len(QUERIES), misses


@needs_veomni
def test_query_set_hit_rate() -> None:
    assert len(QUERIES) >= 20
    top1, top3, misses = hit_rates(VEOMNI)
    print(f"\nknowledge ranking on {len(QUERIES)} queries: top-1 {top1:.0%}, top-3 {top3:.0%}; misses: {misses}")
    assert top1 >= 0.9, misses
    assert top3 >= 0.97, misses


@needs_veomni
def test_synonyms_meet_and_why_says_so() -> None:
    index = load_index(VEOMNI, VEOMNI)
    hit = index.search("rank 0 deadlock while writing the state dict", 1, "hang")[0]
    assert hit.entry.number == 17
    why = " ".join(hit.why)
    assert "hang" in why and "checkpoint: 'state dict'" in why


@needs_veomni
def test_category_boost_reorders(tmp_path: Path) -> None:
    index = load_index(VEOMNI, VEOMNI)
    plain = [h.entry.number for h in index.search("first step after resume", 5)]
    boosted = index.search("first step after resume", 5, "cuda_oom")
    assert boosted[0].entry.number == 26
    assert any("category cuda_oom -> oom" in w for w in boosted[0].why)
    assert plain != [h.entry.number for h in boosted] or plain[0] == 26


def test_cache_is_invalidated_by_mtime(tmp_path: Path) -> None:
    folder = tmp_path / "k"
    folder.mkdir()
    target = folder / "notes.md"
    target.write_text("# N\n\n1. **Alpha rule about zebras**\n   - zebras stripe\n", encoding="utf-8")
    first = load_index(folder, tmp_path)
    assert load_index(folder, tmp_path) is first
    target.write_text("# N\n\n1. **Alpha rule about zebras**\n   - zebras stripe\n\n2. **Beta rule about okapis**\n"
                      "   - okapis hide\n", encoding="utf-8")
    stamp = target.stat().st_mtime_ns + 5_000_000
    os.utime(target, ns=(stamp, stamp))
    second = load_index(folder, tmp_path)
    assert second is not first
    assert second.search("okapi", 1)[0].entry.title == "Beta rule about okapis"


@needs_veomni
async def test_check_constraints_engine_on_fixture_copy(repo: Path) -> None:
    shutil.copytree(VEOMNI, repo / ".agents" / "knowledge")
    ctx = ToolContext.for_root(repo)
    result = await check_constraints(CheckConstraintsInput(
        symptom="RuntimeError: Error(s) in loading state_dict: Missing key(s) after renaming the projection"), ctx)
    assert result.category == "checkpoint_mismatch"
    assert result.matches[0].number == 16 and result.matches[0].file == ".agents/knowledge/constraints.md"
    assert result.matches[0].line == 137 and result.matches[0].excerpt.startswith("- `veomni/checkpoint/dcp")
    assert "dcp_checkpoint_keys" in [p.name for p in result.pitfalls]
    assert "numerical_checklist" in [c.name for c in result.checklists]
    assert result.entries == len(load_index(repo / ".agents" / "knowledge", repo).entries)
    text = result.summary()
    assert "constraints.md:137 DCP checkpoint keys must match model state dict" in text


@needs_veomni
async def test_warm_calls_reuse_the_index_on_fixture(repo: Path) -> None:
    """What keeps a warm call fast (bench/bench_constraints.py measures it): the index is built once."""
    folder = repo / ".agents" / "knowledge"
    shutil.copytree(VEOMNI, folder)
    ctx = ToolContext.for_root(repo)
    inp = CheckConstraintsInput(symptom="training hangs at checkpoint save on rank 0", paths=[])
    first = await check_constraints(inp, ctx)
    index = load_index(folder, repo)
    for _ in range(3):
        again = await check_constraints(inp, ctx)
        assert load_index(folder, repo) is index
        assert [(m.file, m.line) for m in again.matches] == [(m.file, m.line) for m in first.matches]


def test_cache_clear_is_safe() -> None:
    CACHE.clear()
    assert anyio  # the module's async tests use anyio (pytestmark below)


pytestmark = pytest.mark.anyio
