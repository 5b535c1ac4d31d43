"""The verification gate raises no false alarm, and still raises the true ones (issue 25, point 5).

Through the real `rootcause serve` over stdio, on a small git project whose `python clock.py` fails with
"TypeError: can't compare offset-naive and offset-aware datetimes" (naive datetime.utcnow() stamps compared
with an aware deadline). Each test reproduces it in a session, then runs experiments:

1. a disproof written as prose whose quoted words appear in the passing output -> not searched, no alarm;
   a disproof_regex that matches the passing output -> the evidence contradicts itself;
2. one API migration in one file (an import, a helper, two call sites: four hunks) -> one change;
   an unrelated second change in a second file -> two changes;
3. a driver script outside the root that imports clock from the root -> judged in the root, one change;
   a driver inside the root with two unrelated changes in clock.py -> two changes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, stdio_client, structured
from tests.test_gate import CLOCK, migrate

pytestmark = [pytest.mark.anyio]

SYMPTOM = "TypeError: can't compare offset-naive and offset-aware datetimes in clock.py"
H = {
    "hypothesis": "report() fails because datetime.utcnow() gives naive stamps while DEADLINE is aware",
    "prediction": "with aware stamps from datetime.now(timezone.utc) the report prints and exits 0",
    "command": "python clock.py", "expect": "pass",
    "changed": "datetime.utcnow() -> datetime.now(timezone.utc) behind a _now() helper",
    "disproof": "the report still fails with /TypeError/",
    "alternatives": ["DEADLINE is parsed wrongly", "started() subtracts a naive timedelta"],
    "confidence": 0.9, "python": sys.executable,
}
PROSE = "the report still fails with the TypeError in 'overdue', or passes but prints a naive 'stamp'"


@pytest.fixture
def clock(repo: Path) -> Path:
    (repo / "clock.py").write_text(CLOCK)
    (repo / "units.py").write_text("def seconds(n):\n    return n\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "clock")
    return repo


async def _session(client: Any) -> str:
    sid = structured(await client.call_tool("start_session", {"symptom": SYMPTOM}))["session_id"]
    baseline = structured(await client.call_tool("reproduce", {"command": "python clock.py", "runs": 1,
                                                               "session_id": sid, "python": sys.executable}))
    assert baseline["status"] == "reproduced", baseline
    return sid


async def _verify(client: Any, sid: str, **changes: Any) -> tuple[dict[str, Any], dict[str, Any], str]:
    result = await client.call_tool("verify_hypothesis", {**H, "session_id": sid, **changes})
    data = structured(result)
    return data, {c["name"]: c for c in data["gate"]["checks"]}, result.content[0].text


async def test_a_prose_disproof_is_not_matched_and_a_regex_that_matches_alarms(clock: Path) -> None:
    async with stdio_client(clock) as client:
        sid = await _session(client)
        (clock / "clock.py").write_text(migrate(CLOCK))
        data, gate, text = await _verify(client, sid, disproof=PROSE)
        assert data["result"] == "supported" and data["gate"]["passed"] and not data["needs_review"], text
        assert gate["disproof_checked"]["why"].startswith("not checked: the disproof is prose") and \
            data["disproof_observed"] is None
        assert "WAS observed" not in text and "contradicts" not in text

        # the true alarm: a different experiment passes too, but leaves the stamps naive, as the regex shows
        (clock / "clock.py").write_text(CLOCK.replace("from datetime import datetime, timedelta",
                                                      "from datetime import datetime, timedelta, timezone")
                                        .replace("return now > DEADLINE",
                                                 "return now.replace(tzinfo=timezone.utc) > DEADLINE"))
        data, gate, text = await _verify(client, sid, changed="overdue() makes the stamp aware before comparing",
                                         disproof="the report passes but still prints a naive stamp",
                                         disproof_regex=r"stamp=[\d:.T-]+ ")
        assert data["result"] == "supported" and data["disproof_observed"] is True
        assert not gate["disproof_checked"]["passed"] and gate["one_variable"]["passed"], text
        assert "contradicts itself" in gate["disproof_checked"]["why"]
        assert gate["disproof_checked"]["why"].startswith(r"searched the output for disproof_regex /stamp=[\d:.T-]+ /")
        assert data["needs_review"] and "contradicts itself" in data["review_prompt"]


async def test_one_api_migration_is_one_change_and_a_second_file_is_another(clock: Path) -> None:
    async with stdio_client(clock) as client:
        sid = await _session(client)
        (clock / "clock.py").write_text(migrate(CLOCK))
        data, gate, text = await _verify(client, sid)
        assert data["result"] == "supported" and data["gate"]["passed"], text
        why = gate["one_variable"]["why"]
        assert why == ("one change since the session start: clock.py (+7 -3, 4 hunks) — 1 change: from datetime "
                       "import timezone, _now(), started(), report()")
        assert "separate places" not in text

        (clock / "units.py").write_text("def seconds(n):\n    return int(n)\n")  # unrelated to the hypothesis
        data, gate, text = await _verify(client, sid)
        assert not gate["one_variable"]["passed"] and data["needs_review"]
        assert "2 files changed since the session start" in gate["one_variable"]["why"]
        assert "units.py (+1 -1, 1 hunk) — 1 change: seconds()" in gate["one_variable"]["why"]


async def test_a_driver_outside_the_root_is_judged_by_the_code_it_runs(clock: Path, tmp_path: Path) -> None:
    drivers = tmp_path / "drivers"
    drivers.mkdir()
    drive = drivers / "drive.py"
    drive.write_text(f"import sys\n\nsys.path.insert(0, {str(clock)!r})\nimport clock\n\nprint(clock.report())\n")
    async with stdio_client(clock) as client:
        sid = await _session(client)
        (clock / "clock.py").write_text(migrate(CLOCK))
        data, gate, text = await _verify(client, sid, command=["python", str(drive)])
        assert data["result"] == "supported" and data["gate"]["passed"] and not data["needs_review"], text
        why = gate["one_variable"]["why"]
        assert why.startswith("one change since the session start: clock.py (+7 -3, 4 hunks) — 1 change")
        assert f"the driver {drive} is outside the root and not checked" in why
        assert "imports clock" in data["experiment_tree"]
        assert "not checked: the experiment runs" not in text

        # the true alarm: a driver inside the root, and clock.py changing two unrelated things
        (clock / "drive.py").write_text("import clock\n\nprint(clock.report())\n")
        (clock / "clock.py").write_text(migrate(CLOCK).replace('"clock report"', '"the clock"'))
        data, gate, text = await _verify(client, sid, command="python drive.py")
        why = gate["one_variable"]["why"]
        assert not gate["one_variable"]["passed"] and data["needs_review"], text
        assert "one file changed since the session start but in 2 unrelated places: clock.py" in why
        assert "2 unrelated changes: from datetime import timezone, _now(), started(), report(); banner()" in why
        assert "(not counted: drive.py (the experiment's own new script))" in why
