"""The three bisect tools through the real `rootcause serve` subprocess and the official MCP stdio client."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import error_text, git, stdio_client, structured
from tests.test_bisect import make_click_repo, make_history, snapshot

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_bisect_tools_over_stdio(tmp_path: Path) -> None:
    root = make_click_repo(tmp_path / "project")
    shas = make_history(root, commits=8, bug_at=5, skip_at=None)
    (root / "scratch.txt").write_text("an untracked edit of the user\n")
    before = (snapshot(root), git(root, "status", "--porcelain"), git(root, "rev-parse", "HEAD"))
    async with stdio_client(root) as client:
        env = structured(await client.call_tool("bisect_env", {
            "package": "click", "version": "8.2.0", "command": "python repro.py", "timeout_s": 120}))
        assert env["verdict"] == "version_flips_outcome"
        assert env["env_a"]["outcome"] == "pass" and env["env_b"]["outcome"] == "fail"
        assert env["freeze_diff"] == [{"package": "click", "a": "8.1.8", "b": "8.2.0", "kind": "target"}]

        versions = structured(await client.call_tool("bisect_versions", {
            "package": "click", "good": "8.1.0", "bad": "8.3.0", "command": ["python", "repro.py"]}))
        assert (versions["status"], versions["first_bad"], versions["last_good"]) == ("found", "8.2.0", "8.1.8")
        assert versions["builds"] == len(versions["tested"]) <= 6

        commits = structured(await client.call_tool("bisect_commits", {
            "good": shas[0], "bad": "HEAD", "command": "python check.py"}))
        assert commits["status"] == "found" and commits["first_bad_commit"]["sha"] == shas[4]
        assert "calc.py" in commits["first_bad_commit"]["diff_stat"]

        text = error_text(await client.call_tool("bisect_commits", {
            "good": "--upload-pack=x", "bad": "HEAD", "command": "python check.py"}))
        assert "not a valid ref" in text
    assert (snapshot(root), git(root, "status", "--porcelain"), git(root, "rev-parse", "HEAD")) == before
