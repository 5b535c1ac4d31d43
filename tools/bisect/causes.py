"""Why a run failed without saying anything about the package or the commit under test (not_the_package.yaml)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml

DATA = Path(__file__).with_name("not_the_package.yaml")
Scope = Literal["run", "both"]


@dataclass(frozen=True)
class Cause:
    reason: str
    scope: Scope
    exit_codes: tuple[int, ...]
    patterns: tuple[re.Pattern[str], ...]
    tls: bool = False

    def matches(self, output: str, exit_code: int | None) -> str | None:
        """The matched line of the output (or the exit code), None when this cause does not apply."""
        if exit_code is not None and exit_code in self.exit_codes:
            return f"exit code {exit_code}"
        for pattern in self.patterns:
            found = pattern.search(output)
            if found:
                start = output.rfind("\n", 0, found.start()) + 1
                end = output.find("\n", found.end())
                return output[start:end if end >= 0 else None].strip()[:300]
        return None


@lru_cache(maxsize=1)
def causes() -> tuple[Cause, ...]:
    entries = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return tuple(Cause(reason=e["reason"], scope=e["scope"], exit_codes=tuple(e.get("exit_codes", ())),
                       patterns=tuple(re.compile(p, re.MULTILINE) for p in e.get("patterns", ())),
                       tls=bool(e.get("tls"))) for e in entries)


def not_the_package(output: str, exit_code: int | None, scopes: tuple[Scope, ...] = ("run",)) -> str | None:
    """'<reason>: <the line that shows it>' when a failed run never reached the code under test, else None."""
    for cause in causes():
        if cause.scope not in scopes:
            continue
        shown = cause.matches(output, exit_code)
        if shown is not None:
            return f"{cause.reason} ({shown})" + (tls_note(output) if cause.tls else "")
    return None


def tls_note(output: str) -> str:
    """Names the missing SSL_CERT_FILE when uv's TLS failed: an MCP stdio client passes only a few variables."""
    tls = next(c for c in causes() if c.tls)
    if tls.matches(output, None) is None or os.environ.get("SSL_CERT_FILE"):
        return ""
    return ("; SSL_CERT_FILE is not set in the server's environment (an MCP client starts the server with only a "
            "few variables): set SSL_CERT_FILE (and SSL_CERT_DIR if needed) in the client's env for rootcause")
