"""`rootcause demo` end to end: the bundled example debugged through the real stdio server."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from rootcause.tools.ecosystem.demo.driver import BUG_LINE, FIX_LINE, LOSS_FILE, build_example
from rootcause.tools.record.store import PHASE_NAMES

from tests.conftest import git, rootcause_executable

pytestmark = pytest.mark.slow


def test_demo_runs_the_whole_protocol() -> None:
    started = time.perf_counter()
    proc = subprocess.run([rootcause_executable(), "demo", "--keep"], capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    out = proc.stdout
    kept = re.search(r"example repository kept at (\S+)", out)
    root = Path(kept.group(1)) if kept else None
    try:
        assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
        assert elapsed < 60, f"the demo took {elapsed:.1f}s"
        for tool in ("start_session", "reproduce", "check_constraints", "bisect_commits", "verify_hypothesis",
                     "record_fix_attempt", "check_collateral", "capture_knowledge", "close_session"):
            assert re.search(rf"^─*\s*\d+\. {tool}\b", out, re.MULTILINE), f"step {tool} not printed"
        assert "✓ hypothesis 1 refuted" in out and "✓ hypothesis 2 supported" in out
        assert "✓ close refused before Phase 5" in out
        report = out.split("session report", 1)[1]
        for number, name in PHASE_NAMES.items():
            assert f"[x] Phase {number}: {name} — done" in report, f"phase {number} ({name}) not done in the report"
        assert "first bad commit" in out and "Simplify masked_mean" in out
        assert "**REFUTED**" in report and "**SUPPORTED**" in report
        assert report.count("# rootcause session ") == 1, "the report is printed once"
        assert re.search(r"\d+/\d+ checks passed", out) and "demo finished" in out
        # The kept repository shows what the agent did: two commits, the fix, the new constraint.
        assert root is not None and root.is_dir()
        assert len(git(root, "log", "--oneline").splitlines()) == 2
        assert FIX_LINE in (root / LOSS_FILE).read_text()
        constraints = (root / ".agents/knowledge/constraints.md").read_text()
        assert "Token averages divide by the number of real tokens" in constraints
        assert constraints.startswith("# Hard constraints\n\nRules of minitrain")  # existing bytes kept
        sessions = list((root / ".rootcause/sessions").iterdir())
        assert len(sessions) == 1
    finally:
        if root is not None:
            shutil.rmtree(root.parent, ignore_errors=True)


def test_example_repository(tmp_path: Path) -> None:
    """Two commits (the working loss, then the bug) and a clean tree: what the demo starts from."""
    import anyio

    target = tmp_path / "minitrain"
    anyio.run(build_example, target)
    assert BUG_LINE in (target / LOSS_FILE).read_text()
    assert FIX_LINE in git(target, "show", "HEAD~1:" + LOSS_FILE) + "\n"
    assert (target / ".gitignore").is_file() and (target / ".agents/knowledge/constraints.md").is_file()
    assert git(target, "status", "--porcelain") == ""
    assert len(git(target, "log", "--oneline").splitlines()) == 2
