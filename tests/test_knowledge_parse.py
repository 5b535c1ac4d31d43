"""Parsing knowledge files into entries: the real VeOmni files and our own formats."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from rootcause.tools.knowledge.entries import parse_markdown
from rootcause.tools.knowledge.guards import collect_guards, glob_regex, normalize_glob, violations

from tests.conftest import FIXTURES, SHARED

VEOMNI = SHARED / "fixtures" / "veomni-knowledge"
OWN = FIXTURES / "knowledge"
needs_veomni = pytest.mark.skipif(not VEOMNI.is_dir(), reason=f"shared fixture folder {VEOMNI} is absent")


def parse(folder: Path, name: str):
    return parse_markdown((folder / name).read_text(encoding="utf-8"), name)


@needs_veomni
def test_constraints_has_27_numbered_entries_with_lines_and_sections() -> None:
    parsed = parse(VEOMNI, "constraints.md")
    numbered = [e for e in parsed.entries if e.kind == "numbered"]
    assert [e.number for e in numbered] == list(range(1, 28))
    lines = (VEOMNI / "constraints.md").read_text(encoding="utf-8").splitlines()
    for entry in numbered:
        assert lines[entry.line - 1].startswith(f"{entry.number}. **"), entry
    by_number = {e.number: e for e in numbered}
    assert by_number[3].title == "Patchgen-generated files must not be edited manually"
    assert by_number[3].line == 16
    assert by_number[7].section == "Hard Constraints > Distributed Training > Sequence Parallel (Ulysses)"
    assert by_number[16].section == "Hard Constraints > Checkpoint"
    # "Core files:" lists before entries are section prose, not entries, and not part of the entry above.
    assert "data_collator.py" not in by_number[8].body
    assert any(e.kind == "section" and e.title == "Data Pipeline" and "data_collator.py" in e.body
               for e in parsed.entries)


@needs_veomni
def test_three_space_sub_bullets_after_two_digit_numbers_stay_with_their_entry() -> None:
    """`23. **...**` with 3-space sub-bullets parses (CommonMark) as a sibling list: it still belongs to 23."""
    parsed = parse(VEOMNI, "constraints.md")
    by_number = {e.number: e for e in parsed.entries if e.kind == "numbered"}
    assert "get_device_type()" in by_number[23].body
    assert "TextDPOTrainer" in by_number[24].body and "OpSlot" not in by_number[24].body
    assert "forward-scoped ownership" in by_number[25].body
    assert parsed.layout.indents[4].count(3) == 3 and Counter(parsed.layout.indents[4]).most_common(1)[0][0] == 4


@needs_veomni
def test_other_real_files_parse() -> None:
    uv = parse(VEOMNI, "uv.md")
    assert [e.number for e in uv.entries if e.kind == "numbered"][-6:] == [1, 2, 3, 4, 5, 6]
    assert any(e.title == "Transformers Version" for e in uv.entries)
    arch = parse(VEOMNI, "architecture.md")
    assert arch.layout.kind == "heading"
    assert {"Module Map", "Parallelization Flow", "Test Commands by Change Area"} <= {e.title for e in arch.entries}


def test_heading_per_entry_file() -> None:
    parsed = parse(OWN, "headings.md")
    assert parsed.layout.kind == "heading"
    titles = [(e.title, e.line, e.number) for e in parsed.entries]
    assert ("Tokenizer padding side must be left for batched generation", 5, None) in titles
    assert ("Data loader workers must reseed numpy", 11, 2) in titles
    stub = next(e for e in parsed.entries if e.title == "Stub import paths")
    assert stub.section == "Gotchas > Generated protobuf stubs" and "sys.path" in stub.body


def test_plain_bullet_file() -> None:
    parsed = parse(OWN, "bullets.md")
    assert parsed.layout.kind == "bullets"
    bullets = [e for e in parsed.entries if e.kind == "bullet"]
    assert len(bullets) == 5
    assert bullets[0].title == "Mixed precision" and bullets[0].line == 3 and "65536" in bullets[0].body
    assert bullets[1].title.startswith("Barrier before destroying the process group")
    assert all(e.section == "Quick notes" for e in bullets)


def test_guards_from_prose_and_marker() -> None:
    files = {name: parse(OWN, name) for name in ("headings.md", "bullets.md")}
    guards = {g.glob: g for g in collect_guards(files)}
    assert set(guards) == {"proto/gen/**", "build/autogen/**", "src/*_pb2.py"}
    assert guards["proto/gen/**"].source == "prose" and guards["proto/gen/**"].line == 16
    assert guards["src/*_pb2.py"].source == "marker" and guards["src/*_pb2.py"].line == 11
    found = violations(list(guards.values()), ["proto/gen/a_pb2.py", "proto/src/a.proto", "src/x_pb2.py",
                                               "src/sub/x_pb2.py", "build/autogen/deep/f.c", "README.md"])
    assert [v.path for v in found] == ["proto/gen/a_pb2.py", "src/x_pb2.py", "build/autogen/deep/f.c"]


@needs_veomni
def test_veomni_guard_is_the_generated_folder_only() -> None:
    parsed = {"constraints.md": parse(VEOMNI, "constraints.md")}
    guards = collect_guards(parsed)
    assert [g.glob for g in guards] == ["veomni/models/transformers/*/generated/**"]
    hits = violations(guards, ["veomni/models/transformers/qwen3/generated/modeling_qwen3.py",
                               "veomni/models/transformers/qwen3/patch_spec.py",
                               "veomni/models/transformers/qwen3/modeling_qwen3_patch.py"])
    assert [h.path for h in hits] == ["veomni/models/transformers/qwen3/generated/modeling_qwen3.py"]


@pytest.mark.parametrize(("raw", "path", "expected"), [
    ("a/<m>/gen/", "a/x/gen/f.py", True),
    ("a/<m>/gen/", "a/x/y/gen/f.py", False),
    ("a/**/gen/*.py", "a/x/y/gen/f.py", True),
    ("*_pb2.py", "deep/down/f_pb2.py", True),
    ("docs/api", "docs/api/index.md", True),
    ("docs/api", "docs/apiary.md", False),
])
def test_glob_semantics(raw: str, path: str, expected: bool) -> None:
    assert bool(glob_regex(normalize_glob(raw)).match(path)) is expected
