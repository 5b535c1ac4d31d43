"""Guards and codegen freshness in a real git repository with a real Makefile codegen check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.check_constraints import CheckConstraintsInput, check_constraints

from tests.conftest import git

pytestmark = pytest.mark.anyio

CONSTRAINTS = """\
# Constraints

## Codegen

1. **Generated model files must not be edited manually**
   - Files under `pkg/models/*/generated/` are written by `gen.py` from each model's spec.
   - To change them, edit the spec in `pkg/models/<m>/spec.txt` and run `make patchgen`.

## Runtime

2. **Workers must reseed**
   - Each dataloader worker seeds numpy in worker_init_fn.

<!-- rootcause:generated vendor/pinned/** -->
"""
GEN = """\
import difflib, pathlib, sys
root = pathlib.Path(__file__).parent
spec = root / "pkg/models/toy/spec.txt"
out = root / "pkg/models/toy/generated/modeling_toy.py"
expected = "# generated from spec.txt: do not edit\\n" + "".join(
    f"{name.strip()} = {n}\\n" for n, name in enumerate(spec.read_text().split(",")))
if "--check" in sys.argv:
    current = out.read_text() if out.exists() else ""
    if current != expected:
        print(f"stale: {out.relative_to(root)} differs from what gen.py produces")
        sys.stdout.writelines(difflib.unified_diff(expected.splitlines(True), current.splitlines(True),
                                                   "expected", "current"))
        sys.exit(1)
    print("generated code is fresh")
else:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(expected)
"""


@pytest.fixture
def codegen_repo(repo: Path) -> Path:
    (repo / ".agents" / "knowledge").mkdir(parents=True)
    (repo / ".agents" / "knowledge" / "constraints.md").write_text(CONSTRAINTS)
    (repo / "gen.py").write_text(GEN)
    (repo / "pkg" / "models" / "toy").mkdir(parents=True)
    (repo / "pkg" / "models" / "toy" / "spec.txt").write_text("alpha, beta, gamma")
    (repo / "Makefile").write_text(f"PYTHON ?= {sys.executable}\n\npatchgen:\n\t$(PYTHON) gen.py\n\n"
                                   "check-patchgen:\n\t$(PYTHON) gen.py --check\n\n.PHONY: patchgen check-patchgen\n")
    import subprocess

    subprocess.run([sys.executable, "gen.py"], cwd=repo, check=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "toy codegen project")
    return repo


async def check(root: Path, **kwargs):
    return await check_constraints(CheckConstraintsInput(**kwargs), ToolContext.for_root(root))


GENERATED = "pkg/models/toy/generated/modeling_toy.py"


async def test_clean_tree_is_fresh_and_unguarded(codegen_repo: Path) -> None:
    result = await check(codegen_repo, symptom="AttributeError: toy model has no attribute delta", check_codegen=True)
    assert sorted(result.guards) == ["pkg/models/*/generated/**", "vendor/pinned/**"]
    assert result.guard_violations == [] and result.changed_files == 0
    assert result.codegen_stale is False
    assert result.codegen.command == ["make", "check-patchgen"] and result.codegen.source == "Makefile target " \
        "check-patchgen"
    assert "generated code is fresh" in result.codegen.excerpt
    assert (codegen_repo / result.codegen.log_path).is_file()


async def test_edited_generated_file_is_flagged_and_stale(codegen_repo: Path) -> None:
    target = codegen_repo / GENERATED
    target.write_text(target.read_text() + "delta = 3\n")
    result = await check(codegen_repo, symptom="my new attribute in the generated toy model vanished",
                         check_codegen=True)
    [violation] = result.guard_violations
    assert violation.path == GENERATED and violation.glob == "pkg/models/*/generated/**"
    assert violation.title == "Generated model files must not be edited manually"
    assert violation.file == ".agents/knowledge/constraints.md" and violation.line == 5 and violation.source == "prose"
    assert result.codegen_stale is True and result.codegen.exit_code != 0
    assert f"stale: {GENERATED} differs" in result.codegen.excerpt and "+delta = 3" in result.codegen.excerpt
    # the built-in pitfall is the project's own constraint here: shown once, as the project's entry
    assert "generated_model_patches" not in [p.name for p in result.pitfalls]
    assert any(n.startswith("built-in pitfall generated_model_patches is not listed: the project documents it "
                            "(.agents/knowledge/constraints.md:") for n in result.notes), result.notes
    assert "GUARD: pkg/models/toy/generated/modeling_toy.py" in result.summary()
    assert "STALE" in result.summary()
    # staged edits and untracked files count too; the spec itself is not guarded
    git(codegen_repo, "add", GENERATED)
    (codegen_repo / "pkg/models/toy/generated/extra.py").write_text("x = 1\n")
    (codegen_repo / "vendor" / "pinned").mkdir(parents=True)
    (codegen_repo / "vendor" / "pinned" / "lib.py").write_text("y = 2\n")
    (codegen_repo / "pkg/models/toy/spec.txt").write_text("alpha, beta, gamma, delta")
    result = await check(codegen_repo)
    assert sorted((v.path, v.source) for v in result.guard_violations) == [
        ("pkg/models/toy/generated/extra.py", "prose"), (GENERATED, "prose"), ("vendor/pinned/lib.py", "marker")]
    assert result.codegen is None and result.codegen_stale is None


async def test_paths_argument_overrides_the_working_tree(codegen_repo: Path) -> None:
    (codegen_repo / GENERATED).write_text("edited\n")
    result = await check(codegen_repo, paths=["pkg/models/toy/spec.txt"])
    assert result.guard_violations == [] and result.changed_files == 1
    result = await check(codegen_repo, paths=[str(codegen_repo / GENERATED)])
    assert [v.path for v in result.guard_violations] == [GENERATED]
    with pytest.raises(UsageError, match="outside the root"):
        await check(codegen_repo, paths=["../elsewhere.py"])


async def test_configured_codegen_command_and_missing_check(codegen_repo: Path, tmp_path: Path) -> None:
    (codegen_repo / GENERATED).write_text("edited\n")
    result = await check(codegen_repo, check_codegen=True, codegen_command=f"{sys.executable} gen.py --check")
    assert result.codegen.source == "codegen_command argument" and result.codegen_stale is True
    bare = tmp_path / "bare"
    bare.mkdir()
    result = await check(bare, symptom="loss is nan", check_codegen=True)
    assert result.codegen.ran is False and result.codegen_stale is None
    assert "no codegen check found" in result.codegen.source
    assert result.entries == 0 and any("only the built-in pitfalls" in n for n in result.notes)
    assert [c.name for c in result.checklists] == ["numerical_checklist"]


async def test_knowledge_dir_outside_root_and_env(codegen_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match=r"knowledge folder '\.\./x' resolves to .* outside the root"):
        await check(codegen_repo, symptom="x", knowledge_dir="../x")
    other = codegen_repo / "notes"
    other.mkdir()
    (other / "k.md").write_text("# K\n\n- **Okapi rule**: okapis need shade.\n- b\n- c\n")
    monkeypatch.setenv("ROOTCAUSE_KNOWLEDGE_DIR", "notes")
    result = await check(codegen_repo, symptom="okapis in the sun")
    assert result.knowledge_dir == "notes" and result.matches[0].title == "Okapi rule"


async def test_explicit_missing_knowledge_dir_is_refused(codegen_repo: Path) -> None:
    with pytest.raises(UsageError, match="knowledge folder 'nope' does not exist"):
        await check(codegen_repo, symptom="x", knowledge_dir="nope")
