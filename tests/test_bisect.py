"""bisect_env, bisect_versions and bisect_commits on real uv environments, real PyPI packages, real git history.

The click regression is real: CliRunner(mix_stderr=False) raises TypeError from click 8.2.0 on. Environments
live under each test repository's .rootcause/envs/; repeats are fast because uv's own cache is warm.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.engines.bisect_commits import BisectCommitsInput, bisect_commits
from rootcause.tools.engines.bisect_env import BisectEnvInput, bisect_env
from rootcause.tools.engines.bisect_versions import BisectVersionsInput, bisect_versions
from rootcause.tools.run.interpreters import uv_binary

from tests.conftest import FIXTURES, error_text, git, memory_client, structured

pytestmark = pytest.mark.anyio
BISECT = FIXTURES / "bisect"


def uv_lock(root: Path) -> None:
    subprocess.run([uv_binary(), "lock", "--quiet", "--python", sys.executable], cwd=root, check=True,
                   env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"}, capture_output=True, timeout=300)


def make_click_repo(root: Path, *extra: str, commit_lock: bool = True, pin: str = "8.1.8") -> Path:
    """A uv project pinning click, its lock generated here, committed in a git repository."""
    root.mkdir(parents=True)
    for source in [BISECT / "clickproj", *(BISECT / e for e in extra)]:
        shutil.copytree(source, root, dirs_exist_ok=True)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("click==8.1.8", f"click=={pin}"))
    uv_lock(root)
    git(root, "init", "-q", "-b", "main")
    if not commit_lock:
        (root / ".gitignore").write_text("uv.lock\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "click project")
    return root


def snapshot(root: Path) -> dict[str, str]:
    """Every file of the user's tree outside .git and .rootcause, by content hash."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in (".git", ".rootcause") or not path.is_file():
            continue
        out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def make_history(root: Path, commits: int = 12, bug_at: int = 8, skip_at: int | None = 6) -> list[str]:
    """A repository whose add() breaks at commit `bug_at` (1-based); commit `skip_at` cannot be tested."""
    if not (root / ".git").exists():
        root.mkdir(parents=True)
        git(root, "init", "-q", "-b", "main")
    shutil.copy(BISECT / "history" / "check.py", root / "check.py")
    shas = []
    for i in range(1, commits + 1):
        body = "    return a + b + 1\n" if i >= bug_at else "    return a + b\n"
        (root / "calc.py").write_text(f"# revision {i}\ndef add(a, b):\n{body}")
        (root / "notes.txt").write_text(f"note {i}\n")
        skip = root / "SKIP"
        if i == skip_at:
            skip.write_text("untestable\n")
        elif skip.exists():
            skip.unlink()
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"change {i}" + (" (introduces the bug)" if i == bug_at else ""))
        shas.append(git(root, "rev-parse", "HEAD"))
    return shas


@pytest.fixture(scope="module")
def click_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_click_repo(tmp_path_factory.mktemp("click") / "project")


async def test_bisect_env_flips_outcome_and_is_warm_the_second_time(click_repo: Path) -> None:
    messages: list[str] = []

    async def progress(done: float, total: float | None, message: str) -> None:
        messages.append(message)

    ctx = ToolContext.for_root(click_repo, progress)
    before = snapshot(click_repo)
    inp = BisectEnvInput(package="click", version="8.2.0", command="python repro.py")
    result = await bisect_env(inp, ctx)
    assert result.verdict == "version_flips_outcome", result.summary()
    assert (result.env_a.package_version, result.env_a.outcome) == ("8.1.8", "pass")
    assert (result.env_b.package_version, result.env_b.outcome) == ("8.2.0", "fail")
    assert "mix_stderr" in (result.env_b.error or "") and "TypeError" in (result.env_b.signature or "")
    assert result.env_b.group and result.env_b.signature.startswith(result.env_b.group)  # v3: both identities
    assert [(d.package, d.a, d.b, d.kind) for d in result.freeze_diff] == [("click", "8.1.8", "8.2.0", "target")]
    assert result.env_a.check == result.env_b.check == "ok"
    assert result.env_a.path.startswith(".rootcause/envs/") and (click_repo / result.env_b.path / "bin").is_dir()
    assert any("concurrently" in m for m in messages) and any("verdict" in m for m in messages)
    again = await bisect_env(inp, ctx)
    assert again.verdict == "version_flips_outcome" and again.env_a.cached and again.env_b.cached
    assert snapshot(click_repo) == before  # no uv.lock rewrite, no .venv: nothing outside .rootcause/


async def test_bisect_env_same_version_is_no_difference_and_keep_false_cleans(click_repo: Path) -> None:
    ctx = ToolContext.for_root(click_repo)
    result = await bisect_env(BisectEnvInput(package="click", version="8.1.7", command="python repro.py",
                                             keep=False), ctx)
    assert result.verdict == "no_difference", result.summary()
    assert result.env_b.package_version == "8.1.7"
    assert not (click_repo / result.env_a.path).exists() and not (click_repo / result.env_b.path).exists()


async def test_bisect_versions_finds_click_8_2_0(click_repo: Path) -> None:
    ctx = ToolContext.for_root(click_repo)
    result = await bisect_versions(BisectVersionsInput(package="click", good="8.1.0", bad="8.3.0",
                                                       command="python repro.py"), ctx)
    assert result.status == "found", result.summary()
    assert (result.last_good, result.first_bad) == ("8.1.8", "8.2.0")
    assert "8.2.2" not in result.candidates and any(x.startswith("8.2.2 (yanked") for x in result.left_out)
    assert result.candidates[0] == "8.1.0" and result.candidates[-1] == "8.3.0"
    # Every environment is counted, endpoints included: about log2(range) + 2.
    assert result.builds == len(result.tested) and 4 <= result.builds <= 2 + 4
    assert {t.version: t.outcome for t in result.tested}["8.2.0"] == "fail"


async def test_bisect_versions_reports_a_good_that_is_not_good(click_repo: Path) -> None:
    ctx = ToolContext.for_root(click_repo)
    result = await bisect_versions(BisectVersionsInput(package="click", good="8.2.0", bad="8.3.0",
                                                       command="python repro.py"), ctx)
    assert result.status == "good_not_good" and result.first_bad is None
    assert "not good" in result.detail and "mix_stderr" in result.detail
    assert [t.version for t in result.tested] == ["8.2.0", "8.3.0"]


async def test_bisect_env_worktrees_with_makefile_patchgen(tmp_path: Path) -> None:
    """A Makefile patchgen target turns worktrees on: each gets its own generated output from its own env."""
    root = make_click_repo(tmp_path / "gen", "codegen", commit_lock=False)
    before = snapshot(root)
    head = git(root, "rev-parse", "HEAD")
    result = await bisect_env(BisectEnvInput(package="click", version="8.2.0", shell=True,
                                             command="cat generated/click_version.py && python repro.py"),
                              ToolContext.for_root(root))
    assert result.worktrees and result.verdict == "version_flips_outcome", result.summary()
    generated = {side: "CLICK = '8.1.8'" in (root / getattr(result, side).log_path).read_text()
                 for side in ("env_a", "env_b")}
    assert generated == {"env_a": True, "env_b": False}
    assert "CLICK = '8.2.0'" in (root / result.env_b.log_path).read_text()
    # The worktrees are gone (the environments stay cached): git knows only the user's own.
    assert not (root / result.env_a.worktree).exists() and not (root / result.env_b.worktree).exists()
    assert git(root, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not (root / "generated").exists() and snapshot(root) == before
    assert git(root, "rev-parse", "HEAD") == head and git(root, "status", "--porcelain") == ""


async def test_bisect_env_base_current_replicates_an_interpreter(tmp_path: Path, no_leftover_processes: None) -> None:
    """A project without uv: A copies the packages of the given interpreter, B moves click only."""
    root = tmp_path / "plain"
    root.mkdir()
    shutil.copy(BISECT / "clickproj" / "repro.py", root / "repro.py")
    venv = tmp_path / "their-venv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([uv_binary(), "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env)
    subprocess.run([uv_binary(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "click==8.1.7",
                    "colorama==0.4.6"], check=True, env=env)
    result = await bisect_env(BisectEnvInput(package="click", version="8.2.0", command="python repro.py",
                                             base="current", python=str(venv / "bin" / "python"), keep=False),
                              ToolContext.for_root(root))
    assert result.verdict == "version_flips_outcome", result.summary()
    assert result.env_a.package_version == "8.1.7" and result.env_b.package_version == "8.2.0"
    assert [d.package for d in result.freeze_diff] == ["click"]  # colorama stayed at 0.4.6 in both
    assert sorted(p.name for p in root.iterdir()) == [".rootcause", "repro.py"]


@pytest.mark.slow
async def test_bisect_env_conflict_names_the_resolvers_reason(tmp_path: Path) -> None:
    """rich 14 needs pygments>=2.13; with A's pygments 2.12.0 pinned, B cannot exist."""
    root = tmp_path / "rich"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "richproj"\nversion = "0"\nrequires-python = ">=3.11"\n'
                                         'dependencies = ["rich==13.0.0", "pygments==2.12.0"]\n')
    uv_lock(root)
    result = await bisect_env(BisectEnvInput(package="rich", version="14.0.0", command="python -c pass",
                                             keep=False), ToolContext.for_root(root))
    assert result.verdict == "conflict", result.summary()
    assert "pygments" in result.detail and result.failed_log and (root / result.failed_log).is_file()


async def test_bisect_env_registry_error_is_setup_failed(click_repo: Path) -> None:
    ctx = ToolContext.for_root(click_repo)
    result = await bisect_env(BisectEnvInput(package="click", version="99.0.0", command="python repro.py",
                                             keep=False), ctx)
    assert result.verdict == "setup_failed", result.summary()
    assert "99.0.0" in result.detail and (click_repo / result.failed_log).is_file()


async def test_unreachable_index_is_setup_failed_with_the_clients_message(click_repo: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    ctx = ToolContext.for_root(click_repo)
    result = await bisect_env(BisectEnvInput(package="click", version="8.1.6", command="python repro.py",
                                             keep=False), ctx)
    assert result.verdict == "setup_failed", result.summary()
    assert "127.0.0.1:9" in result.detail and result.failed_step.startswith("uv pip install click==8.1.6")
    listed = await bisect_versions(BisectVersionsInput(package="click", good="8.1.0", bad="8.3.0",
                                                       command="python repro.py"), ctx)
    assert listed.status == "setup_failed" and "could not list the releases of click" in listed.detail
    assert listed.builds == 0


async def test_bisect_commits_leaves_the_users_tree_alone(tmp_path: Path) -> None:
    root = tmp_path / "history"
    shas = make_history(root)
    # The user is mid-edit: a fixed calc.py (unstaged), a staged note, an untracked file.
    (root / "calc.py").write_text("def add(a, b):\n    return a + b  # my uncommitted fix\n")
    (root / "notes.txt").write_text("staged edit\n")
    git(root, "add", "notes.txt")
    (root / "scratch.txt").write_text("untracked\n")
    before = (snapshot(root), git(root, "status", "--porcelain"), git(root, "diff", "--cached"),
              git(root, "symbolic-ref", "HEAD"), git(root, "rev-parse", "HEAD"))
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python check.py"),
                                  ToolContext.for_root(root))
    assert result.status == "found", result.summary()
    first = result.first_bad_commit
    assert first.sha == shas[7] and first.subject == "change 8 (introduces the bug)"
    assert first.author_date and "calc.py" in first.diff_stat
    assert result.last_good == shas[6]
    skipped = [t for t in result.tested if t.outcome == "skip"]
    assert [t.sha for t in skipped] == [shas[5]]  # commit 6 exits 125: skipped, never counted bad
    assert len(result.tested) <= 2 + 5
    bad = [t for t in result.tested if t.outcome == "fail"]
    assert bad and all(t.group and t.signature.startswith(t.group) for t in bad)  # v3: both identities
    assert result.interpreter_note.startswith("rootcause's own interpreter")  # no .venv in this project: said
    after = (snapshot(root), git(root, "status", "--porcelain"), git(root, "diff", "--cached"),
             git(root, "symbolic-ref", "HEAD"), git(root, "rev-parse", "HEAD"))
    assert after == before


async def test_bisect_commits_bad_that_is_not_bad(tmp_path: Path) -> None:
    root = tmp_path / "history"
    shas = make_history(root, commits=4, bug_at=99, skip_at=None)
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad=shas[-1], command="python check.py",
                                                     keep=False), ToolContext.for_root(root))
    assert result.status == "bad_not_bad" and result.first_bad_commit is None
    assert "passes" in result.detail and not (root / ".rootcause" / "worktrees" / "bisect-commits").exists()


async def test_bad_input_is_a_tool_error(tmp_path: Path, click_repo: Path) -> None:
    root = tmp_path / "history"
    shas = make_history(root, commits=3, bug_at=3, skip_at=None)
    async with memory_client(click_repo) as client:
        base = {"command": "python repro.py"}
        text = error_text(await client.call_tool("bisect_env", {**base, "package": "-e", "version": "8.2.0"}))
        assert "not a distribution name" in text
        text = error_text(await client.call_tool("bisect_env", {**base, "package": "click", "version": "abc"}))
        assert "not a PEP 440 version" in text
        text = error_text(await client.call_tool("bisect_versions", {**base, "package": "click", "good": "8.1.0",
                                                                     "bad": "--upgrade"}))
        assert "starts with '-'" in text
        text = error_text(await client.call_tool("bisect_env", {**base, "package": "click", "version": "8.2.0",
                                                                "session_id": "20200101-000000-abcdef"}))
        assert "unknown session" in text
    async with memory_client(root) as client:
        text = error_text(await client.call_tool("bisect_commits", {"good": "--upload-pack=x", "bad": "HEAD",
                                                                    "command": "python check.py"}))
        assert "not a valid ref" in text
        text = error_text(await client.call_tool("bisect_commits", {"good": shas[2], "bad": shas[0],
                                                                    "command": "python check.py"}))
        assert "not an ancestor" in text
        text = error_text(await client.call_tool("bisect_env", {"package": "click", "version": "8.2.0",
                                                                "command": "python check.py"}))
        assert "no pyproject.toml" in text


async def test_session_records_phase_2(click_repo: Path) -> None:
    async with memory_client(click_repo) as client:
        session = structured(await client.call_tool("start_session", {"symptom": "TypeError: mix_stderr"}))
        data = structured(await client.call_tool("bisect_env", {
            "package": "click", "version": "8.2.0", "command": "python repro.py",
            "session_id": session["session_id"]}))
        assert data["verdict"] == "version_flips_outcome"
        report = (await client.read_resource(f"rootcause://sessions/{session['session_id']}")).contents[0].text
    assert "bisect_env" in report and "Phase 2: Pattern analysis — in_progress" in report


def make_entrypoints_repo(root: Path) -> Path:
    """A packaged uv project with a console script that reads entry_points()['console_scripts'] (fixture)."""
    shutil.copytree(BISECT / "entrypoints", root)
    uv_lock(root)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".rootcause/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "entry points project")
    return root


@pytest.fixture(scope="module")
def ep_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_entrypoints_repo(tmp_path_factory.mktemp("ep") / "project")


async def test_bisect_env_installs_the_project_so_its_console_script_exists(ep_repo: Path) -> None:
    """importlib-metadata 5.0 removed entry_points()'s dict interface: B fails, A passes, both hold the project."""
    before = snapshot(ep_repo)
    result = await bisect_env(BisectEnvInput(package="importlib-metadata", version="5.0.0", command="epproj-scripts",
                                             expect="KeyError: 'console_scripts'", timeout_s=120),
                              ToolContext.for_root(ep_repo))
    assert result.verdict == "version_flips_outcome", result.summary()
    assert result.env_a.project == result.env_b.project == "epproj 0.1.0 (editable)"
    assert (result.env_a.package_version, result.env_b.package_version) == ("4.13.0", "5.0.0")
    assert result.env_a.outcome == "pass" and result.env_b.outcome == "fail" and result.env_b.matches_expected
    assert "KeyError" in result.env_b.error and "console_scripts" in result.env_b.error
    log_a = (ep_repo / result.env_a.log_path).read_text()
    assert "console scripts: epproj-scripts" in log_a  # the project's own entry point, read from its metadata
    assert (ep_repo / result.env_a.path / "bin" / "epproj-scripts").is_file()
    assert result.reason is None and "project epproj 0.1.0 (editable)" in result.summary()
    assert snapshot(ep_repo) == before


async def test_bisect_env_expect_turns_another_failure_into_inconclusive(ep_repo: Path) -> None:
    result = await bisect_env(BisectEnvInput(package="importlib-metadata", version="5.0.0", command="epproj-scripts",
                                             expect="AttributeError"), ToolContext.for_root(ep_repo))
    assert result.verdict == "inconclusive", result.summary()
    assert result.env_b.matches_expected is False and result.env_b.outcome == "fail"
    assert result.reason.startswith("B: fails, but not with the expected failure (expect /AttributeError/)")
    assert "not the cause" not in result.detail


async def test_bisect_env_project_that_cannot_import_is_inconclusive(tmp_path: Path) -> None:
    """The project's code imports a module no environment has: both sides fail alike, and that is not the package."""
    root = make_entrypoints_repo(tmp_path / "broken")
    cli = root / "src" / "epproj" / "cli.py"
    cli.write_text("import epproj_helpers_not_installed  # noqa\n" + cli.read_text())
    result = await bisect_env(BisectEnvInput(package="importlib-metadata", version="5.0.0", command="epproj-scripts",
                                             keep=False), ToolContext.for_root(root))
    assert result.verdict == "inconclusive", result.summary()
    assert "a module is missing" in result.reason and "epproj_helpers_not_installed" in result.reason
    assert result.env_a.signature == result.env_b.signature and "not the cause" not in result.detail
    # The same run through bisect_versions: the good endpoint fails before the package matters.
    versions = await bisect_versions(BisectVersionsInput(package="importlib-metadata", good="4.13.0", bad="5.0.0",
                                                         command="epproj-scripts", keep=False),
                                     ToolContext.for_root(root))
    assert versions.status == "inconclusive" and "a module is missing" in versions.reason, versions.summary()


async def test_bisect_env_command_missing_on_both_sides_is_inconclusive(ep_repo: Path) -> None:
    result = await bisect_env(BisectEnvInput(package="importlib-metadata", version="5.0.0",
                                             command="epproj-no-such-script"), ToolContext.for_root(ep_repo))
    assert result.verdict == "inconclusive", result.summary()
    assert result.reason.startswith("both sides: the command was not found in the environment")
    assert result.env_a.outcome == result.env_b.outcome == "not_run"


async def test_bisect_versions_finds_importlib_metadata_5_with_the_project_installed(ep_repo: Path) -> None:
    result = await bisect_versions(BisectVersionsInput(package="importlib-metadata", good="4.12.0", bad="5.0.0",
                                                       command="epproj-scripts", expect="console_scripts"),
                                   ToolContext.for_root(ep_repo))
    assert result.status == "found", result.summary()
    assert (result.last_good, result.first_bad) == ("4.13.0", "5.0.0")
    assert result.project == "epproj 0.1.0 (editable)"


def commit_series(root: Path, bodies: list[str], file: str = "calc.py", exist_ok: bool = False) -> list[str]:
    """One commit per body of `file` (calc.py), with the history fixture's check.py as calc.py's reproducer."""
    root.mkdir(parents=True, exist_ok=exist_ok)
    git(root, "init", "-q", "-b", "main")
    shutil.copy(BISECT / "history" / "check.py", root / "check.py")
    shas = []
    for i, body in enumerate(bodies, 1):
        (root / file).write_text(f"# revision {i}\n{body}")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"change {i}")
        shas.append(git(root, "rev-parse", "HEAD"))
    return shas


GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a + b + 1\n"
HANGS = "import time\nprint('warming the cache', flush=True)\ntime.sleep(600)\n" + GOOD
OTHER = "raise RuntimeError('config file missing')\n"


async def test_bisect_commits_counts_a_hang_as_bad_with_idle_timeout(tmp_path: Path,
                                                                     no_leftover_processes: None) -> None:
    shas = commit_series(tmp_path / "hang", [GOOD] * 5 + [HANGS] * 3)
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python check.py",
                                                     idle_timeout_s=3, timeout_s=60, keep=False),
                                  ToolContext.for_root(tmp_path / "hang"))
    assert result.status == "found", result.summary()
    assert result.first_bad_commit.sha == shas[5] and result.last_good == shas[4]
    hung = [t for t in result.tested if t.outcome == "hang"]
    assert hung and all(t.outcome_reason.startswith("idle timeout after") for t in hung)


async def test_bisect_commits_expect_skips_another_failure(tmp_path: Path) -> None:
    shas = commit_series(tmp_path / "other", [GOOD] * 2 + [OTHER] * 3 + [GOOD] + [WRONG] * 3)
    ctx = ToolContext.for_root(tmp_path / "other")
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python check.py",
                                                     expect=r"add\(2, 2\) returned 5"), ctx)
    assert result.status == "found", result.summary()
    assert result.first_bad_commit.sha == shas[6]
    skipped = [t for t in result.tested if t.outcome == "skip"]
    assert skipped and all("not with the expected failure" in t.outcome_reason for t in skipped)
    assert {t.sha for t in skipped} <= set(shas[2:5])
    plain = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python check.py"), ctx)
    assert plain.first_bad_commit.sha == shas[2]  # without expect, any failure is bad


async def test_bisect_commits_goes_through_a_merge_into_its_branch(tmp_path: Path) -> None:
    """A bug on a side branch: the first-parent line finds the merge that brought it in, then the branch's commit."""
    root = tmp_path / "merge"
    shas = commit_series(root, [GOOD, GOOD])
    git(root, "checkout", "-q", "-b", "feature")
    (root / "calc.py").write_text("# feature\n" + WRONG)
    git(root, "commit", "-q", "-am", "feature: faster add")
    (root / "feature.txt").write_text("more\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "feature: docs")
    git(root, "checkout", "-q", "main")
    (root / "main.txt").write_text("main work\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main: unrelated")
    git(root, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    (root / "later.txt").write_text("later\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main: later")
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python check.py",
                                                     keep=False), ToolContext.for_root(root))
    assert result.status == "found", result.summary()
    assert result.candidates == 5  # good, change 2, main: unrelated, the merge, main: later
    merge = git(root, "rev-parse", "--short=10", "HEAD~1")
    assert result.first_bad_commit.subject == "feature: faster add" and result.via_merges == [merge]
    assert result.last_good == shas[1]  # the merge base: the branch starts there
    assert f"then 2 on the branch merged by {merge}" in result.detail


async def test_bisect_commits_a_merge_that_breaks_what_each_side_keeps_working(tmp_path: Path) -> None:
    """Each side passes on its own; only their combination fails: the merge itself is the first bad commit."""
    root = tmp_path / "combo"
    shas = commit_series(root, [GOOD])
    git(root, "checkout", "-q", "-b", "feature")
    (root / "extra.py").write_text("OFFSET = 1  # only read when calc.py asks for it\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "feature: an offset setting")
    git(root, "checkout", "-q", "main")
    (root / "calc.py").write_text("try:\n    from extra import OFFSET\nexcept ImportError:\n    OFFSET = 0\n\n\n"
                                  "def add(a, b):\n    return a + b + OFFSET\n")
    git(root, "commit", "-q", "-am", "main: honour an offset setting")
    git(root, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python check.py",
                                                     keep=False), ToolContext.for_root(root))
    assert result.status == "found", result.summary()
    assert result.first_bad_commit.subject == "merge feature" and result.via_merges == []
    assert "merged branch passes on its own" in result.detail


@pytest.mark.parametrize("locked", [True, False], ids=["uv.lock", "no-lock"])
async def test_bisect_env_relative_path_source(tmp_path: Path, locked: bool) -> None:
    """[tool.uv.sources] libdep = { path = "../libdep" }: the environments resolve it from the project (a copied
    pyproject.toml used to look for ../libdep under .rootcause/envs/)."""
    shutil.copytree(BISECT / "pathdep", tmp_path / "ws")
    root = tmp_path / "ws" / "app"
    if locked:
        uv_lock(root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "app with a sibling library")
    before = snapshot(root)
    result = await bisect_env(BisectEnvInput(package="click", version="8.2.0", command="python repro.py",
                                             keep=False), ToolContext.for_root(root))
    assert result.verdict == "version_flips_outcome", result.summary()
    assert "hello from libdep" in (root / result.env_a.log_path).read_text()
    assert "mix_stderr" in result.env_b.error
    assert snapshot(root) == before  # no uv.lock written into the user's tree


async def test_bisect_env_base_current_installs_the_project_too(tmp_path: Path) -> None:
    """A project not managed by uv (no uv.lock), its packages in the user's own venv: A and B hold the project."""
    root = tmp_path / "plain-ep"
    shutil.copytree(BISECT / "entrypoints", root)
    venv = tmp_path / "their-venv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([uv_binary(), "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env)
    subprocess.run([uv_binary(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                    "importlib-metadata==4.13.0"], check=True, env=env)
    result = await bisect_env(BisectEnvInput(package="importlib-metadata", version="5.0.0", command="epproj-scripts",
                                             base="current", python=str(venv / "bin" / "python"), keep=False),
                              ToolContext.for_root(root))
    assert result.verdict == "version_flips_outcome", result.summary()
    assert result.env_a.project == result.env_b.project == "epproj 0.1.0 (editable)"
    assert sorted(p.name for p in root.iterdir()) == [".rootcause", "pyproject.toml", "src"]


async def test_bisect_commits_hung_git_checkout_is_a_usage_error(tmp_path: Path) -> None:
    """A smudge filter that never returns (a stuck LFS): the worktree checkout stops at setup_timeout_s."""
    root = tmp_path / "stuck"
    shas = commit_series(root, [GOOD, WRONG])
    (root / ".gitattributes").write_text("*.dat filter=stuck\n")
    (root / "blob.dat").write_text("data\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "data")
    git(root, "config", "filter.stuck.smudge", "sleep 300")
    async with memory_client(root) as client:
        text = error_text(await client.call_tool("bisect_commits", {
            "good": shas[0], "bad": "HEAD", "command": "python check.py", "setup_timeout_s": 3}))
    assert "`git checkout --detach --force" in text and "did not finish within 3s" in text


TRAINS = "for step in range(1, 6):\n    print(f'step {step} loss {1.0 / step:.4f}')\n"
DIVERGES = ("for step in range(1, 6):\n    loss = float('nan') if step >= 3 else 1.0 / step\n"
            "    print(f'step {step} loss {loss:.4f}')\n")


async def test_bisect_commits_counts_a_nan_run_that_exits_0_as_bad(tmp_path: Path) -> None:
    """The same observation as reproduce: exit 0 with a NaN loss is a failure (the trainer never raised)."""
    shas = commit_series(tmp_path / "nan", [TRAINS] * 4 + [DIVERGES] * 3, file="train.py")
    result = await bisect_commits(BisectCommitsInput(good=shas[0], bad="HEAD", command="python train.py",
                                                     keep=False), ToolContext.for_root(tmp_path / "nan"))
    assert result.status == "found", result.summary()
    assert result.first_bad_commit.sha == shas[4]
    bad = [t for t in result.tested if t.outcome == "fail"]
    assert bad and all(t.outcome_reason == "exit 0, but loss is NaN from step 3" for t in bad)


async def test_the_sessions_symptom_is_the_yardstick_without_expect(ep_repo: Path) -> None:
    async with memory_client(ep_repo) as client:
        same = structured(await client.call_tool("start_session", {
            "symptom": "epproj-scripts crashes with KeyError: 'console_scripts' after the lock refresh"}))
        other = structured(await client.call_tool("start_session", {
            "symptom": "epproj-scripts raises AttributeError: 'EntryPoints' object has no attribute 'get'"}))
        base = {"package": "importlib-metadata", "version": "5.0.0", "command": "epproj-scripts"}
        matched = structured(await client.call_tool("bisect_env", {**base, "session_id": same["session_id"]}))
        assert matched["verdict"] == "version_flips_outcome" and matched["env_b"]["matches_expected"] is True
        differs = structured(await client.call_tool("bisect_env", {**base, "session_id": other["session_id"]}))
    assert differs["verdict"] == "inconclusive" and differs["env_b"]["matches_expected"] is False
    assert "not with the expected failure (the session's symptom" in differs["reason"]
