"""The MCPServer: registers every entry of server/catalog.py."""

from __future__ import annotations

import inspect
import logging
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from mcp_types import INVALID_PARAMS
from mcp_types import Resource as MCPResource
from pydantic import ConfigDict
from rootcause import prompts
from rootcause.server.catalog import INSTRUCTIONS, PROMPTS, RESOURCES, TOOLS, PromptSpec, ResourceSpec, ToolSpec
from rootcause.server.invoke import call_engine
from rootcause.tools.core import redact
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import MAX_RESULT_CHARS, bounded
from rootcause.tools.core.workspace import Workspace

log = logging.getLogger("rootcause")


def build_server(root: str | Path = ".") -> MCPServer:
    from rootcause.server.schemas import glossary, tool_schemas

    workspace = Workspace(Path(root))
    schemas = tool_schemas()
    tools = [_tool(workspace, spec, schemas["tools"][spec.name]) for spec in TOOLS if spec.name in schemas["tools"]]
    app = RootcauseServer(workspace, "rootcause", instructions=INSTRUCTIONS + glossary(schemas["shared"]),
                          version=_own_version(), log_level="WARNING", tools=tools)
    for prompt in PROMPTS:
        _register_prompt(app, prompt)
    for resource in RESOURCES:
        _register_resource(app, workspace, resource)
    return app


class RootcauseServer(MCPServer):
    """MCPServer plus what the catalog cannot say statically: the sessions as resources, prompt arguments."""

    def __init__(self, workspace: Workspace, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workspace = workspace

    async def list_resources(self) -> list[MCPResource]:
        from rootcause.server.readers import recent_sessions

        sessions = [
            MCPResource(uri=f"rootcause://sessions/{state.session_id}", name=f"session {state.session_id}",
                        description=redact.redact_text(state.symptom[:300]), mime_type="text/markdown")
            for state in recent_sessions(self.workspace)
        ]
        return [*await super().list_resources(), *sessions]

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None,
                         context: Context | None = None) -> Any:
        spec = next((p for p in PROMPTS if p.name == name), None)
        if spec is None:  # the SDK would log a traceback and answer an internal error
            known = ", ".join(p.name for p in PROMPTS)
            raise MCPError(code=INVALID_PARAMS, message=f"unknown prompt {name[:100]!r}; the prompts are: {known}.")
        given = set(arguments or {})
        unknown = sorted(given - set(spec.arguments))
        missing = [a for a in spec.arguments if a not in given]
        if unknown or missing:
            takes = ", ".join(spec.arguments) or "no arguments"
            problem = (f"does not take {', '.join(unknown)}" if unknown else f"needs {', '.join(missing)}")
            raise MCPError(code=INVALID_PARAMS, message=f"prompt {name} {problem}; it takes: {takes}.")
        return await super().get_prompt(name, arguments, context)


def _own_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rootcause")
    except PackageNotFoundError:
        return "0"


class _RawArguments(ArgModelBase):
    """Hands the client's arguments to the tool untouched: server/invoke.py validates them in our words."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def _tool(workspace: Workspace, spec: ToolSpec, schemas: dict[str, Any]) -> Tool:
    """The MCP tool from the catalog entry and its cached schemas; the engine is imported on the first call."""

    async def handler(ctx: Context, arguments: dict[str, Any]) -> CallToolResult:
        started = time.monotonic()
        last = [0.0]

        async def progress(done: float, total: float | None, message: str) -> None:
            # MCP wants progress to increase with every notification, while engines nest counters
            # (runs, steps, seconds of a run): send elapsed seconds, the engine's figures go in the message.
            value = max(round(time.monotonic() - started, 2), last[0] + 0.01)
            last[0] = value
            figure = f"[{done:g}/{total:g}] " if total else ""
            try:
                await ctx.report_progress(value, None, f"{figure}{message}")
            except Exception:  # a client that went away must not fail the tool
                log.debug("progress notification failed", exc_info=True)

        # Errors are returned as isError results carrying our message verbatim (raising ToolError
        # would prefix it with the SDK's generic "Error executing tool ...").
        # Everything sent back passes one redaction pass (tools/redact.py): a child's output or a
        # pasted log may carry tokens; the files on disk stay verbatim.
        redactor = redact.for_call(arguments)
        try:
            result = await call_engine(spec, arguments, ToolContext(workspace, progress))
        except UsageError as exc:
            return _error(redactor.text(str(exc)))
        except ToolError as exc:
            return _error(redactor.text(str(exc)))
        except Exception as exc:
            log.exception("tool %s failed", spec.name)
            return _error(redactor.text(
                f"rootcause internal error in {spec.name}: {type(exc).__name__}: {exc}. "
                "Processes it started were stopped; please report this with the arguments used."
            ))
        content: list[TextContent | ImageContent] = [
            TextContent(type="text", text=redactor.text(bounded(result.summary(), MAX_RESULT_CHARS // 2)))
        ]
        content.extend(_image(path) for path in result.images())
        return CallToolResult(
            content=content,
            structured_content=redactor.data(result.model_dump(mode="json", by_alias=True)),
        )

    hints = spec.hints
    return Tool(
        fn=handler, name=spec.name, description=spec.description, parameters=schemas["input"],
        fn_metadata=FuncMetadata(arg_model=_RawArguments, output_schema=schemas["output"]),
        is_async=True, context_kwarg="ctx",
        annotations=ToolAnnotations(read_only_hint=hints.read_only, destructive_hint=hints.destructive,
                                    idempotent_hint=hints.idempotent, open_world_hint=hints.open_world),
    )


def _image(path: Path) -> ImageContent:
    import base64

    return ImageContent(type="image", data=base64.b64encode(Path(path).read_bytes()).decode("ascii"),
                        mime_type="image/png")


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=bounded(message, 4_000))], is_error=True)


def _register_prompt(app: MCPServer, spec: PromptSpec) -> None:
    def render(**values: str) -> str:
        return prompts.render(spec.name, **values)

    render.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(a, inspect.Parameter.KEYWORD_ONLY, annotation=str) for a in spec.arguments],
        return_annotation=str,
    )
    render.__name__ = spec.name
    render.__annotations__ = {**{a: str for a in spec.arguments}, "return": str}
    app.prompt(name=spec.name, description=spec.description)(render)


def _register_resource(app: MCPServer, workspace: Workspace, spec: ResourceSpec) -> None:
    from rootcause.server.catalog import _attr

    params = [p.strip("{}") for p in spec.uri.split("/") if p.startswith("{")]

    def read(**values: str) -> str:
        try:
            return redact.redact_text(_attr(spec.reader)(workspace, **values))  # imported on first read
        except UsageError as exc:
            raise ResourceError(str(exc)) from None

    read.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=str) for p in params],
        return_annotation=str,
    )
    read.__name__ = spec.name
    read.__annotations__ = {**{p: str for p in params}, "return": str}
    app.resource(spec.uri, name=spec.name, description=spec.description, mime_type=spec.mime_type)(read)
