"""Verdicts that follow the evidence, through the real `rootcause serve` over stdio on real runs.

A trainer that prints NaN losses and exits 0, a real uv TLS failure in a session about a numpy
AttributeError, a pytest assertion whose floats change between runs, check_collateral with the
project's .venv, and record_fix_attempt on a run that imported the project from another checkout.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import git, stdio_client, structured
from tests.e2e.test_reproduce import _commit

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not importable: .venv/bin/pip install torch==2.13.0")

NAN_TRAINER = '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
x = torch.randn(256, 16)
y = x @ torch.randn(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
BASE_LR, WARMUP = 1.0, 5  # the bug: the warm-up is never capped, so lr keeps rising
for step in range(1, 31):
    lr = BASE_LR * step / WARMUP
    for group in opt.param_groups:
        group["lr"] = lr
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    opt.step()
    print(f"step {step} loss {loss.item():.4f} grad_norm {grad_norm.item():.4f} lr {lr:.4f}", flush=True)
print("training finished")
'''

MASKED_MSE = '''\
import random


def masked_mse(values, mask):
    kept = [v for v, m in zip(values, mask) if m]
    return sum(kept) / len(kept)
'''
MASKED_TEST = '''\
import random
import struct

from masked import masked_mse


def test_masked_mse():
    # The bug: the mask is drawn at random, so the mean changes from run to run.
    mask = [random.random() < 0.6 for _ in range(6)]
    mask[0] = True
    value = masked_mse([1.0, 2.0, 2.0, 1.0, 2.0, 3.0], mask)
    value = struct.unpack("f", struct.pack("f", value))[0]
    assert value == 2.5
'''


def _venv(where: Path, *paths: str) -> Path:
    """A real venv (no pip) that sees the test environment's packages and `paths` through a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next((where / "lib").glob("python*/site-packages"))
    (site / "rc_test.pth").write_text("\n".join([*paths, sysconfig.get_paths()["purelib"]]) + "\n")
    return where / "bin" / "python"


@needs_torch
async def test_nan_training_that_exits_0_is_reproduced(repo: Path) -> None:
    _commit(repo, {"train.py": NAN_TRAINER}, "trainer")
    async with stdio_client(repo) as client:
        sid = structured(await client.call_tool(
            "start_session", {"symptom": "training loss becomes NaN after warm-up"}))["session_id"]
        result = await client.call_tool("reproduce", {"command": "python train.py", "runs": 1, "session_id": sid,
                                                      "python": sys.executable})
    data = structured(result)
    run = data["runs"][0]
    assert run["exit_code"] == 0 and run["outcome"] == "fail"
    assert run["outcome_reason"] == "exit 0, but loss is inf from step 27"
    assert data["status"] == "reproduced" and data["matches_symptom"] is True
    assert data["diagnosis"]["category"] == "nonfinite"
    assert result.content[0].text.startswith("REPRODUCED — 1/1 runs failed with one signature")
    assert "exit 0, but loss is inf from step 27" in result.content[0].text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_uv_tls_failure_in_a_numpy_session_is_a_different_failure(repo: Path) -> None:
    from rootcause.tools.run.interpreters import uv_binary

    port = _free_port()
    # A plain-HTTP server on an https:// index URL: uv's TLS handshake fails for real (exit 2).
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        subprocess.run([uv_binary(), "venv", "-q", str(repo / ".venv")], check=True, capture_output=True)
        command = [uv_binary(), "pip", "install", "--index-url", f"https://127.0.0.1:{port}/simple", "numpy"]
        async with stdio_client(repo) as client:
            sid = structured(await client.call_tool("start_session", {
                "symptom": "AttributeError: module 'numpy' has no attribute 'float'"}))["session_id"]
            result = await client.call_tool("reproduce", {"command": command, "runs": 1, "session_id": sid,
                                                          "env": {"UV_HTTP_RETRIES": "0"}})
    finally:
        server.kill()
        server.wait()
    data = structured(result)
    assert data["runs"][0]["exit_code"] == 2
    assert data["status"] == "different_failure" and data["matches_symptom"] is False
    first = result.content[0].text.splitlines()[0]
    assert first.startswith("DIFFERENT FAILURE — 1/1 runs failed, but not with the expected failure")
    assert "AttributeError" in first and "got [" in first
    assert "[python_exception] \n" not in result.content[0].text + "\n"
    assert not first.rstrip().endswith("]")


async def test_pytest_floats_that_change_between_runs_are_one_signature(repo: Path) -> None:
    _commit(repo, {"masked.py": MASKED_MSE, "tests/test_masked.py": MASKED_TEST,
                   "tests/conftest.py": "import sys\nsys.path.insert(0, '.')\n"}, "masked mse")
    seen: set[str] = set()
    async with stdio_client(repo) as client:
        for _ in range(4):  # until two runs show different floats
            data = structured(await client.call_tool("reproduce", {
                "command": "python -m pytest -q -p no:cacheprovider -p no:randomly tests", "runs": 2,
                "python": sys.executable}))
            log_values = {(repo / r["log_path"]).read_text().split("assert ")[-1].split(" ==")[0]
                          for r in data["runs"]}
            seen |= log_values
            if len(log_values) > 1:
                break
    assert len(seen) > 1, seen
    assert data["status"] == "reproduced" and data["consistent"] is True
    assert len({r["signature"] for r in data["runs"]}) == 1


async def test_check_collateral_uses_the_project_venv(repo: Path, tmp_path: Path) -> None:
    libs = tmp_path / "venv-only"
    libs.mkdir()
    (libs / "venv_only_dep.py").write_text("SCALE = 2\n")
    _commit(repo, {"calc.py": "from venv_only_dep import SCALE\n\n\ndef double(x):\n    return x * SCALE\n",
                   "tests/test_calc.py": "from calc import double\n\n\ndef test_double():\n"
                                         "    assert double(2) == 4\n"}, "calc")
    _venv(repo / ".venv", str(libs))  # the dependency exists only in the project's .venv
    (repo / ".gitignore").write_text(".venv/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore venv")
    (repo / "calc.py").write_text("from venv_only_dep import SCALE\n\n\ndef double(x):\n    return SCALE * x\n")
    async with stdio_client(repo) as client:
        result = await client.call_tool("check_collateral", {"command": "python -m pytest -q tests"})
    data = structured(result)
    assert data["verdict"] == "clean", result.content[0].text
    assert data["base_run"]["run"]["interpreter"] == str(repo / ".venv" / "bin" / "python")
    assert "the project's .venv" in data["interpreter"]


async def test_fix_attempt_importing_another_checkout_is_not_judged(repo: Path, tmp_path: Path) -> None:
    fixed_core = "def ratio(a, b):\n    return a / b if b else 0.0\n"
    _commit(repo, {"mypkg/__init__.py": "", "mypkg/core.py": "def ratio(a, b):\n    return a / b\n",
                   "tests/test_core.py": "from mypkg.core import ratio\n\n\ndef test_zero():\n"
                                         "    assert ratio(1, 0) == 0.0\n"}, "ratio")
    other = tmp_path / "old-checkout"
    (other / "mypkg").mkdir(parents=True)
    (other / "mypkg" / "__init__.py").write_text("")
    (other / "mypkg" / "core.py").write_text("def ratio(a, b):\n    return a / b\n")
    other_python = _venv(other / ".venv", str(other))  # the old checkout, installed in its own venv
    _venv(repo / ".venv")
    # A console script copied from the other venv: its shebang still points there.
    (repo / ".venv" / "bin" / "rc-pytest").write_text(
        f"#!{other_python}\nimport sys\nimport pytest\nsys.exit(pytest.main())\n")
    (repo / ".venv" / "bin" / "rc-pytest").chmod(0o755)
    (repo / "mypkg" / "core.py").write_text(fixed_core)  # the fix, in this tree
    async with stdio_client(repo) as client:
        sid = structured(await client.call_tool("start_session", {
            "symptom": "ZeroDivisionError: division by zero in ratio"}))["session_id"]
        result = await client.call_tool("record_fix_attempt", {
            "session_id": sid, "description": "ratio returns 0.0 when b is 0",
            "command": ".venv/bin/rc-pytest -q -p no:cacheprovider tests"})
    data = structured(result)
    assert data["run"]["outcome"] == "fail"
    assert str(other / "mypkg" / "core.py") in data["run"]["outside_root"]
    assert data["fixed"] is False and data["consecutive_failures"] == 0
    assert result.content[0].text.startswith("Fix attempt 1: NOT JUDGED")
    assert "OUTSIDE the root" in data["reason"]


async def test_one_variable_is_not_checked_for_an_experiment_outside_the_root(repo: Path, tmp_path: Path) -> None:
    _commit(repo, {"stats.py": "import sys\nvalues = []\nprint(sum(values) / len(values))\n",
                   "data.json": "[1, 2, 3]\n"}, "stats")
    copy = tmp_path / "patched"
    copy.mkdir()
    (copy / "stats.py").write_text("values = []\nprint(sum(values) / max(len(values), 1))\n")
    async with stdio_client(repo) as client:
        sid = structured(await client.call_tool("start_session", {
            "symptom": "ZeroDivisionError: division by zero in stats.py"}))["session_id"]
        (repo / "data.json").write_text("[1, 2, 3, 4]\n")  # an unrelated edit in the working tree
        result = await client.call_tool("verify_hypothesis", {
            "session_id": sid, "hypothesis": "mean() divides by the length of an empty list",
            "prediction": "with the guard the script prints 0.0 and exits 0",
            "command": ["python", str(copy / "stats.py")], "expect": "pass",
            "changed": "max(len(values), 1) in the patched copy",
            "disproof": "it still fails with 'ZeroDivisionError'", "alternatives": ["the data file is empty"],
            "python": sys.executable})
    data = structured(result)
    check = {c["name"]: c for c in data["gate"]["checks"]}["one_variable"]
    assert data["result"] == "supported" and check["passed"]  # quiet: a check that cannot decide does not alarm
    assert check["why"].startswith("not checked: the experiment runs") and str(copy) in check["why"]
    assert "data.json" not in check["why"]
