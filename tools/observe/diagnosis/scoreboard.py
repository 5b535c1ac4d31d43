"""How far to trust a diagnosis: category accuracy and signature agreement on labelled real logs.

A labelled set is a folder with logs and a `labels.yaml` listing `{file, category, group?,
exception_type?}`. Logs sharing a `group` are one bug: they must share the diagnosis' group
(same-bug pairs). Two logs of different bugs (different or no group) that raise the same
exception type (the label's `exception_type`, else the diagnosed one) and belong to one
category are a near miss: they must not share a signature (the group and the call site).
Labels may name near misses explicitly instead: logs sharing a `near_miss` key (and not a
group) are the set's only near-miss pairs.

    python -m rootcause.tools.observe.diagnosis.scoreboard [FOLDER ...]
    (default: the corpus, heldout/ and retired/batch*)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from rootcause.tools.observe.diagnosis.engine import diagnose_file
from rootcause.tools.observe.diagnosis.models import SIGNATURE_VERSION, Diagnosis

LOGS = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "logs"
DEFAULT_SETS = (LOGS, LOGS / "heldout",
                *sorted((LOGS / "retired").glob("batch*"), key=lambda p: int(p.name.removeprefix("batch") or 0)))


@dataclass
class Score:
    name: str
    per_category: dict[str, list[int]] = field(default_factory=dict)
    """category -> [right, total]"""
    wrong: list[str] = field(default_factory=list)
    same_bug: list[int] = field(default_factory=lambda: [0, 0])
    """[pairs sharing a group, same-bug pairs]"""
    near_miss: list[int] = field(default_factory=lambda: [0, 0])
    """[pairs split, near-miss pairs]"""
    disagreements: list[str] = field(default_factory=list)

    @property
    def right(self) -> int:
        return sum(v[0] for v in self.per_category.values())

    @property
    def total(self) -> int:
        return sum(v[1] for v in self.per_category.values())

    @property
    def accuracy(self) -> float:
        return self.right / self.total if self.total else 0.0


def labels(folder: Path) -> list[dict]:
    return yaml.safe_load((folder / "labels.yaml").read_text()) or []


def score(folder: Path, root: Path | None = None) -> tuple[Score, dict[str, Diagnosis]]:
    """Diagnose every labelled log of a folder (against an empty root: pasted logs) and score it."""
    items = labels(folder)
    with tempfile.TemporaryDirectory() as empty:
        base = root or Path(empty)
        diagnoses = {item["file"]: diagnose_file(folder / item["file"], base) for item in items}
    result = Score("corpus" if folder.resolve() == LOGS else folder.name)
    for item in items:
        got = diagnoses[item["file"]].category
        cell = result.per_category.setdefault(item["category"], [0, 0])
        cell[0] += got == item["category"]
        cell[1] += 1
        if got != item["category"]:
            result.wrong.append(f"{item['file']}: {got} (want {item['category']})")
    explicit = any(item.get("near_miss") for item in items)
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            da, db = diagnoses[a["file"]], diagnoses[b["file"]]
            same_sig = da.signature == db.signature
            if a.get("group") and a.get("group") == b.get("group"):
                result.same_bug[1] += 1
                result.same_bug[0] += da.group == db.group
                if da.group != db.group:
                    result.disagreements.append(f"same bug, two groups: {a['file']} / {b['file']}")
                continue
            if explicit:
                near = bool(a.get("near_miss")) and a.get("near_miss") == b.get("near_miss")
            else:
                type_a = a.get("exception_type") or da.exception_type
                type_b = b.get("exception_type") or db.exception_type
                near = bool(type_a) and type_a == type_b and a["category"] == b["category"]
            if near:
                result.near_miss[1] += 1
                result.near_miss[0] += not same_sig
                if same_sig:
                    result.disagreements.append(f"near miss, one signature: {a['file']} / {b['file']}")
    return result, diagnoses


def _ratio(pair: list[int]) -> str:
    return f"{pair[0]}/{pair[1]}" + (f" ({pair[0] / pair[1]:.0%})" if pair[1] else "")


def table(scores: list[Score]) -> str:
    """A Markdown table: one row per category, one column per set, then the totals and pair agreement."""
    categories = sorted({c for s in scores for c in s.per_category})
    head = "| category | " + " | ".join(s.name for s in scores) + " |"
    rows = [head, "|" + "---|" * (len(scores) + 1)]
    for category in categories:
        cells = [_ratio(s.per_category[category]) if category in s.per_category else "-" for s in scores]
        rows.append(f"| {category} | " + " | ".join(cells) + " |")
    rows.append("| **all categories** | " + " | ".join(f"**{_ratio([s.right, s.total])}**" for s in scores) + " |")
    rows.append("| same-bug pairs sharing a group | " + " | ".join(_ratio(s.same_bug) for s in scores) + " |")
    rows.append("| near-miss pairs split | " + " | ".join(_ratio(s.near_miss) for s in scores) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rootcause.tools.observe.diagnosis.scoreboard",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, metavar="FOLDER",
                        help="labelled sets (a folder with logs and labels.yaml); default: the corpus, heldout/ "
                             "and the retired batches")
    parser.add_argument("-v", "--verbose", action="store_true", help="name every miss and every pair that disagrees")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    missing = [f for f in args.folders if not (f / "labels.yaml").is_file()]
    if missing:
        parser.error(f"no labels.yaml in {', '.join(map(str, missing))}")
    folders = args.folders or [f for f in DEFAULT_SETS if (f / "labels.yaml").is_file()]
    scores = [score(folder)[0] for folder in folders]
    print(f"signature {SIGNATURE_VERSION}\n")
    print(table(scores))
    for s in scores:
        if args.verbose and (s.wrong or s.disagreements):
            print(f"\n{s.name}:")
            for line in [*s.wrong, *s.disagreements]:
                print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
