"""The evidence layer on real runs: declaration checks, exit-0 failures, timeouts, the expected-failure matcher."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.observe.evidence import RunFields, declare, from_expect, from_symptom, run_observed

pytestmark = pytest.mark.anyio

NAN_TRAINER = """
import math
for step in range(1, 31):
    loss = 2.0 / step if step < 25 else float('nan')
    print(f"step {step} loss {loss:.4f} grad_norm {1.5 if step < 25 else math.inf} lr 0.001", flush=True)
print("training done")
"""
SWALLOWED = """
import subprocess, sys
subprocess.run([sys.executable, "-c", "import json; json.loads('{')"])
print("launcher: worker exited, returning 0")
"""


def _fields(command, **kw) -> RunFields:
    return RunFields(command=command, python=sys.executable, **kw)


async def _one(repo: Path, command, stick=None, **kw):
    ctx = ToolContext.for_root(repo)
    decl = declare(_fields(command, **kw), ctx.workspace, label="test")
    [obs] = await run_observed(decl, ctx, yardstick=stick)
    return obs


@pytest.mark.parametrize("value", [0, -1, math.inf, math.nan, 8 * 24 * 3600.0])
def test_timeouts_are_validated_once(repo: Path, value: float) -> None:
    ctx = ToolContext.for_root(repo)
    with pytest.raises(UsageError, match="timeout_s"):
        declare(_fields("true", timeout_s=value), ctx.workspace, label="t")
    with pytest.raises(UsageError, match="idle_timeout_s"):
        declare(_fields("true", idle_timeout_s=value), ctx.workspace, label="t")


def test_interpreter_rule_says_when_it_is_rootcause_own(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    decl = declare(RunFields(command="python -c pass"), ctx.workspace, label="t")
    assert decl.interpreter is not None and decl.interpreter.source == "rootcause"
    assert "no .venv in the project; pass python=" in (decl.interpreter.note or "")
    venv_python = repo / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    decl = declare(RunFields(command="python -c pass"), ctx.workspace, label="t")
    assert decl.interpreter.source == "project_venv" and decl.interpreter.note is None
    assert decl.env["PATH"].startswith(str(venv_python.parent))


async def test_nan_losses_after_exit_0_fail_with_the_step(repo: Path) -> None:
    (repo / "train.py").write_text(NAN_TRAINER)
    obs = await _one(repo, "python train.py")
    assert obs.exit_code == 0
    assert obs.outcome == "fail"
    assert obs.outcome_reason == "exit 0, but loss is NaN from step 25"
    assert obs.category == "nonfinite" and obs.signature


async def test_a_swallowed_traceback_fails(repo: Path) -> None:
    (repo / "launch.py").write_text(SWALLOWED)
    obs = await _one(repo, "python launch.py")
    assert obs.exit_code == 0 and obs.outcome == "fail"
    assert obs.outcome_reason.startswith("exit 0, but a traceback ends the output")
    assert "JSONDecodeError" in (obs.error or "")


async def test_a_clean_run_passes(repo: Path) -> None:
    obs = await _one(repo, ["python", "-c", "print('loss 0.5 inference finished')"])
    assert obs.outcome == "pass" and obs.outcome_reason == "exit 0" and obs.signature is None


async def test_an_idle_run_is_a_hang(repo: Path) -> None:
    obs = await _one(repo, ["python", "-c", "import time; print('start', flush=True); time.sleep(60)"],
                     idle_timeout_s=1.5)
    assert obs.outcome == "hang" and obs.timed_out == "idle"
    assert obs.outcome_reason.startswith("idle timeout")


async def test_expect_and_symptom_match_the_failure(repo: Path) -> None:
    (repo / "tls.py").write_text(
        "import sys\nprint('error: Request failed after 3 retries\\n  Caused by: invalid peer certificate: "
        "UnknownIssuer', file=sys.stderr)\nsys.exit(2)\n")
    numpy_symptom = from_symptom("AttributeError: module 'numpy' has no attribute 'float'", "python_exception",
                                 ["AttributeError", "numpy", "float"])
    obs = await _one(repo, "python tls.py", numpy_symptom)
    assert obs.outcome == "fail" and obs.matches_expected is False
    assert "AttributeError" in (obs.match_reason or "")
    obs = await _one(repo, "python tls.py", from_expect("peer certificate"))
    assert obs.matches_expected is True
    (repo / "np.py").write_text("class M: pass\nnp = M()\nnp.float\n")
    obs = await _one(repo, "python np.py", numpy_symptom)
    assert obs.matches_expected is True


async def test_tracebacks_naming_project_files_outside_the_root(repo: Path, tmp_path: Path) -> None:
    (repo / "mypkg").mkdir()
    (repo / "mypkg" / "__init__.py").write_text("")
    (repo / "mypkg" / "core.py").write_text("def f():\n    return 1\n")
    other = tmp_path / "other-checkout"
    (other / "mypkg").mkdir(parents=True)
    (other / "mypkg" / "__init__.py").write_text("")
    (other / "mypkg" / "core.py").write_text("def f():\n    raise ValueError('old code')\n")
    (other / "check.py").write_text("import mypkg.core\nassert mypkg.core.f() == 1\n")
    (repo / "check.py").write_text("import mypkg.core\nassert mypkg.core.f() == 2\n")
    obs = await _one(repo, ["python", str(other / "check.py")])  # a copied script: imports the other checkout
    assert obs.outcome == "fail"
    assert str(other / "mypkg" / "core.py") in obs.outside_root
    obs = await _one(repo, ["python", "check.py"])
    assert obs.outcome == "fail" and obs.outside_root == []


async def test_a_vague_symptom_does_not_call_a_failure_different(repo: Path) -> None:
    (repo / "imp.py").write_text("import no_such_module_here\n")
    vague = from_symptom("my script is broken on the new machine", "python_exception", ["script", "broken", "machine"])
    obs = await _one(repo, "python imp.py", vague)
    assert obs.outcome == "fail" and obs.matches_expected is None
    specific = from_symptom("training hangs at step 1200", "hang", ["hangs", "step"])
    obs = await _one(repo, "python imp.py", specific)
    assert obs.matches_expected is False
