"""One place that speaks the caller's language: MCP argument names or CLI options.

Engines write their messages and hints the MCP way (`pass python=...`, `rootcause serve --root DIR`);
on the command line the same text names `--python ...` and `--root DIR`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

Surface = Literal["mcp", "cli"]


def option(name: str, surface: Surface) -> str:
    """How the caller spells an argument: `timeout_s` over MCP, `--timeout-s` on the command line."""
    return "--" + name.replace("_", "-") if surface == "cli" else name


def render(message: str, surface: Surface, arguments: Iterable[str]) -> str:
    """The message with argument references rewritten for the surface (MCP text is returned as is)."""
    if surface == "mcp":
        return message
    names = sorted(set(arguments), key=len, reverse=True)
    if names:
        pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")=(\S*)")
        message = pattern.sub(_cli_option, message)
    return message.replace("rootcause serve --root DIR", "--root DIR")


def _cli_option(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    flag = option(name, "cli")
    trail = ""
    while value and value[-1] in ".,;)":
        value, trail = value[:-1], value[-1] + trail
    if value.lower() == "true":
        return flag + trail
    if value.lower() == "false":
        return "--no-" + flag[2:] + trail
    value = value.strip("'\"")
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1] or "..."
    return f"{flag} {value}{trail}" if value else flag + trail
