"""One place that speaks the caller's language: MCP argument names or CLI options.

Engines write their messages and hints the MCP way (`pass python=...`, `rootcause serve --root DIR`);
on the command line the same text names `--python ...`, `--root DIR` and the subcommand `check-constraints`.
That applies to errors and to the guidance a result carries (its `next`, notes and interpreter remarks):
verbatim material in a result (commands, log lines, error messages of a run) is never rewritten.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rootcause.tools.core.results import ToolResult

Surface = Literal["mcp", "cli"]

# Result fields that hold our own guidance, by name: rendered per surface. Everything else is data.
GUIDANCE_FIELD = re.compile(r"^(next|hints?|notes?|interpreter|\w+_(note|hint)s?)$")
_PHRASES = Path(__file__).with_name("cli_words.yaml")


def option(name: str, surface: Surface) -> str:
    """How the caller spells an argument: `timeout_s` over MCP, `--timeout-s` on the command line."""
    return "--" + name.replace("_", "-") if surface == "cli" else name


def render(message: str, surface: Surface, arguments: Iterable[str] | None = None) -> str:
    """The message with argument references rewritten for the surface (MCP text is returned as is).

    arguments: the names to rewrite; by default every tool's arguments (a hint may name another tool's).
    """
    if surface == "mcp":
        return message
    names = sorted(set(all_arguments() if arguments is None else arguments), key=len, reverse=True)
    if names:
        pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")=(\S*)")
        message = pattern.sub(_cli_option, message)
    message = _tool_names().sub(lambda match: match.group(0).replace("_", "-"), message)
    for mcp_words, cli_words in _cli_phrases():
        message = message.replace(mcp_words, cli_words)
    return message


def render_result(result: ToolResult, surface: Surface) -> ToolResult:
    """The result with its guidance fields in the surface's words (a copy; MCP gets the result as is)."""
    if surface == "mcp":
        return result
    return _render_model(result, surface)


def _render_model(model, surface: Surface):
    from pydantic import BaseModel

    changes = {}
    for name in type(model).model_fields:
        value = getattr(model, name, None)  # a model built without validation may lack a field
        if GUIDANCE_FIELD.match(name) and isinstance(value, str):
            changes[name] = render(value, surface)
        elif GUIDANCE_FIELD.match(name) and isinstance(value, list) and all(isinstance(v, str) for v in value):
            changes[name] = [render(v, surface) for v in value]
        elif isinstance(value, BaseModel):
            changes[name] = _render_model(value, surface)
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            changes[name] = [_render_model(v, surface) for v in value]
    return model.model_copy(update=changes) if changes else model


@functools.cache
def all_arguments() -> frozenset[str]:
    """Every tool's argument names, from the cached tool schemas (no engine is imported when cached)."""
    from rootcause.server.schemas import tool_schemas

    return frozenset(name for schema in tool_schemas()["tools"].values()
                     for name in schema["input"].get("properties", {}))


@functools.cache
def _tool_names() -> re.Pattern[str]:
    """Tool names as the CLI spells its subcommands: `check_constraints` -> `check-constraints`."""
    from rootcause.server.catalog import TOOLS

    names = sorted((spec.name for spec in TOOLS if "_" in spec.name), key=len, reverse=True)
    return re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")


@functools.cache
def _cli_phrases() -> tuple[tuple[str, str], ...]:
    import yaml

    phrases = yaml.safe_load(_PHRASES.read_text(encoding="utf-8")) or {}
    return tuple(sorted(phrases.items(), key=lambda item: len(item[0]), reverse=True))


def _cli_option(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    flag = option(name, "cli")
    trail = ""
    while value and value[-1] in ".,;)" and not value.endswith("..."):  # `python=...` keeps its ellipsis
        value, trail = value[:-1], value[-1] + trail
    if value.lower() == "true":
        return flag + trail
    if value.lower() == "false":
        return "--no-" + flag[2:] + trail
    value = value.strip("'\"")
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1] or "..."
    return f"{flag} {value}{trail}" if value else flag + trail
