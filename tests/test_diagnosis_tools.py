"""reproduce and diagnose_log as engines and through the in-memory MCP client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.engines.diagnose_log import DiagnoseLogInput, diagnose_log
from rootcause.tools.engines.reproduce import ReproduceInput, reproduce
from rootcause.tools.run.environment import relevant_env
from rootcause.tools.run.interpreters import uv_binary

from tests.conftest import FIXTURES, error_text, memory_client, structured

pytestmark = pytest.mark.anyio


def test_relevant_env_picks_and_redacts() -> None:
    env = {"NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_abc", "WANDB_API_KEY": "k", "MASTER_PORT": "29500",
           "MY_SECRET_THING": "s", "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "HOME": "/root", "RANK": "3",
           "NCCL_IB_PASSWORD": "p"}
    assert relevant_env(env) == {"MASTER_PORT": "29500", "NCCL_DEBUG": "INFO", "NCCL_IB_PASSWORD": "<redacted>",
                                 "HF_TOKEN": "<redacted>", "RANK": "3", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}


async def test_python_argument_is_what_python_resolves_to(repo: Path) -> None:
    """The `python` argument's environment goes first on PATH: `python` in the command is that interpreter."""
    subprocess.run([uv_binary(), "venv", "-q", "--python", sys.executable, str(repo / "env1")], check=True,
                   capture_output=True)
    ctx = ToolContext.for_root(repo)
    inp = ReproduceInput(command="NCCL_DEBUG=WARN python -c 'import sys; print(sys.prefix); raise SystemExit(2)'",
                         runs=1, python="env1/bin/python", env={"HF_TOKEN": "secret-value"})
    result = await reproduce(inp, ctx)
    run = result.runs[0]
    assert run.outcome == "fail" and run.exit_code == 2
    assert (repo / run.log_path).read_text().strip() == str(repo / "env1")
    env = result.environment
    assert env.python == str(repo / "env1" / "bin" / "python") and env.python_version
    assert "torch" not in env.packages and env.cuda_available is None
    assert env.env["NCCL_DEBUG"] == "WARN" and env.env["HF_TOKEN"] == "<redacted>"
    assert "secret-value" not in result.model_dump_json()
    cached = list((repo / ".rootcause" / "cache").glob("interpreter-*.json"))
    assert len(cached) == 1
    with pytest.raises(UsageError, match="not an executable file"):
        await reproduce(ReproduceInput(command="python -V", python="nope/bin/python"), ctx)


async def test_passing_command_is_not_reproduced(repo: Path) -> None:
    result = await reproduce(ReproduceInput(command=[sys.executable, "-c", "print('fine')"], runs=2),
                             ToolContext.for_root(repo))
    assert result.status == "not_reproduced" and result.diagnosis is None and not result.consistent
    assert "NOT REPRODUCED" in result.summary()


def test_diagnose_log_engine_limits(repo: Path) -> None:
    ctx = ToolContext.for_root(repo)
    with pytest.raises(UsageError, match="over the 2000000 limit"):
        diagnose_log(DiagnoseLogInput(text="x" * 2_000_001), ctx)
    with pytest.raises(UsageError, match="text is empty"):
        diagnose_log(DiagnoseLogInput(text="  \n"), ctx)
    (repo / "dir.log").mkdir()
    with pytest.raises(UsageError, match="is not a file"):
        diagnose_log(DiagnoseLogInput(path="dir.log"), ctx)


async def test_diagnose_log_in_memory(repo: Path) -> None:
    (repo / "logs").mkdir()
    for name in ("hang_nccl_watchdog_allreduce_rank0.log", "import_flash_attn_rank0.log"):
        (repo / "logs" / name).write_text((FIXTURES / "logs" / name).read_text())
    async with memory_client(repo) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "command" in tools["reproduce"].input_schema["required"]
        assert "1..20" in tools["reproduce"].input_schema["properties"]["runs"]["description"]
        result = await client.call_tool("diagnose_log", {"path": "logs/hang_nccl_watchdog_allreduce_rank0.log"})
        data = structured(result)
        assert data["diagnosis"]["category"] == "hang"
        assert "nccl-watchdog-timeout ALLREDUCE" in data["diagnosis"]["signature"]
        assert "Signature:" in result.content[0].text
        data = structured(await client.call_tool("diagnose_log", {"path": "logs/import_flash_attn_rank0.log"}))
        d = data["diagnosis"]
        assert d["category"] == "import_error" and set(d["ranks"]) == {"0", "1"}
        assert d["exception_type"] == "ModuleNotFoundError" and "flash_attn" in d["keywords"]
        assert "outside the root" in error_text(await client.call_tool("diagnose_log", {"path": "/etc/hostname"}))
