"""Validate a tool's arguments and run its engine: shared by the MCP server and the CLI.

Argument errors are written here, in our words, for every tool: which argument, what it takes
(from the input schema: type, choices, bounds), and what was given, named the way the caller
names it (server/surface.py). Numbers must be finite and sane: NaN, infinities and magnitudes
no run could mean are refused before an engine sees them.
"""

from __future__ import annotations

import inspect
import json
import math
import types
import typing
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError
from rootcause.server.catalog import ToolSpec
from rootcause.server.schemas import MAX_SECONDS
from rootcause.server.surface import Surface, option, render
from rootcause.tools.core.context import AMBIENT_PROGRESS, ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult

MAX_NUMBER = 1e9
SECONDS_BOUND = f"give seconds > 0, at most {MAX_SECONDS} (7 days)"  # arguments named *_s are durations


async def call_engine(spec: ToolSpec, arguments: dict[str, Any], ctx: ToolContext,
                      surface: Surface = "mcp") -> ToolResult:
    engine, input_model, _ = spec.load()
    inp = parse_input(spec, input_model, arguments, surface)
    token = AMBIENT_PROGRESS.set(ctx.progress)
    try:
        if inspect.iscoroutinefunction(engine):
            return await engine(inp, ctx)
        return await anyio.to_thread.run_sync(engine, inp, ctx)
    except UsageError as exc:
        if surface == "mcp":
            raise
        raise UsageError(render(str(exc), surface)) from None
    finally:
        AMBIENT_PROGRESS.reset(token)


def parse_input(spec: ToolSpec, model: type[BaseModel], arguments: dict[str, Any],
                surface: Surface = "mcp") -> BaseModel:
    try:
        inp = model.model_validate(_pre_parse_json(model, arguments))
    except ValidationError as exc:
        raise UsageError(validation_message(spec.name, model, exc, surface)) from None
    problems = list(_number_problems(inp, (), surface))
    if problems:
        raise UsageError(f"{spec.name}: " + " ".join(problems))
    return inp


def _pre_parse_json(model: type[BaseModel], arguments: dict[str, Any]) -> dict[str, Any]:
    """Some clients send a list or an object as a JSON string: parse it where the field takes no text."""
    parsed = dict(arguments)
    for name, value in arguments.items():
        field = model.model_fields.get(name)
        if field is None or not isinstance(value, str) or _accepts_text(field.annotation):
            continue
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            continue
        if isinstance(decoded, list | dict):
            parsed[name] = decoded
    return parsed


def _accepts_text(annotation: Any) -> bool:
    if annotation is str:
        return True
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and any(
        _accepts_text(member) for member in typing.get_args(annotation))


def _number_problems(value: Any, path: tuple[str, ...], surface: Surface):
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _number_problems(getattr(value, name), (*path, name), surface)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _number_problems(item, (*path, str(key)), surface)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _number_problems(item, (*path, str(index)), surface)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        label = _label(path, surface)
        seconds = bool(path) and path[-1].endswith("_s")
        if isinstance(value, float) and not math.isfinite(value):
            yield f"{label} must be a finite number, not {value}" + (f": {SECONDS_BOUND}." if seconds else ".")
        elif seconds and not 0 < value <= MAX_SECONDS:
            yield f"{label} must be > 0 seconds and at most {MAX_SECONDS} (7 days), not {value:g}."
        elif abs(value) > MAX_NUMBER:
            yield f"{label} is {value:g}, out of range; give at most {MAX_NUMBER:g}."


def _label(path: tuple[str | int, ...], surface: Surface) -> str:
    if not path:
        return "the arguments"
    head = option(str(path[0]), surface)
    return head + "".join(f"[{p}]" if str(p).isdigit() else f".{p}" for p in path[1:])


def validation_message(name: str, model: type[BaseModel], exc: ValidationError, surface: Surface = "mcp") -> str:
    """pydantic's errors retold: the argument, what it takes, what was given."""
    from rootcause.server.schemas import compact_input, describe

    schema = compact_input(model.model_json_schema(by_alias=True))
    properties = schema.get("properties", {})
    parts: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        top = loc[0] if loc else ""
        # A union reports one error per member (`command.str`, `command.list[str]`): one line per argument.
        key = loc[:1] if top in properties else loc
        if key in seen:
            continue
        seen.add(key)
        prop = properties.get(top)
        label = _label(loc if prop is None or len(loc) == 1 else (top,), surface)
        takes = describe(prop, schema) if prop else "another value"
        if err["type"] == "missing" and len(loc) == 1:
            parts.append(f"{label} is required: {takes}.")
        elif err["type"] == "extra_forbidden":
            parts.append(f"{label} is not an argument of {name}; it takes {', '.join(properties)}.")
        elif err["type"] in ("value_error", "assertion_error"):
            parts.append(_sentence(err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")))
        elif err.get("input") is None and _numeric(prop):
            # JSON has no infinity or NaN: a client sends 1e309, Infinity or NaN as null
            parts.append(f"{label} takes {takes}{' seconds (7 days at most)' if top.endswith('_s') else ''}, "
                         "not null: not a finite number (JSON sends 1e309, Infinity and NaN as null).")
        else:
            parts.append(f"{label} takes {takes}, not {_shown(err.get('input'))}.")
    return render(f"{name}: " + " ".join(parts), surface, properties)


def _numeric(prop: dict[str, Any] | None) -> bool:
    kinds = (prop or {}).get("type")
    return bool({"number", "integer"} & set(kinds if isinstance(kinds, list) else [kinds]))


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."
