"""Validate a tool's arguments and run its engine: shared by the MCP server and the CLI.

Argument errors are written here, in our words, for every tool: which argument, what it takes
(from the input schema: type, choices, bounds), and what was given, named the way the caller
names it (server/surface.py). Before the model sees them, the arguments are checked against the
tool's compact input schema in one linear walk: an unknown name is refused with the nearest known
one, a value longer than its schema's limit (server/limits.yaml) is refused before anything parses
it, and true/false is no number. Numbers must be finite and sane: NaN, infinities and magnitudes
no run could mean are refused before an engine sees them. All of it runs in a worker thread, as
sync engines do: a call's validation never holds the event loop other requests are answered on.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import math
import types
import typing
from collections.abc import Iterator
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


class ArgumentShapeError(UsageError):
    """An argument refused for its name, size or JSON type: the message names arguments and lengths, never a
    value, so there is nothing of the arguments to redact in it (and no need to scan megabytes for secrets)."""


async def call_engine(spec: ToolSpec, arguments: dict[str, Any], ctx: ToolContext,
                      surface: Surface = "mcp") -> ToolResult:
    engine, inp = await prepare(spec, arguments, surface)
    return await run_engine(engine, inp, ctx, surface)


async def prepare(spec: ToolSpec, arguments: dict[str, Any], surface: Surface = "mcp") -> tuple[Any, BaseModel]:
    """The engine and its validated input, in a worker thread (a first import and a long argument take time)."""
    def load_and_parse() -> tuple[Any, BaseModel]:
        engine, input_model, _ = spec.load()
        return engine, parse_input(spec, input_model, arguments, surface)

    return await anyio.to_thread.run_sync(load_and_parse)


async def run_engine(engine: Any, inp: BaseModel, ctx: ToolContext, surface: Surface = "mcp") -> ToolResult:
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
    if not isinstance(arguments, dict):
        raise ArgumentShapeError(f"{spec.name}: the arguments are an object of argument names and values, "
                                 f"not {_json_kind(arguments)}.")
    arguments = _pre_parse_json(model, arguments)
    schema = input_schema(model)
    early = list(_shape_problems(arguments, schema, schema, (), surface))
    if early:
        shown = early[:MAX_PROBLEMS] + ([f"({len(early) - MAX_PROBLEMS} more.)"] if len(early) > MAX_PROBLEMS else [])
        raise ArgumentShapeError(f"{spec.name}: " + " ".join(shown))
    try:
        inp = model.model_validate(arguments)
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


MAX_PROBLEMS = 5


@functools.cache
def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The tool's compact input schema (what tools/list shows, shared objects spelled out in it)."""
    from rootcause.server.schemas import compact_input

    return compact_input(model.model_json_schema(by_alias=True))


def _shape_problems(value: Any, node: dict[str, Any], schema: dict[str, Any], path: tuple[str, ...],
                    surface: Surface) -> Iterator[str]:
    """Unknown names, values over their size limit, true/false where a number goes: one walk, linear in the value."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        node = schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {})
    kinds = _kinds(node, schema)
    if isinstance(value, bool):
        if kinds & {"number", "integer"} and "boolean" not in kinds:
            from rootcause.server.schemas import describe

            yield f"{_label(path, surface)} takes {describe(node, schema)}, not {json.dumps(value)}."
        return
    branch = _branch(node, schema, value)
    if branch is None:
        return  # another type than the schema's: the model's validation says what it takes
    if isinstance(value, str):
        limit = branch.get("maxLength")
        if limit is not None and len(value) > limit:
            yield f"{_label(path, surface)} is {len(value):,} characters long; it takes at most {limit:,}."
    elif isinstance(value, list):
        limit = branch.get("maxItems")
        if limit is not None and len(value) > limit:
            yield f"{_label(path, surface)} has {len(value):,} entries; it takes at most {limit:,}."
            return
        if isinstance(branch.get("items"), dict):
            for index, item in enumerate(value):
                yield from _shape_problems(item, branch["items"], schema, (*path, str(index)), surface)
    elif isinstance(value, dict):
        properties = branch.get("properties")
        limit = branch.get("maxProperties")
        if limit is not None and len(value) > limit:
            yield f"{_label(path, surface)} has {len(value):,} entries; it takes at most {limit:,}."
            return
        for key, item in value.items():
            if isinstance(properties, dict) and key in properties:
                yield from _shape_problems(item, properties[key], schema, (*path, key), surface)
            elif isinstance(properties, dict) and not isinstance(branch.get("additionalProperties"), dict):
                yield _unknown(str(key), list(properties), path, surface)
            elif isinstance(branch.get("additionalProperties"), dict):
                yield from _shape_problems(item, branch["additionalProperties"], schema, (*path, str(key)), surface)


_JSON_KINDS = {str: "string", list: "array", dict: "object", int: "integer", float: "number"}


def _kinds(node: dict[str, Any], schema: dict[str, Any]) -> set[str]:
    """The JSON types a schema node accepts (choices count as their values' types)."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        return _kinds(schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {}), schema)
    kinds = node.get("type")
    found = set(kinds) if isinstance(kinds, list) else {kinds} if isinstance(kinds, str) else set()
    for choice in node.get("enum", ()):
        found.add("boolean" if isinstance(choice, bool) else _JSON_KINDS.get(type(choice), "null"))
    for choice_ in node.get("anyOf", ()):
        found |= _kinds(choice_, schema)
    if "integer" in found:
        found.add("number")
    return found


def _branch(node: dict[str, Any], schema: dict[str, Any], value: Any) -> dict[str, Any] | None:
    """The schema (or anyOf branch) that applies to a value of this JSON type."""
    kind = _JSON_KINDS.get(type(value))
    options = node.get("anyOf")
    for candidate in options if isinstance(options, list) else [node]:
        ref = candidate.get("$ref")
        if isinstance(ref, str):
            candidate = schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {})
        kinds = candidate.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        nested = kind == "object" and "properties" in candidate
        if kind in kinds or (kind == "integer" and "number" in kinds) or nested:
            return candidate
    return None


def _unknown(name: str, known: list[str], path: tuple[str, ...], surface: Surface) -> str:
    """`unknown argument 'timout_s'; did you mean 'timeout_s'?` (a nested object's field: `unknown field ... in`)."""
    def spell(text: str) -> str:
        return text if path else option(text, surface)

    shown = name if len(name) <= 60 else f"{name[:40]}... ({len(name):,} characters)"
    names = [spell(k) for k in known]
    best = difflib.get_close_matches(spell(name[:200]), names, n=1, cutoff=0.6)
    head = f"unknown field {shown!r} in {_label(path, surface)}" if path else f"unknown argument {spell(shown)!r}"
    return f"{head}; did you mean {best[0]!r}?" if best else f"{head}; it takes {', '.join(names)}."


def _json_kind(value: Any) -> str:
    return {list: "a list", str: "a string", type(None): "null"}.get(type(value), type(value).__name__)


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
    from rootcause.server.schemas import describe

    schema = input_schema(model)
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
