"""`rootcause init`: starter knowledge files the knowledge tools can read; never an overwrite."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rootcause.tools.ecosystem.scaffold import init_knowledge
from rootcause.tools.knowledge.starter import TEMPLATES

from tests.conftest import rootcause_executable

NAMES = ["constraints.md", "architecture.md", "testing.md"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([rootcause_executable(), *args], capture_output=True, text=True, timeout=60)


def test_init_creates_three_files(repo: Path) -> None:
    proc = cli("init", "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr
    folder = repo / ".agents" / "knowledge"
    assert sorted(p.name for p in folder.iterdir()) == sorted(NAMES)
    for name in NAMES:
        text = (folder / name).read_text()
        assert text == TEMPLATES[name]
        assert text.startswith("# ") and "\n## " in text
        assert f"created  .agents/knowledge/{name}" in proc.stdout
    assert "| Path | How CI picks it up |" in (folder / "testing.md").read_text()


def test_templates_parse_as_numbered_entries() -> None:
    """The knowledge engine reads each template as one numbered entry with a bold title under a `##` section."""
    from rootcause.tools.knowledge.entries import parse_markdown

    for name, text in TEMPLATES.items():
        parsed = parse_markdown(text, name)
        numbered = [e for e in parsed.entries if e.kind == "numbered"]
        assert parsed.layout.kind == "numbered", name
        assert len(numbered) == 1 and numbered[0].number == 1, name
        assert numbered[0].title and ">" in numbered[0].section, name


def test_testing_table_maps_paths_to_workflows() -> None:
    rows = [line for line in TEMPLATES["testing.md"].splitlines() if line.startswith("| `")]
    assert rows and all(".github/workflows/" in row for row in rows)


def test_init_never_overwrites(repo: Path) -> None:
    folder = repo / ".agents" / "knowledge"
    folder.mkdir(parents=True)
    mine = "# My constraints\n\n## Data\n\n1. **Keep this**\n   - untouched bytes \r\n"
    (folder / "constraints.md").write_bytes(mine.encode())
    proc = cli("init", "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr
    assert (folder / "constraints.md").read_bytes() == mine.encode()
    assert "skipped  .agents/knowledge/constraints.md (already exists; left untouched)" in proc.stdout
    assert "created  .agents/knowledge/testing.md" in proc.stdout
    again = init_knowledge(repo)
    assert again.created == [] and sorted(again.skipped) == sorted(f".agents/knowledge/{n}" for n in NAMES)
    assert (folder / "constraints.md").read_bytes() == mine.encode()


def test_init_bad_repo(tmp_path: Path) -> None:
    proc = cli("init", "--repo", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "is not a directory" in proc.stderr
    (tmp_path / "r" / ".agents").mkdir(parents=True)
    (tmp_path / "r" / ".agents" / "knowledge").write_text("a file, not a folder")
    proc = cli("init", "--repo", str(tmp_path / "r"))
    assert proc.returncode == 2 and "is not a folder" in proc.stderr
