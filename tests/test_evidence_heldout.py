"""The evidence layer's text rules on held-out real-world cases (tests/fixtures/evidence_heldout/cases.yaml).

Each case's log is printed by a real run with the case's exit code; the observation's outcome is
compared with the label `fails`, and its matches_expected (against the session's triaged symptom)
with `matches`. The floor is the first score measured on these labels (no rule was fitted to them).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from rootcause.tools.core.context import ToolContext
from rootcause.tools.judge.triage import triage
from rootcause.tools.observe.evidence import RunFields, declare, from_symptom, run_observed

from tests.conftest import FIXTURES

pytestmark = pytest.mark.anyio
CASES = yaml.safe_load((FIXTURES / "evidence_heldout" / "cases.yaml").read_text())["cases"]
FAILS_FLOOR = 0.9  # first score on these labels: 18/20
MATCHES_FLOOR = 0.93  # first score: 14/15


async def _observe(repo: Path, case: dict):
    (repo / "case.log").write_text(case["log"])
    code = f"import sys; sys.stdout.write(open('case.log').read()); sys.stdout.flush(); sys.exit({case['exit_code']})"
    ctx = ToolContext.for_root(repo)
    found = triage(case["symptom"])
    stick = from_symptom(case["symptom"], found.category, found.keywords)
    decl = declare(RunFields(command=["python", "-c", code], python=sys.executable), ctx.workspace, label="heldout")
    [obs] = await run_observed(decl, ctx, yardstick=stick)
    return obs


async def test_heldout_score(repo: Path) -> None:
    fails_right, matches_right, matches_total, misses = 0, 0, 0, []
    for case in CASES:
        obs = await _observe(repo, case)
        if obs.failed == case["fails"]:
            fails_right += 1
        else:
            misses.append(f"{case['id']}: fails {obs.failed} ({obs.outcome_reason})")
        if case["matches"] is not None and obs.failed:
            matches_total += 1
            if obs.matches_expected == case["matches"]:
                matches_right += 1
            else:
                misses.append(f"{case['id']}: matches {obs.matches_expected} ({obs.match_reason})")
    fails_score = fails_right / len(CASES)
    matches_score = matches_right / matches_total if matches_total else 1.0
    report = (f"fails {fails_right}/{len(CASES)} = {fails_score:.2f}; matches {matches_right}/{matches_total} = "
              f"{matches_score:.2f}; misses: {misses}")
    print(report)
    assert fails_score >= FAILS_FLOOR and matches_score >= MATCHES_FLOOR, report
