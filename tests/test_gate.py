"""The verification gate is right or quiet (issue 25, point 5): logical changes rather than hunks, a disproof
searched only when it is marked, and the tree the experiment's code came from wherever its driver lives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.engines.start_session import StartSessionInput, start_session
from rootcause.tools.judge.baseline import FileChange, TreeChanges, generated, tree_changes, worktree_changes
from rootcause.tools.judge.gate import disproof_checked, one_variable
from rootcause.tools.judge.symbols import logical_changes
from rootcause.tools.observe.evidence import Observation, RunFields, declare
from rootcause.tools.observe.evidence.trees import ExperimentTree, experiment_tree, settle_tree
from rootcause.tools.record.store import SessionStore

from tests.conftest import git

CLOCK = '''import sys
from datetime import datetime, timedelta

DEADLINE = datetime.fromisoformat("2000-01-01T00:00:00+00:00")


def banner():
    return "clock report"


def started():
    return datetime.utcnow() - timedelta(seconds=5)


def overdue(now):
    return now > DEADLINE


def report():
    stamp = datetime.utcnow()
    return f"stamp={stamp.isoformat()} overdue={overdue(stamp)} since={started():%Y}"


if __name__ == "__main__":
    print(report())
'''


def migrate(text: str) -> str:
    """One API migration, four hunks: an import, a helper, two call sites (datetime.utcnow -> an aware now)."""
    return (text.replace("from datetime import datetime, timedelta", "from datetime import datetime, timedelta, "
                                                                      "timezone")
            .replace("\n\ndef started", "\n\ndef _now():\n    return datetime.now(timezone.utc)\n\n\ndef started")
            .replace("datetime.utcnow()", "_now()"))


# ---------------------------------------------------------------- symbols


def test_an_api_migration_is_one_change() -> None:
    assert logical_changes(CLOCK, migrate(CLOCK)) == [
        ["from datetime import timezone", "_now()", "started()", "report()"]]


def test_unrelated_symbols_are_separate_changes() -> None:
    edited = CLOCK.replace('"clock report"', '"the clock"').replace("seconds=5", "seconds=6")
    assert logical_changes(CLOCK, edited) == [["banner()"], ["started()"]]
    both = migrate(CLOCK).replace('"clock report"', '"the clock"')
    assert logical_changes(CLOCK, both) == [["from datetime import timezone", "_now()", "started()", "report()"],
                                            ["banner()"]]


def test_comments_and_formatting_are_no_change() -> None:
    edited = CLOCK.replace("def banner():", "# shown first\ndef banner( ):").replace("import sys", "import sys\n\n")
    assert logical_changes(CLOCK, edited) == []


def test_an_import_counts_with_the_symbols_using_it() -> None:
    edited = CLOCK.replace("import sys\n", "import sys\nimport json\n").replace(
        'return "clock report"', 'return json.dumps("clock report")')
    assert logical_changes(CLOCK, edited) == [["import json", "banner()"]]
    unused = CLOCK.replace("import sys\n", "import sys\nimport json\n").replace("seconds=5", "seconds=6")
    assert logical_changes(CLOCK, unused) == [["import json"], ["started()"]]


def test_class_members_and_a_new_class() -> None:
    model = ("class Model:\n    scale = 2\n\n    def forward(self, x):\n        return self.norm(x) * self.scale\n\n"
             "    def norm(self, x):\n        return x\n\n    def name(self):\n        return 'm'\n")
    helper = model.replace("return x\n", "return x / 2\n").replace("self.norm(x) * self.scale",
                                                                    "self.norm(x) * self.scale + self.norm(x)")
    assert logical_changes(model, helper) == [["Model.forward()", "Model.norm()"]]
    apart = model.replace("return x\n", "return x / 2\n").replace("return 'm'", "return 'model'")
    assert logical_changes(model, apart) == [["Model.norm()"], ["Model.name()"]]
    grown = model + "\n\nclass Head:\n    def a(self):\n        return 1\n\n    def b(self):\n        return 2\n"
    assert logical_changes(model, grown) == [["class Head", "Head.a()", "Head.b()"]]
    assert logical_changes(model, model + "def broken(:\n") is None


# ---------------------------------------------------------------- the tree in a real repository


@pytest.fixture
def clock(repo: Path) -> Path:
    (repo / "clock.py").write_text(CLOCK)
    (repo / "units.py").write_text("def seconds(n):\n    return n\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "clock")
    return repo


def _state(root: Path) -> Any:
    ctx = ToolContext.for_root(root)
    sid = start_session(StartSessionInput(symptom="TypeError: can't compare offset-naive and offset-aware "
                                                  "datetimes"), ctx).session_id
    return SessionStore(ctx.workspace).load(sid)


def test_tree_changes_read_python_files_symbol_by_symbol(clock: Path) -> None:
    state = _state(clock)
    (clock / "clock.py").write_text(migrate(CLOCK))
    (clock / "__pycache__").mkdir()
    (clock / "__pycache__" / "clock.cpython-311.pyc").write_bytes(b"\0")  # what a run writes is not a change
    changes = tree_changes(clock, state)
    assert changes is not None and [f.path for f in changes.files] == ["clock.py"]
    only = changes.files[0]
    assert only.hunks == 4 and only.logical == 1
    assert only.one_line() == ("clock.py (+7 -3, 4 hunks) — 1 change: from datetime import timezone, _now(), "
                               "started(), report()")
    check = one_variable(changes, "datetime.utcnow -> an aware now", {})
    assert check.passed and check.why.startswith("one change since the session start: clock.py")


def test_generated_files() -> None:
    assert generated("__pycache__/clock.cpython-311.pyc") and generated("pkg/mod.pyc")
    assert generated("src/proj.egg-info/PKG-INFO") and not generated("src/model.py")


def _file(path: str, groups: list[list[str]] | None, note: str = "") -> FileChange:
    return FileChange(path=path, hunks=2, added=3, removed=1, note=note, changes=groups)


def test_one_variable_counts_logical_changes() -> None:
    def check(*files: FileChange, tree: ExperimentTree | None = None):
        return one_variable(TreeChanges(start_head="a", head="a", files=list(files)), "the stated change", {}, tree)

    two_symbols = check(_file("clock.py", [["banner()"], ["started()"]]))
    assert not two_symbols.passed and "2 unrelated places" in two_symbols.why
    assert "2 unrelated changes: banner(); started()" in two_symbols.why
    two_files = check(_file("clock.py", [["started()"]]), _file("units.py", [["seconds()"]]))
    assert not two_files.passed and "2 files changed" in two_files.why
    config = check(_file("clock.py", [["started()"]]), _file("config.yaml", None))
    assert not config.passed and "config.yaml" in config.why  # a non-Python file counts as one change
    cosmetic = check(_file("clock.py", [["started()"]]), _file("units.py", []))
    assert cosmetic.passed and "not counted: units.py (no symbol changed" in cosmetic.why
    script = ExperimentTree(kind="root", path=Path("/r"), scripts=["repro.py"])
    own = check(_file("clock.py", [["started()"]]), _file("repro.py", None, note="new file"), tree=script)
    assert own.passed and "not counted: repro.py (the experiment's own new script)" in own.why


def test_a_check_that_cannot_decide_is_quiet() -> None:
    unseen = one_variable(None, "x", {}, ExperimentTree(kind="unseen", path=Path("/tmp/x.py"), why="it runs /tmp/x.py"))
    assert unseen.passed and unseen.why.startswith("not checked: it runs /tmp/x.py")
    no_git = one_variable(None, "x", {})
    assert no_git.passed and no_git.why.startswith("not checked:") and "not a git repository" in no_git.why


# ---------------------------------------------------------------- the disproof


def _run(outcome: str = "pass") -> Observation:
    return Observation(run_id="r1", outcome=outcome, outcome_reason="exit 0", duration_s=0.1, log_path="x",
                       log_uri="rootcause://runs/r1/log")


OUTPUT = "stamp=2026-01-02T03:04:05+00:00 overdue=True since=2026\n"


def test_prose_is_recorded_and_never_matched() -> None:
    prose = "the report still fails with the TypeError in 'overdue', or it passes with a naive 'stamp'"
    check, observed = disproof_checked(prose, None, "supported", [(_run(), OUTPUT)])
    assert check.passed and observed is None
    assert check.why.startswith("not checked: the disproof is prose") and "'overdue'" in check.why
    assert "disproof_regex" in check.why and "/ZeroDivisionError/" in check.why


def test_a_pattern_that_matches_a_supported_run_alarms() -> None:
    check, observed = disproof_checked("the stamp has no UTC offset", r"stamp=[\d:.T-]+ ", "supported",
                                       [(_run(), "stamp=2026-01-02T03:04:05 overdue=True\n")])
    assert not check.passed and observed is True
    assert check.why.startswith(r"searched the output for disproof_regex /stamp=[\d:.T-]+ /: ")
    assert "matched run r1: 'stamp=2026-01-02T03:04:05 overdue=True'" in check.why and "contradicts" in check.why
    marked, seen = disproof_checked("it still says /overdue=True/", None, "supported", [(_run(), OUTPUT)])
    assert not marked.passed and seen is True and "the pattern marked in disproof /overdue=True/" in marked.why
    refuted, seen = disproof_checked("it still says /overdue=True/", None, "refuted", [(_run("fail"), OUTPUT)])
    assert refuted.passed and seen is True and "disproved as stated" in refuted.why


def test_a_pattern_not_found() -> None:
    check, observed = disproof_checked("still fails with /TypeError/", None, "supported", [(_run(), OUTPUT)])
    assert check.passed and observed is False and check.why.endswith("/TypeError/: not found in 1 run(s)")
    unsure, observed = disproof_checked("still fails with /TypeError/", None, "inconclusive", [(_run("hang"), "")])
    assert unsure.passed and observed is False and unsure.why.startswith("not checked: searched")


# ---------------------------------------------------------------- which tree the code came from


def _tree(root: Path, command: str | list[str], **fields: Any) -> ExperimentTree:
    decl = declare(RunFields(command=command, **fields), ToolContext.for_root(root).workspace, label="t")
    return experiment_tree(decl, root)


def test_a_driver_outside_the_root_that_imports_its_code(clock: Path, tmp_path: Path) -> None:
    drivers = tmp_path / "drivers"
    drivers.mkdir()
    (drivers / "drive.py").write_text(f"import sys\nsys.path.insert(0, {str(clock)!r})\nimport clock\n"
                                      "print(clock.report())\n")
    tree = _tree(clock, ["python", str(drivers / "drive.py")])
    assert tree.kind == "root" and tree.driver == str(drivers / "drive.py")
    assert "imports clock" in tree.why and "the driver itself is not checked" in tree.why
    (drivers / "run.sh").write_text(f"#!/bin/sh\npython {clock / 'clock.py'}\n")
    assert _tree(clock, ["sh", str(drivers / "run.sh")]).kind == "root"
    # PYTHONPATH from the command's env reaches the root as well
    (drivers / "bare.py").write_text("import clock\nprint(clock.report())\n")
    assert _tree(clock, ["python", str(drivers / "bare.py")], env={"PYTHONPATH": str(clock)}).kind == "root"


def test_a_driver_outside_the_root_that_reaches_a_worktree(clock: Path, tmp_path: Path) -> None:
    work = clock / ".rootcause" / "worktrees" / "exp"
    git(clock, "worktree", "add", "-q", "--detach", str(work), "HEAD")
    (tmp_path / "drive.py").write_text(f"import sys\nsys.path.insert(0, {str(work)!r})\nimport clock\n")
    tree = _tree(clock, ["python", str(tmp_path / "drive.py")])
    assert tree.kind == "other_tree" and tree.path == work.resolve()
    (work / "clock.py").write_text(migrate(CLOCK))
    changes = worktree_changes(work)
    assert changes is not None and one_variable(changes, "x", {}, tree).passed


def test_a_patched_copy_outside_the_root_is_unseen(clock: Path, tmp_path: Path) -> None:
    (tmp_path / "clock.py").write_text(migrate(CLOCK))
    tree = _tree(clock, ["python", str(tmp_path / "clock.py")])
    assert tree.kind == "unseen" and "reaches no code inside it" in tree.why
    # its own copy of a project module next to it shadows the root's
    (tmp_path / "drive.py").write_text("import clock\nprint(clock.report())\n")
    assert _tree(clock, ["python", str(tmp_path / "drive.py")]).kind == "unseen"


def test_the_command_scripts_inside_the_root(clock: Path) -> None:
    tree = _tree(clock, "python clock.py")
    assert tree.kind == "root" and tree.scripts == ["clock.py"] and tree.driver is None


def test_settle_tree_from_the_run(clock: Path, tmp_path: Path) -> None:
    unseen = ExperimentTree(kind="unseen", path=tmp_path / "x.py", why="it runs x.py")
    settled = settle_tree(unseen, clock, clock, ["/usr/lib/python3.11/runpy.py", "clock.py"], [])
    assert settled.kind == "root" and "the run's traceback names" in settled.why
    assert settle_tree(unseen, clock, clock, ["/usr/lib/python3.11/runpy.py"], []) == unseen
    root = ExperimentTree(kind="root", path=clock, why="the experiment runs the working tree")
    stale = settle_tree(root, clock, clock, [], ["/elsewhere/clock.py"])
    assert stale.kind == "unseen" and "/elsewhere/clock.py" in stale.why
