"""The MCP server: every entry of server/catalog.py on the SDK's low-level `Server` and its public handlers.

The low-level server leaves arguments to us: server/invoke.py validates them with the tool's input model
and answers in our words, and every error goes back verbatim as an isError result (the SDK's tool layer
would prefix "Error executing tool ..." and retell pydantic). Tool schemas come from the cache
(server/schemas.py), so listing the tools imports no engine; an engine is imported on its first call.
Request parameters the SDK itself refuses (`arguments` as a list) are explained too, a line on stdin
that is no JSON-RPC message gets its JSON-RPC error, and a client that vanishes ends the server quietly.
"""

from __future__ import annotations

import base64
import logging
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import MCPError, UriTemplate, stdio_server
from mcp.server import Server, ServerRequestContext
from mcp.shared.message import SessionMessage
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolRequestParams,
    CallToolResult,
    ErrorData,
    GetPromptRequestParams,
    GetPromptResult,
    ImageContent,
    JSONRPCError,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    Prompt,
    PromptArgument,
    PromptMessage,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)
from pydantic import ValidationError
from rootcause import prompts
from rootcause.server.catalog import INSTRUCTIONS, PROMPTS, RESOURCES, TOOLS, ResourceSpec, ToolSpec, _attr
from rootcause.server.invoke import ArgumentShapeError, prepare, run_engine
from rootcause.tools.core import redact
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import MAX_RESULT_CHARS, bounded
from rootcause.tools.core.workspace import Workspace

log = logging.getLogger("rootcause")


def build_server(root: str | Path = ".") -> Server:
    from rootcause.server.schemas import glossary, tool_schemas

    schemas = tool_schemas()
    handlers = Handlers(Workspace(Path(root)), schemas["tools"])
    server = Server(
        "rootcause", version=_own_version(), instructions=INSTRUCTIONS + glossary(schemas["shared"]),
        on_list_tools=handlers.list_tools, on_call_tool=handlers.call_tool,
        on_list_prompts=handlers.list_prompts, on_get_prompt=handlers.get_prompt,
        on_list_resources=handlers.list_resources, on_list_resource_templates=handlers.list_resource_templates,
        on_read_resource=handlers.read_resource,
    )
    server.middleware.append(explain_bad_params)
    return server


async def explain_bad_params(ctx: ServerRequestContext, call_next: Any) -> Any:
    """Request parameters the SDK refuses ("Invalid request parameters", no detail) are named and explained."""
    try:
        return await call_next(ctx)
    except ValidationError as exc:
        raise MCPError(code=INVALID_PARAMS, message=params_message(ctx.method, exc)) from None


_TAKES = {"dict_type": "an object", "model_type": "an object", "string_type": "a string", "list_type": "a list",
          "int_type": "an integer", "bool_type": "true or false", "float_type": "a number"}


def params_message(method: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = [str(p) for p in err["loc"]]
        where = ".".join(loc[1:] if loc[:1] == ["params"] and len(loc) > 1 else loc) or "params"
        given = err.get("input")
        kind = {dict: "an object", list: "a list", str: "a string", bool: "true or false", type(None): "null",
                int: "a number", float: "a number"}.get(type(given), type(given).__name__)
        if err["type"] == "missing":
            parts.append(f"{where} is required.")
        elif where == "arguments":
            parts.append(f"arguments must be an object of argument names and values (e.g. {{\"command\": "
                         f"\"pytest -x\"}}), not {kind}.")
        else:
            parts.append(f"{where} must be {_TAKES.get(err['type'], 'another value')}, not {kind}.")
    return f"{method}: " + " ".join(parts)


def serve_stdio(app: Server) -> None:
    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            messages, received = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            async with anyio.create_task_group() as group:
                group.start_soon(_answer_unreadable_lines, read_stream, messages, write_stream.clone())
                await app.run(received, write_stream, app.create_initialization_options())

    try:
        anyio.run(run)
    except* (BrokenPipeError, ConnectionResetError):
        # The client went away (killed, or closed its end) while we still had something to say: its runs
        # were torn down as the handlers were cancelled; there is no one left to tell.
        log.debug("the client closed the connection")


async def _answer_unreadable_lines(lines: Any, messages: Any, replies: Any) -> None:
    """Pass messages on; a line that is no JSON (or no JSON-RPC message) gets its JSON-RPC error right away.

    The stdio transport hands the server such a line as an exception, which the SDK only logs: the client
    would wait for an answer that never comes. The id cannot be read from it, so the error's id is null.
    """
    async with lines, messages, replies:
        async for item in lines:
            if not isinstance(item, Exception):
                await messages.send(item)
                continue
            errors = item.errors() if isinstance(item, ValidationError) else []
            if any(err["type"] == "json_invalid" for err in errors):
                error = ErrorData(code=PARSE_ERROR, message="Parse error: the line is not JSON; send one "
                                                            "JSON-RPC message per line.")
            else:
                error = ErrorData(code=INVALID_REQUEST, message="Invalid request: the line is JSON but not a "
                                                                "JSON-RPC 2.0 request, notification or response.")
            await replies.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=None, error=error)))


def _own_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rootcause")
    except PackageNotFoundError:
        return "0"


class Handlers:
    """The request handlers, over one workspace and the cached tool schemas."""

    def __init__(self, workspace: Workspace, schemas: dict[str, dict[str, Any]]) -> None:
        self.workspace = workspace
        self.specs = {spec.name: spec for spec in TOOLS if spec.name in schemas}
        self.tools = [_tool(spec, schemas[spec.name]) for spec in self.specs.values()]
        self.templates = [(UriTemplate.parse(spec.uri), spec) for spec in RESOURCES]

    async def list_tools(self, ctx: ServerRequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=self.tools)

    async def call_tool(self, ctx: ServerRequestContext, params: CallToolRequestParams) -> CallToolResult:
        spec = self.specs.get(params.name)
        if spec is None:
            return _error(f"unknown tool {params.name[:100]!r}; the tools are: {', '.join(self.specs)}.")
        return await _call(spec, params.arguments or {}, ToolContext(self.workspace, _progress(ctx)))

    async def list_prompts(self, ctx: ServerRequestContext,
                           params: PaginatedRequestParams | None) -> ListPromptsResult:
        return ListPromptsResult(prompts=[
            Prompt(name=spec.name, description=spec.description,
                   arguments=[PromptArgument(name=a, required=True) for a in spec.arguments])
            for spec in PROMPTS])

    async def get_prompt(self, ctx: ServerRequestContext, params: GetPromptRequestParams) -> GetPromptResult:
        spec = next((p for p in PROMPTS if p.name == params.name), None)
        if spec is None:
            known = ", ".join(p.name for p in PROMPTS)
            raise MCPError(code=INVALID_PARAMS,
                           message=f"unknown prompt {params.name[:100]!r}; the prompts are: {known}.")
        given = set(params.arguments or {})
        unknown = sorted(given - set(spec.arguments))
        missing = [a for a in spec.arguments if a not in given]
        if unknown or missing:
            takes = ", ".join(spec.arguments) or "no arguments"
            problem = f"does not take {', '.join(unknown)}" if unknown else f"needs {', '.join(missing)}"
            raise MCPError(code=INVALID_PARAMS, message=f"prompt {spec.name} {problem}; it takes: {takes}.")
        text = prompts.render(spec.name, **(params.arguments or {}))
        return GetPromptResult(description=spec.description,
                               messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))])

    async def list_resources(self, ctx: ServerRequestContext,
                             params: PaginatedRequestParams | None) -> ListResourcesResult:
        from rootcause.server.readers import recent_sessions

        states = await anyio.to_thread.run_sync(recent_sessions, self.workspace)
        return ListResourcesResult(resources=[
            Resource(uri=f"rootcause://sessions/{state.session_id}", name=f"session {state.session_id}",
                     description=redact.redact_text(state.symptom[:300]), mime_type="text/markdown")
            for state in states])

    async def list_resource_templates(self, ctx: ServerRequestContext,
                                      params: PaginatedRequestParams | None) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=[
            ResourceTemplate(uri_template=spec.uri, name=spec.name, description=spec.description,
                             mime_type=spec.mime_type)
            for _, spec in self.templates])

    async def read_resource(self, ctx: ServerRequestContext, params: ReadResourceRequestParams) -> ReadResourceResult:
        uri = str(params.uri)
        for template, spec in self.templates:
            values = template.match(uri)
            if values is not None:
                text = await anyio.to_thread.run_sync(self._read, spec, uri, values)
                return ReadResourceResult(contents=[TextResourceContents(uri=uri, mime_type=spec.mime_type,
                                                                         text=text)])
        known = ", ".join(spec.uri for _, spec in self.templates)
        raise MCPError(code=INVALID_PARAMS, message=f"unknown resource {uri[:200]!r}; the resources are: {known}.")

    def _read(self, spec: ResourceSpec, uri: str, values: dict[str, Any]) -> str:
        if any(not isinstance(v, str) or not v or "\0" in v or "/" in v or "\\" in v or v.startswith(".")
               for v in values.values()):
            raise MCPError(code=INVALID_PARAMS, message=f"malformed resource {uri[:200]!r}: an id is one path "
                                                        "segment, as the tools return it.")
        try:
            return redact.redact_text(_attr(spec.reader)(self.workspace, **values))  # imported on first read
        except UsageError as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc), data={"uri": uri}) from None
        except OSError as exc:
            log.warning("resource %s unreadable: %s", uri, exc)
            raise MCPError(code=INTERNAL_ERROR, message=f"{uri[:200]} could not be read: {exc.strerror or exc}.",
                           data={"uri": uri}) from None


def _tool(spec: ToolSpec, schemas: dict[str, Any]) -> Tool:
    return Tool(name=spec.name, description=spec.description, input_schema=schemas["input"],
                output_schema=schemas["output"], annotations=annotations(spec))


def annotations(spec: ToolSpec) -> ToolAnnotations:
    """The catalog's derived hints, as MCP reads them: readOnlyHint always; the others where they say more than
    MCP's defaults (destructive, not idempotent, open world: what a client assumes of a tool that states nothing)
    and mean something (destructive and idempotent only for a tool that is not read-only)."""
    hints = spec.hints
    changes = not hints.read_only
    return ToolAnnotations(read_only_hint=hints.read_only,
                           destructive_hint=False if changes and not hints.destructive else None,
                           idempotent_hint=True if changes and hints.idempotent else None,
                           open_world_hint=False if not hints.open_world else None)


def _progress(ctx: ServerRequestContext):
    started = time.monotonic()
    last = [0.0]

    async def progress(done: float, total: float | None, message: str) -> None:
        # MCP wants progress to increase with every notification, while engines nest counters
        # (runs, steps, seconds of a run): send elapsed seconds, the engine's figures go in the message.
        value = max(round(time.monotonic() - started, 2), last[0] + 0.01)
        last[0] = value
        figure = f"[{done:g}/{total:g}] " if total else ""
        try:
            await ctx.session.report_progress(value, None, f"{figure}{message}")
        except Exception:  # a client that went away must not fail the tool
            log.debug("progress notification failed", exc_info=True)

    return progress


async def _call(spec: ToolSpec, arguments: dict[str, Any], ctx: ToolContext) -> CallToolResult:
    """The engine's result, or its error verbatim; everything sent back passes one redaction pass.

    A child's output or a pasted log may carry tokens (tools/core/redact.py); the files on disk stay verbatim.
    """
    try:
        engine, inp = await prepare(spec, arguments)
    except ArgumentShapeError as exc:  # names and lengths, no value: the server's own secrets are all to hide
        return _error(await anyio.to_thread.run_sync(redact.redact_text, str(exc)))
    except UsageError as exc:
        return _error(await anyio.to_thread.run_sync(redact.redact_text, str(exc), arguments))
    except Exception as exc:
        return await _internal(spec, exc, redact.for_call(None))
    # Redaction scans every string of the arguments (now within their limits) and of the result: in a worker
    # thread, like validation. The call's secrets are remembered before it runs, for its logs read meanwhile.
    redactor = await anyio.to_thread.run_sync(redact.for_call, arguments)
    try:
        result = await run_engine(engine, inp, ctx)
    except UsageError as exc:
        return _error(await anyio.to_thread.run_sync(redactor.text, str(exc)))
    except Exception as exc:
        return await _internal(spec, exc, redactor)

    def render() -> CallToolResult:
        content: list[TextContent | ImageContent] = [
            TextContent(type="text", text=redactor.text(bounded(result.summary(), MAX_RESULT_CHARS // 2)))
        ]
        content.extend(_image(path) for path in result.images())
        return CallToolResult(content=content,
                              structured_content=redactor.data(result.model_dump(mode="json", by_alias=True)))

    return await anyio.to_thread.run_sync(render)


async def _internal(spec: ToolSpec, exc: Exception, redactor: redact.Redactor) -> CallToolResult:
    log.exception("tool %s failed", spec.name, exc_info=exc)
    return _error(await anyio.to_thread.run_sync(redactor.text, (
        f"rootcause internal error in {spec.name}: {type(exc).__name__}: {exc}. "
        "Processes it started were stopped; please report this with the arguments used.")))


def _image(path: Path) -> ImageContent:
    return ImageContent(type="image", data=base64.b64encode(Path(path).read_bytes()).decode("ascii"),
                        mime_type="image/png")


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=bounded(message, 4_000))], is_error=True)
