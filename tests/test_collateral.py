"""check_collateral on a real repository: the base runs in a worktree, the fix in the working tree."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.check_collateral import CheckCollateralInput, check_collateral, parse_junit
from rootcause.tools.engines.start_session import StartSessionInput, start_session
from rootcause.tools.record.store import SessionStore

from tests.conftest import error_text, git, memory_client, structured

pytestmark = pytest.mark.anyio

CALC = "def add(a, b):\n    return a + b + 1\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = """\
from calc import add, mul


def test_add():
    assert add(2, 2) == 4


def test_mul():
    assert mul(2, 3) == 6


class TestMore:
    def test_zero(self):
        assert mul(0, 5) == 0
"""
CLEAN_FIX = CALC.replace("a + b + 1", "a + b")
COLLATERAL_FIX = CLEAN_FIX.replace("a * b", "a * b + 1")
PYTEST = f"{sys.executable} -m pytest -q tests"
UNITTESTS = """\
import unittest

from calc import add, mul


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 2), 4)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)
"""


def build_calc_repo(root: Path) -> Path:
    """HEAD has a bug in add (test_add fails); the fix is written into the working tree by each test."""
    (root / "tests").mkdir()
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(TESTS)
    (root / "check.py").write_text("from calc import mul\nassert mul(2, 3) == 6, 'mul is broken'\n")
    (root / "utests").mkdir()
    (root / "utests" / "test_calc_unit.py").write_text(UNITTESTS)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "calc with a bug in add")
    return root


def tree_state(root: Path) -> tuple[str, str, str, str]:
    return (git(root, "rev-parse", "HEAD"), git(root, "status", "--porcelain", "--untracked-files=all"),
            git(root, "diff"), git(root, "worktree", "list"))


def ctx(root: Path) -> ToolContext:
    return ToolContext.for_root(root)


async def test_collateral_fix_is_caught_and_tree_untouched(repo: Path, no_leftover_processes) -> None:
    build_calc_repo(repo)
    (repo / "calc.py").write_text(COLLATERAL_FIX)
    before = tree_state(repo)
    seen: list[str] = []

    async def progress(done: float, total: float | None, message: str) -> None:
        seen.append(message)

    result = await check_collateral(CheckCollateralInput(command=PYTEST), ToolContext.for_root(repo, progress))
    assert result.verdict == "collateral"
    assert result.new_failures == ["tests/test_calc.py::TestMore::test_zero", "tests/test_calc.py::test_mul"]
    assert result.fixed == ["tests/test_calc.py::test_add"] and result.still_failing == []
    assert result.base_run.source == result.fix_run.source == "junit"
    assert (result.base_run.tests, result.fix_run.tests) == (3, 3)
    assert result.base_run.tree.startswith("base ") and result.fix_run.tree == "working tree"
    assert tree_state(repo) == before, "the user's HEAD, tree and worktree list are unchanged"
    assert not any((repo / ".rootcause" / "worktrees").iterdir())
    # the junit reports are read and removed; the logs the result names stay
    assert not any((repo / ".rootcause" / "collateral").iterdir())
    assert (repo / result.base_run.run.log_path).is_file() and (repo / result.fix_run.run.log_path).is_file()
    assert any("base tree" in m for m in seen) and any("fix tree" in m for m in seen)
    assert "COLLATERAL" in result.summary() and "test_mul" in result.summary()


async def test_clean_fix_with_session_evidence(repo: Path) -> None:
    build_calc_repo(repo)
    (repo / "calc.py").write_text(CLEAN_FIX)
    before = tree_state(repo)
    session = start_session(StartSessionInput(symptom="AssertionError in test_add"), ctx(repo)).session_id
    result = await check_collateral(CheckCollateralInput(command=PYTEST, session_id=session), ctx(repo))
    assert result.verdict == "clean" and result.new_failures == []
    assert result.fixed == ["tests/test_calc.py::test_add"]
    assert result.fix_run.outcome == "pass" and result.base_run.outcome == "fail"
    assert tree_state(repo) == before
    state = SessionStore(ctx(repo).workspace).load(session)
    assert state.evidence[-1].tool == "check_collateral" and state.evidence[-1].data["verdict"] == "clean"
    assert state.phase(4).status == "in_progress" and state.facts["collateral_verdict"] == "clean"


async def test_non_pytest_command_compares_outcomes(repo: Path) -> None:
    build_calc_repo(repo)
    (repo / "calc.py").write_text(COLLATERAL_FIX)
    broken = await check_collateral(CheckCollateralInput(command=f"{sys.executable} check.py"), ctx(repo))
    assert broken.verdict == "collateral" and not broken.pytest and broken.mode == "command"
    assert broken.base_run.outcome == "pass" and broken.fix_run.outcome == "fail"
    assert "AssertionError" in broken.new_failures[0]
    (repo / "calc.py").write_text(CLEAN_FIX)
    clean = await check_collateral(CheckCollateralInput(command=[sys.executable, "check.py"]), ctx(repo))
    assert clean.verdict == "clean" and clean.new_failures == []


async def test_unittest_ids_are_compared(repo: Path) -> None:
    build_calc_repo(repo)
    (repo / "calc.py").write_text(COLLATERAL_FIX)
    command = f"{sys.executable} -m unittest discover -s utests -v"
    broken = await check_collateral(CheckCollateralInput(command=command), ctx(repo))
    assert broken.mode == "unittest" and broken.verdict == "collateral"
    assert broken.new_failures == ["test_calc_unit.CalcTest.test_mul"]
    assert broken.fixed == ["test_calc_unit.CalcTest.test_add"]
    assert (broken.base_run.tests, broken.fix_run.tests) == (2, 2)
    (repo / "calc.py").write_text(CLEAN_FIX)
    clean = await check_collateral(CheckCollateralInput(command=command), ctx(repo))
    assert clean.verdict == "clean" and clean.fixed == ["test_calc_unit.CalcTest.test_add"]


async def test_shell_pytest_and_hang_is_inconclusive(repo: Path) -> None:
    build_calc_repo(repo)
    (repo / "calc.py").write_text(CLEAN_FIX)
    shell = await check_collateral(CheckCollateralInput(command=f"cd tests && {PYTEST.replace(' tests', '')}",
                                                        shell=True), ctx(repo))
    assert shell.pytest and shell.fix_run.source == "junit" and shell.verdict == "clean"
    assert shell.fixed == ["tests/test_calc.py::test_add"]
    (repo / "tests" / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(60)\n")
    hung = await check_collateral(CheckCollateralInput(command=PYTEST, timeout_s=4), ctx(repo))
    assert hung.verdict == "inconclusive" and hung.fix_run.outcome == "hang"
    assert "did not complete" in hung.reason
    assert not any((repo / ".rootcause" / "collateral").iterdir()), "a hung run's junit folder is removed as well"


def test_junit_ids_become_node_ids(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "test_a.py").write_text("")
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest" tests="4">'
        '<testcase classname="pkg.test_a" name="test_ok"/>'
        '<testcase classname="pkg.test_a.TestK" name="test_p[1-2]"><failure message="x"/></testcase>'
        '<testcase classname="" name="pkg.test_a"><error message="collection failure"/></testcase>'
        '<testcase classname="gone.mod" name="test_x"><error message="setup"/></testcase>'
        "</testsuite></testsuites>")
    assert parse_junit(report, [tmp_path]) == (4, ["gone.mod::test_x", "pkg/test_a.py",
                                                   "pkg/test_a.py::TestK::test_p[1-2]"])
    (tmp_path / "bad.xml").write_text("<testsuites")
    assert parse_junit(tmp_path / "bad.xml", [tmp_path]) is None


@pytest.mark.parametrize(("arguments", "message"), [
    ({"command": "pytest", "base": "-rf"}, "not a valid ref"),
    ({"command": "pytest", "base": "no-such-ref"}, "does not resolve"),
    ({"command": "  "}, "command is empty"),
    ({"command": "pytest", "cwd": "../.."}, "outside the root"),
    ({"command": "pytest", "session_id": "20200101-000000-abcdef"}, "unknown session"),
])
async def test_bad_input(repo: Path, arguments: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        await check_collateral(CheckCollateralInput.model_validate(arguments), ctx(repo))


async def test_through_the_in_memory_client(repo: Path) -> None:
    build_calc_repo(repo)
    (repo / "calc.py").write_text(COLLATERAL_FIX)
    async with memory_client(repo) as client:
        result = await client.call_tool("check_collateral", {"command": PYTEST})
        data = structured(result)
        assert data["verdict"] == "collateral" and "tests/test_calc.py::test_mul" in data["new_failures"]
        assert result.content[0].text.startswith("check_collateral: COLLATERAL")
        assert "not a valid ref" in error_text(await client.call_tool("check_collateral",
                                                                      {"command": "pytest", "base": "--all"}))
