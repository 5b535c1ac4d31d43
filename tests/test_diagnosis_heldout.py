"""Held-out real logs (tests/fixtures/logs/heldout): the yardstick for rules that judge text.

The logs were rewritten from public issue threads and labelled before the engine saw them;
no rule may be written against their text. labels.yaml gives each log's category, a `group`
for logs of one bug (one group, one signature) and a `near_miss` name for pairs with the same
exception type but different bugs (the pair must get two signatures). Each folder in
HELDOUT_DIRS is scored on its own; when a new batch is collected, the old one joins the main
corpus and the new one takes its place here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pytest
import yaml

from tools.diagnosis import diagnose_file
from tools.taxonomy import CATEGORIES

HELDOUT_DIRS = [Path(__file__).parent / "fixtures" / "logs" / "heldout"]


@dataclass(frozen=True)
class Scored:
    folder: Path
    labels: list[dict]
    got: dict[str, tuple[str, str]]  # file -> (category, signature)

    def pairs(self, key: str) -> dict[str, list[str]]:
        members: dict[str, list[str]] = defaultdict(list)
        for item in self.labels:
            if item.get(key):
                members[item[key]].append(item["file"])
        return dict(members)


@pytest.fixture(scope="module", params=HELDOUT_DIRS, ids=lambda folder: folder.name)
def scored(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Scored:
    folder: Path = request.param
    labels = yaml.safe_load((folder / "labels.yaml").read_text())
    root = tmp_path_factory.mktemp("empty_root")
    got = {}
    for item in labels:
        diagnosis = diagnose_file(folder / item["file"], root)
        got[item["file"]] = (diagnosis.category, diagnosis.signature)
    return Scored(folder, labels, got)


def test_heldout_labels_are_complete(scored: Scored) -> None:
    files = {item["file"] for item in scored.labels}
    assert files == {path.name for path in scored.folder.glob("*.log")}
    assert {item["category"] for item in scored.labels} == set(CATEGORIES)
    assert all(item.get("source") and item.get("note") for item in scored.labels)
    assert all(len(members) == 2 for members in scored.pairs("near_miss").values())
    assert all(len(members) >= 2 for members in scored.pairs("group").values())


def test_heldout_category_accuracy(scored: Scored) -> None:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrong = []
    for item in scored.labels:
        got = scored.got[item["file"]][0]
        per[item["category"]][0] += got == item["category"]
        per[item["category"]][1] += 1
        if got != item["category"]:
            wrong.append(f"{item['file']}: {got} (want {item['category']})")
    right, total = sum(v[0] for v in per.values()), sum(v[1] for v in per.values())
    report = ", ".join(f"{name} {v[0]}/{v[1]}" for name, v in sorted(per.items()))
    print(f"\n{scored.folder.name}: category accuracy {right}/{total} = {right / total:.1%}: {report}")
    assert right / total >= 0.90, "\n".join(wrong)


def test_heldout_same_bug_pairs_share_a_signature(scored: Scored) -> None:
    agree, split = 0, []
    for group, members in sorted(scored.pairs("group").items()):
        for a, b in combinations(members, 2):
            (sa, sb) = scored.got[a][1], scored.got[b][1]
            agree += sa == sb
            if sa != sb:
                split.append(f"{group}: {a} / {b}: {sa} != {sb}")
    total = agree + len(split)
    print(f"\n{scored.folder.name}: same-bug pairs sharing a signature {agree}/{total} = {agree / total:.1%}")
    assert agree / total >= 0.90, "\n".join(split)


def test_heldout_near_miss_pairs_are_split(scored: Scored) -> None:
    merged = []
    pairs = scored.pairs("near_miss")
    for name, (a, b) in sorted(pairs.items()):
        if scored.got[a][1] == scored.got[b][1]:
            merged.append(f"{name}: {a} / {b}: both {scored.got[a][1]}")
    print(f"\n{scored.folder.name}: near-miss pairs split {len(pairs) - len(merged)}/{len(pairs)}")
    assert not merged, "\n".join(merged)
