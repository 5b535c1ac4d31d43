"""The project's codegen freshness check: find it, run it through the runner, report staleness.

Where the command comes from, first found wins: the `codegen_command` argument, the
environment variable ROOTCAUSE_CODEGEN_CHECK, `[tool.rootcause] codegen_check` in the
root's pyproject.toml, else a Makefile target named like a codegen check
(check-patchgen, check_codegen, check-generated, patchgen-check, ...), run as `make <target>`.
A failing check means the generated code differs from what the generator produces now.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from pydantic import BaseModel
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import bounded
from rootcause.tools.run import parse_command, run_captured

ENV_VAR = "ROOTCAUSE_CODEGEN_CHECK"
_TARGET = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)\s*:(?![=:])", re.MULTILINE)
_CHECK_NAME = re.compile(
    r"^(check|verify|test)[-_]?(patch|code)?gen(erated|eration)?\w*$|^(patch|code)gen[-_](check|verify)\w*$",
    re.IGNORECASE,
)
TIMEOUT_S = 600.0


class CodegenCheck(BaseModel):
    command: list[str] | None = None
    source: str
    """Where the command came from (argument, env, pyproject, Makefile target), or why none was found."""
    ran: bool = False
    outcome: str | None = None
    exit_code: int | None = None
    stale: bool | None = None
    excerpt: str = ""
    log_path: str | None = None
    run_id: str | None = None


def makefile_targets(root: Path) -> list[str]:
    for name in ("GNUmakefile", "makefile", "Makefile"):
        path = root / name
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            return list(dict.fromkeys(_TARGET.findall(text)))
    return []


def detect(root: Path, configured: str | None) -> tuple[list[str] | None, str]:
    if configured and configured.strip():
        return parse_command(configured)[0], "codegen_command argument"
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return parse_command(env)[0], f"${ENV_VAR}"
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            data = {}
        command = data.get("tool", {}).get("rootcause", {}).get("codegen_check")
        if isinstance(command, str) and command.strip():
            return parse_command(command)[0], "pyproject.toml [tool.rootcause] codegen_check"
    for target in makefile_targets(root):
        if _CHECK_NAME.match(target):
            return ["make", target], f"Makefile target {target}"
    return None, ("no codegen check found: pass codegen_command, set $ROOTCAUSE_CODEGEN_CHECK, add "
                  "[tool.rootcause] codegen_check to pyproject.toml, or add a Makefile target like check-patchgen")


async def run_codegen_check(ctx: ToolContext, configured: str | None) -> CodegenCheck:
    argv, source = detect(ctx.root, configured)
    if argv is None:
        return CodegenCheck(source=source)
    await ctx.progress(0, None, f"codegen check: {' '.join(argv)}")
    try:
        record, output = await run_captured(argv, ctx.workspace, cwd=ctx.root, timeout_s=TIMEOUT_S,
                                            label="codegen-check", progress=ctx.progress)
    except UsageError:
        if configured:
            raise
        return CodegenCheck(command=argv, source=f"{source} (could not start: {argv[0]} not found)")
    return CodegenCheck(
        command=argv, source=source, ran=True, outcome=record.outcome, exit_code=record.exit_code,
        stale=record.outcome != "pass", excerpt=bounded(output.strip(), 3_000), log_path=record.log_path,
        run_id=record.run_id,
    )
