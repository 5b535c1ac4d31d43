"""Validate a tool's arguments and run its engine: shared by the MCP server and the CLI."""

from __future__ import annotations

import inspect
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError

from server.catalog import ToolSpec
from tools.context import AMBIENT_PROGRESS, ToolContext
from tools.errors import UsageError
from tools.results import ToolResult


def validation_message(name: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return f"invalid arguments for {name}: " + "; ".join(parts)


def parse_input(spec: ToolSpec, model: type[BaseModel], arguments: dict[str, Any]) -> BaseModel:
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        raise UsageError(validation_message(spec.name, exc), "see the tool's input schema") from None


async def call_engine(spec: ToolSpec, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    engine, input_model, _ = spec.load()
    inp = parse_input(spec, input_model, arguments)
    token = AMBIENT_PROGRESS.set(ctx.progress)
    try:
        if inspect.iscoroutinefunction(engine):
            return await engine(inp, ctx)
        return await anyio.to_thread.run_sync(engine, inp, ctx)
    finally:
        AMBIENT_PROGRESS.reset(token)
