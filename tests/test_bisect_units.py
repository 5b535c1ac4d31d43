"""Pure parts of the bisect tools: validation, the search with skips, version filtering, freeze diffs."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version
from rootcause.tools.bisect.causes import not_the_package, tls_note
from rootcause.tools.bisect.common import Judged
from rootcause.tools.bisect.index import Release, _files_from_html, between
from rootcause.tools.bisect.search import bisect
from rootcause.tools.bisect.uvenv import client_message, default_groups, diff_freezes, project_name, requirements_of
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.validate import package_name, version
from rootcause.tools.engines.bisect_env import detect_codegen, use_worktrees, verdict_of

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("bad", ["-e", "--index-url=x", "click==8.2", "click[extra]", "git+https://x/y", "", "a b"])
def test_package_names_refused(bad: str) -> None:
    with pytest.raises(UsageError):
        package_name(bad)


def test_package_name_canonical() -> None:
    assert package_name("Typing_Extensions") == "typing-extensions"


@pytest.mark.parametrize("bad", ["abc", "-1.0", "8.2.0; rm", "==8.2"])
def test_versions_refused(bad: str) -> None:
    with pytest.raises(UsageError, match="version"):
        version(bad)


async def _run_search(first_bad: int, count: int, skips: set[int] = frozenset()) -> tuple[int, int, list[int], int]:
    asked: list[int] = []

    async def judge(i: int):
        asked.append(i)
        return "skip" if i in skips else ("bad" if i >= first_bad else "good")

    found = await bisect(count, judge)
    return found.last_good, found.first_bad, found.ambiguous, len(asked)


@pytest.mark.parametrize("first_bad", range(1, 16))
async def test_search_finds_every_position_in_log2_steps(first_bad: int) -> None:
    last_good, found, ambiguous, steps = await _run_search(first_bad, 16)
    assert (last_good, found, ambiguous) == (first_bad - 1, first_bad, [])
    assert steps <= 4  # ceil(log2(15))


async def test_search_skips_like_git_bisect() -> None:
    assert (await _run_search(7, 12, {5}))[:3] == (6, 7, [])
    # The only commit next to the boundary is untestable: the answer names it as ambiguous.
    last_good, first_bad, ambiguous, _ = await _run_search(7, 12, {6})
    assert (last_good, first_bad, ambiguous) == (5, 7, [6])


def test_between_leaves_out_yanked_and_prereleases_but_keeps_endpoints() -> None:
    releases = [Release(Version(v), y, "oops" if y else None) for v, y in
                [("8.0.0", False), ("8.1.0", False), ("8.2.0rc1", False), ("8.2.0", False), ("8.2.1", True),
                 ("8.3.0", False), ("9.0", False)]]
    chosen, left = between(releases, Version("8.1.0"), Version("8.3.0"), prereleases=False, yanked=False)
    assert [str(v) for v in chosen] == ["8.1.0", "8.2.0", "8.3.0"]
    assert left == ["8.2.0rc1 (pre-release)", "8.2.1 (yanked: oops)"]
    chosen, _ = between(releases, Version("8.1.0"), Version("8.2.1"), prereleases=True, yanked=False,
                        keep=(Version("8.2.1"),))
    assert [str(v) for v in chosen] == ["8.1.0", "8.2.0rc1", "8.2.0", "8.2.1"]


def test_simple_html_yanked_marks() -> None:
    page = '<a href="x/click-8.2.2.tar.gz#sha256=1" data-yanked="bad">click-8.2.2.tar.gz</a>' \
           '<a href="x/click-8.2.1.tar.gz">click-8.2.1.tar.gz</a>'
    assert _files_from_html(page) == [{"filename": "click-8.2.2.tar.gz", "yanked": "bad"},
                                      {"filename": "click-8.2.1.tar.gz", "yanked": False}]


def test_freeze_diff_kinds_and_worktree_paths(tmp_path: Path) -> None:
    wa, wb = tmp_path / "a", tmp_path / "b"
    a = {"click": "8.1.8", "rich": "13.0.0", "old": "1.0", "proj": f"{wa.as_uri()}"}
    b = {"click": "8.2.0", "rich": "14.0.0", "new": "2.0", "proj": f"{wb.as_uri()}"}
    kinds = {d.package: d.kind for d in diff_freezes(a, b, "click", (wa, wb))}
    assert kinds == {"click": "target", "rich": "drift", "old": "removed", "new": "added"}


def test_requirements_of_skips_target_and_keeps_urls() -> None:
    text = requirements_of({"click": "8.1.8", "x": "file:///tmp/x.whl", "y": "1.0"}, skip="click")
    assert text == "x @ file:///tmp/x.whl\ny==1.0\n"


def test_client_message_starts_at_the_error() -> None:
    out = "Using Python 3.11\nResolved 3 packages\nerror: No solution found\n  cause: because x"
    assert client_message(out) == "error: No solution found\n  cause: because x"


def test_codegen_detection_and_worktree_switch(tmp_path: Path) -> None:
    assert detect_codegen(tmp_path) is None
    (tmp_path / "Makefile").write_text("all:\n\ttrue\npatchgen: deps\n\tpython gen.py\n")
    assert detect_codegen(tmp_path) == "make patchgen"
    assert use_worktrees("auto", None, "transformers") and use_worktrees("auto", "make patchgen", "click")
    assert not use_worktrees("auto", None, "click") and not use_worktrees("off", "x", "transformers")
    assert use_worktrees(True, None, "click")


def test_verdicts() -> None:
    ok = Judged("good", "pass", "exit 0")
    fail = Judged("bad", "fail", "exit code 1", signature="v1|TypeError|x")
    other = Judged("bad", "fail", "exit code 1", signature="v1|ImportError|y")
    missing = Judged("skip", "not_run", "the command was not found in the environment (command not found: x.)")
    assert verdict_of(ok, fail)[0] == "version_flips_outcome"
    assert verdict_of(fail, ok)[0] == "version_flips_outcome"
    assert verdict_of(ok, ok)[0] == "no_difference"
    assert verdict_of(fail, fail)[0] == "no_difference"
    assert verdict_of(fail, other)[0] == "both_fail_differently"
    verdict, detail, reason = verdict_of(missing, missing)
    assert verdict == "inconclusive" and reason == f"both sides: {missing.reason}" and "not the cause" not in detail
    assert verdict_of(ok, missing)[2] == f"B: {missing.reason}"


@pytest.mark.parametrize(("output", "code", "scopes", "reason"), [
    ("/bin/sh: 1: epproj-scripts: not found\n", 127, ("run",), "the command was not found"),
    ("python: can't open file '/w/repro.py': [Errno 2] No such file or directory\n", 2, ("run",),
     "script does not exist"),
    ("error: Request failed after 3 retries\n  Caused by: invalid peer certificate: UnknownIssuer\n", 2, ("run",),
     "over TLS"),
    ("Traceback (most recent call last):\nModuleNotFoundError: No module named 'requests'\n", 1, ("both",),
     "a module is missing"),
    ("Traceback (most recent call last):\nModuleNotFoundError: No module named 'requests'\n", 1, ("run",), None),
    ("Traceback (most recent call last):\nKeyError: 'console_scripts'\n", 1, ("run", "both"), None),
])
def test_failures_that_are_not_the_package(output: str, code: int, scopes: tuple, reason: str | None) -> None:
    found = not_the_package(output, code, scopes)
    assert (found is None) if reason is None else (reason in found)


def test_tls_failure_names_the_missing_ssl_cert_file(monkeypatch: pytest.MonkeyPatch) -> None:
    output = "error: Failed to fetch: `https://pypi.org/simple/click/`\n  Caused by: invalid peer certificate"
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    assert "SSL_CERT_FILE is not set" in tls_note(output) and tls_note("error: No solution found") == ""
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
    assert tls_note(output) == ""


@pytest.mark.parametrize(("pyproject", "name", "groups"), [
    ('[project]\nname = "Ep_Proj"\n[build-system]\nrequires = ["hatchling"]\n', "ep-proj", ()),
    ('[project]\nname = "virt"\n[dependency-groups]\ndev = ["six"]\nlint = ["ruff"]\n', None, ("dev",)),
    ('[project]\nname = "p"\n[tool.uv]\npackage = true\ndefault-groups = ["lint"]\n'
     '[dependency-groups]\ndev = ["six"]\nlint = ["ruff"]\n', "p", ("lint",)),
    ('[project]\nname = "p"\n[build-system]\nrequires = ["x"]\n[tool.uv]\npackage = false\ndefault-groups = "all"\n'
     '[dependency-groups]\ndev = ["six"]\nlint = ["ruff"]\n', None, ("dev", "lint")),
    ("not toml [", None, ()),
])
def test_project_name_and_default_groups(tmp_path: Path, pyproject: str, name: str | None,
                                         groups: tuple[str, ...]) -> None:
    """Which project bisect environments install (uv's package switch wins) and which groups uv sync would add."""
    (tmp_path / "pyproject.toml").write_text(pyproject)
    assert project_name(tmp_path) == name and default_groups(tmp_path) == groups


@pytest.mark.parametrize(("fields", "message"), [
    ({"timeout_s": float("nan")}, "timeout_s must be > 0 seconds and finite"),
    ({"idle_timeout_s": float("inf")}, "idle_timeout_s must be > 0 seconds and finite"),
    ({"setup_timeout_s": float("inf")}, "setup_timeout_s must be finite"),
    ({"launcher": "slurm"}, "run the reproducer locally"),
    ({"expect": "  "}, "expect is empty"),
])
def test_reproducer_fields_are_validated_once(tmp_path: Path, fields: dict, message: str) -> None:
    """Every bisect validates its reproducer the evidence layer's way before building anything."""
    from rootcause.tools.bisect.common import prepare
    from rootcause.tools.core.context import ToolContext
    from rootcause.tools.engines.bisect_commits import BisectCommitsInput

    with pytest.raises(UsageError, match=message):
        prepare(BisectCommitsInput(good="a", bad="b", command="true", **fields), ToolContext.for_root(tmp_path))
