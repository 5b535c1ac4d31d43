"""base='current' over stdio: the project's venv reaches a package only through a .pth path file.

Before: bisect_versions was "inconclusive ... No module named 'extpkg'" at both endpoints (the copied environment
left the .pth out). Now both environments import it and the real click regression is found.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import error_text, stdio_client, structured
from tests.test_bisect_site import make_pth_project, site_packages

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_bisect_versions_and_env_base_current_import_what_a_pth_adds(tmp_path: Path) -> None:
    root, shared = make_pth_project(tmp_path, "click==8.1.8")
    async with stdio_client(root) as client:
        result = await client.call_tool("bisect_versions", {
            "package": "click", "good": "8.1.8", "bad": "8.2.0", "command": "python repro.py", "base": "current",
            "timeout_s": 120})
        versions = structured(result)
        assert (versions["status"], versions["first_bad"], versions["last_good"]) == ("found", "8.2.0", "8.1.8"), \
            result.content[0].text
        good = next(t for t in versions["tested"] if t["version"] == "8.1.8")
        assert good["outcome"] == "pass" and "extpkg shared-site" in (root / good["log_path"]).read_text()
        env_folder = root / good["env_path"]
        kept = site_packages(env_folder).joinpath("shared.pth").read_text()
        assert str(shared) in kept and "not-there" not in kept

        env = structured(await client.call_tool("bisect_env", {
            "package": "click", "version": "8.2.0", "command": "python repro.py", "base": "current",
            "timeout_s": 120}))
        assert env["verdict"] == "version_flips_outcome", env["detail"]
        assert "mix_stderr" in env["env_b"]["error"]


async def test_an_unowned_import_line_is_refused_over_stdio(tmp_path: Path) -> None:
    root, _ = make_pth_project(tmp_path)
    site = site_packages(root / ".venv")
    (site / "_team_hook.py").write_text("import os\n")
    (site / "team.pth").write_text(f"{tmp_path}\nimport _team_hook; _team_hook\n")
    async with stdio_client(root) as client:
        text = error_text(await client.call_tool("bisect_versions", {
            "package": "click", "good": "8.1.8", "bad": "8.2.0", "command": "python repro.py", "base": "current"}))
    assert f"{site / 'team.pth'}:2: import _team_hook" in text, text
    assert "replace each import line by a line naming the folder it adds" in text
    assert not [p for p in (root / ".rootcause" / "envs").iterdir() if p.is_dir()]
