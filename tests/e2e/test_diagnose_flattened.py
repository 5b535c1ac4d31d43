"""diagnose_log over stdio on a real process whose logger flattened a traceback onto one line: the line model
unfolds it with the one definition of an exception line (every suffix of tools/observe/logs/exception_types.yaml,
here a warning raised as an error)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import stdio_client, structured

pytestmark = pytest.mark.anyio

FLATTENING = """\
import logging
import traceback
import warnings

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
warnings.simplefilter("error")


def load_config(path):
    warnings.warn(f"{path}: key 'lr_warmup' is deprecated, use 'warmup_steps'", UserWarning)


try:
    logging.info("step 0 loss 2.31")
    load_config("configs/train.yaml")
except Exception:
    logging.error("worker failed: %s", traceback.format_exc().replace("\\n", " "))
    raise SystemExit(1)
"""


async def test_a_flattened_traceback_ending_in_a_warning_raised_as_an_error_is_unfolded(repo: Path) -> None:
    (repo / "train.py").write_text(FLATTENING)
    with open(repo / "train.log", "w") as fh:
        done = subprocess.run([sys.executable, "train.py"], cwd=repo, stdout=fh, stderr=subprocess.STDOUT, timeout=60)
    log = (repo / "train.log").read_text()
    assert done.returncode == 1 and log.count("\n") == 2, log  # the whole traceback on the ERROR line
    async with stdio_client(repo) as client:
        result = await client.call_tool("diagnose_log", {"path": "train.log"})
    d = structured(result)["diagnosis"]
    assert d["exception_type"] == "UserWarning", log
    assert d["message"] == "configs/train.yaml: key 'lr_warmup' is deprecated, use 'warmup_steps'"
    assert d["location"] == "train.py:10" and [f["function"] for f in d["frames"]] == ["<module>", "load_config"]
    assert "UserWarning" in result.content[0].text
