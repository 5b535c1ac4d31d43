"""Metric yardsticks through the real `rootcause serve` and the official MCP stdio client, on real projects.

- a linear probe whose backbone layer rename leaves its weights at init (val_acc ~0.93 -> ~0.68, exit 0):
  reproduce with metric="val_acc < 0.85" reproduces it, bisect_commits names the rename;
- a DDP job on 2 gloo ranks whose DCP resume drops the optimizer state (exit 0, the loss leaves the
  uninterrupted run's ref.log): reproduce and bisect_commits with reference={log, metric, rtol};
- a run whose output lacks the metric is inconclusive on every tool that runs a command, never a pass;
- malformed yardsticks are argument errors in our words, before anything runs.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import error_text, git, stdio_client, structured
from tests.projects.dcp_resume import RESUME_AT, make_dcp_repo
from tests.projects.probe import make_probe_repo
from tests.test_bisect import make_click_repo

pytestmark = pytest.mark.anyio
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not importable: .venv/bin/pip install torch==2.13.0")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
needs_torchrun = pytest.mark.skipif(not Path(TORCHRUN).exists() and shutil.which("torchrun") is None,
                                    reason="no torchrun next to the test interpreter")


@pytest.mark.slow
@needs_torch
async def test_probe_accuracy_regression_is_reproduced_and_bisected(tmp_path: Path) -> None:
    root, shas = make_probe_repo(tmp_path)
    metric = "val_acc < 0.85"
    async with stdio_client(root) as client:
        result = await client.call_tool("reproduce", {"command": "python train_probe.py", "runs": 1,
                                                      "metric": metric, "timeout_s": 300})
        data = structured(result)
        [run] = data["runs"]
        assert data["status"] == "reproduced" and data["expected"] == "metric val_acc < 0.85"
        assert (run["outcome"], run["exit_code"]) == ("fail", 0)
        read = run["yardstick"]
        assert read["holds"] is True and read["step"] == 80 and read["value"] < 0.75
        assert read["text"].startswith("epoch 8 step 80: ") and f"val_acc={read['value']:.4f}" in read["text"]
        assert run["outcome_reason"] == f"exit 0, but val_acc {read['value']:g} at step 80 (line {read['line']}) < 0.85"
        assert data["diagnosis"]["category"] == "metric_regression"
        text = result.content[0].text
        assert text.startswith("REPRODUCED — 1/1 runs failed with one signature (fail).")
        assert f"Diagnosis: [metric_regression] val_acc {read['value']:g} at step 80" in text

        found = structured(await client.call_tool("bisect_commits", {
            "good": shas[0], "bad": "HEAD", "command": "python train_probe.py", "metric": metric, "timeout_s": 300}))
        assert found["status"] == "found", found["detail"]
        assert found["first_bad_commit"]["sha"] == shas[2]
        assert found["first_bad_commit"]["subject"] == "backbone: rename encoder to proj"
        by_sha = {t["sha"]: t for t in found["tested"]}
        assert by_sha[shas[0]]["outcome"] == "pass" and by_sha[shas[0]]["yardstick"]["value"] > 0.9
        assert by_sha[shas[-1]]["outcome"] == "fail" and by_sha[shas[-1]]["yardstick"]["holds"] is True
    assert git(root, "status", "--porcelain") == ""


@pytest.mark.slow
@needs_torch
@needs_torchrun
async def test_dcp_resume_that_drops_the_optimizer_state_leaves_the_reference(tmp_path: Path) -> None:
    root, shas = make_dcp_repo(tmp_path, TORCHRUN if Path(TORCHRUN).exists() else shutil.which("torchrun"))
    reference = {"log": "ref.log", "metric": "loss", "rtol": 0.01}
    async with stdio_client(root) as client:
        git(root, "checkout", "-q", shas[0])
        good = structured(await client.call_tool("reproduce", {
            "command": "sh run.sh", "runs": 1, "reference": reference, "timeout_s": 300}))
        assert good["status"] == "not_reproduced", good["runs"][0]["outcome_reason"]
        assert "stays within rtol 0.01 of ref.log at all 8 steps" in good["runs"][0]["yardstick"]["reason"]
        git(root, "checkout", "-q", "main")
        bad = await client.call_tool("reproduce", {"command": "sh run.sh", "runs": 1, "reference": reference,
                                                   "timeout_s": 300})
        data = structured(bad)
        [run] = data["runs"]
        assert data["status"] == "reproduced" and (run["outcome"], run["exit_code"]) == ("fail", 0)
        read = run["yardstick"]
        # The loss printed at step K+1 precedes the first update after the resume: it departs at K+2.
        assert (read["kind"], read["holds"], read["step"]) == ("reference", True, RESUME_AT + 2)
        assert read["text"] == f"step {RESUME_AT + 2} loss {read['value']:.6f}"
        assert abs(read["value"] - read["reference_value"]) > 0.01 * read["reference_value"]
        assert run["outcome_reason"].startswith(f"exit 0, but loss {read['value']:g} at step {RESUME_AT + 2} (line")
        assert "leaves ref.log's" in run["outcome_reason"]
        assert data["diagnosis"]["category"] == "metric_regression"

        found = structured(await client.call_tool("bisect_commits", {
            "good": shas[0], "bad": "HEAD", "command": "sh run.sh", "reference": reference, "timeout_s": 300}))
        assert found["status"] == "found", found["detail"]
        assert found["first_bad_commit"]["sha"] == shas[-1]
        assert {t["sha"]: t["outcome"] for t in found["tested"]} == {shas[0]: "pass", shas[1]: "pass",
                                                                      shas[2]: "fail"}, found["tested"]


def _silent_repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """A click uv project (bisect_env / bisect_versions need one) whose script prints no metric, two commits."""
    root = make_click_repo(tmp_path / "silent")
    (root / "train.py").write_text("print('training finished')\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "train")
    (root / "train.py").write_text("print('training finished', flush=True)\n")
    git(root, "commit", "-q", "-am", "flush")
    return root, [git(root, "rev-parse", "HEAD~1"), git(root, "rev-parse", "HEAD")]


@pytest.mark.slow
async def test_a_run_lacking_the_metric_is_inconclusive_on_every_tool(tmp_path: Path) -> None:
    root, shas = _silent_repo(tmp_path)
    run = {"command": "python train.py", "metric": "val_acc < 0.85", "timeout_s": 120}
    lacking = "the output shows no val_acc (no metric lines)"
    async with stdio_client(root) as client:
        repro = structured(await client.call_tool("reproduce", {**run, "runs": 1}))
        assert repro["status"] == "inconclusive" and repro["runs"][0]["outcome"] == "inconclusive"
        assert repro["runs"][0]["problem"].startswith(lacking)

        commits = structured(await client.call_tool("bisect_commits", {**run, "good": shas[0], "bad": shas[1]}))
        assert commits["status"] == "inconclusive" and lacking in commits["reason"]
        env = structured(await client.call_tool("bisect_env", {**run, "package": "click", "version": "8.2.0"}))
        assert env["verdict"] == "inconclusive" and lacking in env["reason"]
        assert env["env_a"]["outcome"] == env["env_b"]["outcome"] == "skip"
        versions = structured(await client.call_tool("bisect_versions", {
            **run, "package": "click", "good": "8.1.8", "bad": "8.2.0", "versions": ["8.1.8", "8.2.0"]}))
        assert versions["status"] == "inconclusive" and lacking in versions["reason"]

        sid = structured(await client.call_tool("start_session", {
            "symptom": "val_acc dropped from 0.88 to 0.74 after the refactor, the run exits 0"}))["session_id"]
        hypothesis = structured(await client.call_tool("verify_hypothesis", {
            **run, "session_id": sid, "hypothesis": "the refactor leaves the backbone at its initial weights",
            "prediction": "the run shows val_acc below 0.85", "expect": "fail",
            "changed": "nothing: the current tree", "disproof": "val_acc stays at 0.88"}))
        assert hypothesis["result"] == "inconclusive" and lacking in hypothesis["reason"]
        fix = structured(await client.call_tool("record_fix_attempt", {
            **run, "session_id": sid, "description": "load the backbone with strict=True"}))
        assert not fix["fixed"] and not fix["judged"] and fix["consecutive_failures"] == 0
        assert fix["reason"].startswith(f"the verification cannot judge the fix: {lacking}")
        collateral = structured(await client.call_tool("check_collateral", run))
        assert collateral["verdict"] == "inconclusive" and "cannot be judged" in collateral["reason"]


async def test_malformed_yardsticks_are_argument_errors(repo: Path) -> None:
    (repo / "ref.log").write_text("step 1 loss 1.0\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "reference log")
    async with stdio_client(repo) as client:
        for args, says in [
            ({"metric": "val_acc 0.85"}, "metric 'val_acc 0.85' is not a condition"),
            ({"metric": "val_acc != 0.85"}, "unknown comparison '!='"),
            ({"reference": {"log": "missing.log", "metric": "loss"}}, "reference.log 'missing.log' is not a file"),
            ({"reference": {"log": "ref.log", "metric": "loss", "rtol": 0}}, "reference.rtol must be"),
            ({"reference": {"log": "ref.log", "metric": "val_acc"}}, "shows no val_acc values"),
        ]:
            for tool, extra in (("reproduce", {}), ("bisect_commits", {"good": "HEAD~1", "bad": "HEAD"})):
                text = error_text(await client.call_tool(tool, {"command": "python -c pass", **extra, **args}))
                assert says in text and "Hint:" in text, (tool, text)
        assert not (repo / ".rootcause" / "runs").exists() or not any((repo / ".rootcause" / "runs").iterdir())
