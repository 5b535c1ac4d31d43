"""Held-out real logs: the yardstick for rules that judge text (scored by rootcause.tools.observe.diagnosis.scoreboard).

`tests/fixtures/logs/heldout/` is the newest batch of real logs rewritten from public issue threads,
labelled and committed before the engine ever ran on them; its first (untuned) score is the figure
quoted in docs/tools/diagnose_log.md. labels.yaml gives each log's category, a `group` for logs of one
bug (they must share the diagnosis' group) and a `near_miss` name for two logs with one exception type
and two bugs (they must differ in signature: the group and the call site, DESIGN's v3). When a newer
batch is collected, this one moves to `retired/batchN/` and the new one takes its place. Retired batches
were tuned on; they stay as a regression check with stricter category limits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rootcause.tools.observe.diagnosis.scoreboard import Score, labels, score
from rootcause.tools.vocabulary.categories import CATEGORIES

LOGS = Path(__file__).parent / "fixtures" / "logs"
HELDOUT = LOGS / "heldout"
RETIRED = sorted((LOGS / "retired").glob("batch*"))
# Lower limits: category accuracy, same-bug pairs sharing a group, near misses split. Held-out category and pairs
# are issue 14's 90%; its "every near miss split" is not met (batch 8: 8/15 split under v2, 14/15 with v3's call
# sites), so that limit guards the older level. heldout/ is batch 13 (first score 51/52, 7/8, 6/8).
LIMITS = {"heldout": (0.90, 0.90, 0.80), "retired": (0.98, 0.80, 0.70)}
# Batch 11 labels GradScaler's "Attempting to unscale FP16 gradients" python_exception (2 logs); the message
# catalogue (messages.yaml, from torch/amp/grad_scaler.py) calls it dtype_mismatch, and the rules follow the catalogue.
LIMITS_BY_BATCH = {"batch11": (0.96, 0.80, 0.70)}


@pytest.fixture(scope="module", params=[HELDOUT, *RETIRED], ids=lambda folder: folder.name)
def scored(request: pytest.FixtureRequest) -> tuple[Path, list[dict], Score]:
    folder: Path = request.param
    return folder, labels(folder), score(folder)[0]


def _limits(folder: Path) -> tuple[float, float, float]:
    return LIMITS["heldout"] if folder == HELDOUT else LIMITS_BY_BATCH.get(folder.name, LIMITS["retired"])


def test_heldout_labels_are_complete(scored: tuple[Path, list[dict], Score]) -> None:
    folder, items, _ = scored
    assert {item["file"] for item in items} == {path.name for path in folder.glob("*.log")}
    # metric_regression comes from a yardstick or from a report's own numbers (DESIGN): batch 11 has reports of the
    # latter. Batches 9 to 11 were weighted toward distributed-training logs: not every category is in them.
    categories = {item["category"] for item in items}
    assert categories <= set(CATEGORIES) and len(categories) >= 12
    assert all(item.get("source") and item.get("note") for item in items)
    near: dict[str, int] = {}
    for item in items:
        if item.get("near_miss"):
            near[item["near_miss"]] = near.get(item["near_miss"], 0) + 1
    assert all(count == 2 for count in near.values())


def test_heldout_category_accuracy(scored: tuple[Path, list[dict], Score]) -> None:
    folder, _, result = scored
    per = ", ".join(f"{name} {right}/{total}" for name, (right, total) in sorted(result.per_category.items()))
    print(f"\n{folder.name}: category accuracy {result.right}/{result.total} = {result.accuracy:.1%}: {per}")
    assert result.accuracy >= _limits(folder)[0], "\n".join(result.wrong)


def test_heldout_same_bug_pairs_share_a_group(scored: tuple[Path, list[dict], Score]) -> None:
    folder, _, result = scored
    agree, total = result.same_bug
    print(f"\n{folder.name}: same-bug pairs sharing a group {agree}/{total}")
    assert total and agree / total >= _limits(folder)[1], "\n".join(result.disagreements)


def test_heldout_near_miss_pairs_are_split(scored: tuple[Path, list[dict], Score]) -> None:
    folder, _, result = scored
    split, total = result.near_miss
    print(f"\n{folder.name}: near-miss pairs split {split}/{total}")
    assert total and split / total >= _limits(folder)[2], "\n".join(result.disagreements)
