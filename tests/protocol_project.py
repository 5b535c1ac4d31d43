"""A small real project with one bug, for the Phase 3/4 tests (verify_hypothesis, record_fix_attempt).

stats.py drops every value at or below THRESHOLD (default 10) before taking the mean, so
`python stats.py data.json` (values 1, 2, 3) divides by zero. The root cause is the default
threshold; guarding the division is a symptom fix that the reproducer test rejects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import git

STATS = '''import json
import os
import sys


def load(path):
    threshold = float(os.environ.get("THRESHOLD", "10"))
    with open(path) as fh:
        return [v for v in json.load(fh)["values"] if v > threshold]


def mean(values):
    return sum(values) / len(values)


if __name__ == "__main__":
    print(f"mean={mean(load(sys.argv[1] if len(sys.argv) > 1 else 'data.json'))}")
'''
TEST = '''from stats import load, mean

result = mean(load("data.json"))
assert result == 2.0, f"mean of data.json is {result}, expected 2.0"
print("ok")
'''
REPRODUCER = "python stats.py data.json"
VERIFY = "python test_stats.py"
SYMPTOM = "ZeroDivisionError: division by zero when running python stats.py data.json"


def make_project(root: Path) -> Path:
    (root / "stats.py").write_text(STATS)
    (root / "test_stats.py").write_text(TEST)
    (root / "data.json").write_text('{"values": [1, 2, 3]}\n')
    (root / "sample.json").write_text('{"values": [4, 5, 6]}\n')
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "stats")
    return root


def edit(root: Path, old: str, new: str, name: str = "stats.py") -> None:
    path = root / name
    text = path.read_text()
    assert old in text, f"{old!r} not in {name}"
    path.write_text(text.replace(old, new))


SYMPTOM_FIX = ("return sum(values) / len(values)", "return sum(values) / max(len(values), 1)")
ROOT_FIX = ('os.environ.get("THRESHOLD", "10")', 'os.environ.get("THRESHOLD", "0")')


async def record_baseline(root: Path, session_id: str, command: str = REPRODUCER, runs: int = 2) -> dict[str, Any]:
    """The reproduce step: the reproduce tool when it is built, else the same evidence recorded by hand."""
    from rootcause.tools.core.context import ToolContext

    ctx = ToolContext.for_root(root)
    try:
        from rootcause.tools.engines.reproduce import ReproduceInput, reproduce
    except ModuleNotFoundError:
        return await _baseline_by_hand(ctx, session_id, command, runs)
    result = await reproduce(ReproduceInput(command=command, runs=runs, session_id=session_id), ctx)
    return result.model_dump(mode="json")


async def _baseline_by_hand(ctx: Any, session_id: str, command: str, runs: int) -> dict[str, Any]:
    from rootcause.tools.observe.diagnosis import diagnose_run
    from rootcause.tools.record.store import SessionStore
    from rootcause.tools.run import RunSpec, parse_command, run_process
    from rootcause.tools.run.interpreters import activation_env, resolve_python

    argv, env = parse_command(command)
    env = {**activation_env(resolve_python(ctx.workspace, None)), **env}
    records = [await run_process(RunSpec(argv=argv, cwd=ctx.root, env=env, timeout_s=60), ctx.workspace)
               for _ in range(runs)]
    diagnoses = [diagnose_run(r, ctx.root) if r.outcome != "pass" else None for r in records]
    signatures = {d.signature for d in diagnoses if d}
    failed = sum(1 for r in records if r.outcome != "pass")
    status = "reproduced" if failed == runs and len(signatures) == 1 else "flaky" if failed else "not_reproduced"
    first = next((d for d in diagnoses if d), None)
    data = {
        "status": status, "consistent": status == "reproduced",
        "runs": [{"run_id": r.run_id, "outcome": r.outcome, "exit_code": r.exit_code,
                  "signature": d.signature if d else None, "log_path": r.log_path}
                 for r, d in zip(records, diagnoses, strict=True)],
        "diagnosis": first.model_dump(mode="json") if first else None,
    }
    SessionStore(ctx.workspace).record(session_id, "reproduce", f"{failed}/{runs} runs failed: {status}", data,
                                       phase=1)
    return data
