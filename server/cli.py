"""The `rootcause` command: serve, session helpers, and one subcommand per tool.

Tool subcommands are generated from the catalog: the same input model as the MCP tool,
required text fields as positional arguments, everything else as `--options` (lists
repeat the option, dicts take NAME=value pairs or JSON, objects take JSON). `--json`
prints the exact structured result the MCP tool returns. Exit codes: 0 for a call that
worked (a reproduced failure included), 2 for bad input, 1 for an internal error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any

from rootcause.server.catalog import TOOLS, ToolSpec
from rootcause.server.surface import render, render_result

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2
LOG_READERS = ("diagnose_log", "analyze_training_log")  # their path may be `-`, or piped standard input
LOG_PATHS = ("path", "compare_to")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _base_type(annotation: Any) -> Any:
    """Strip Optional/Annotated: the type a CLI value is parsed into."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _base_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _base_type(args[0])
    return annotation


def _text_or_json(kind: Any) -> bool:
    """A union that accepts plain text (e.g. a command as a string or an argv list)."""
    return typing.get_origin(kind) in (typing.Union, types.UnionType) and str in typing.get_args(kind)


def _default_text(field: Any) -> str:
    if field.is_required() or field.default_factory is not None or field.default in (None, False, "", [], {}):
        return ""
    default = field.default
    return f" (default: {default:g})" if isinstance(default, float) else f" (default: {default})"


def _positional(field: Any) -> bool:
    """Required text is given as a positional argument (`rootcause reproduce CMD`); the rest as --options."""
    kind = _base_type(field.annotation)
    return (kind is str or _text_or_json(kind)) and field.is_required()


def _add_field(parser: argparse.ArgumentParser, name: str, field: Any, reads_log: bool = False,
               names: tuple[str, ...] = ()) -> None:
    kind = _base_type(field.annotation)
    origin = typing.get_origin(kind)
    help_text = (render(field.description or "", "cli", names) + _default_text(field)).replace("%", "%%")
    if _positional(field):
        # a log path may come from standard input: `... | rootcause analyze-training-log` or PATH `-`
        parser.add_argument(name, help=help_text, nargs="?" if reads_log and name == "path" else None)
    elif _text_or_json(kind):
        parser.add_argument(_flag(name), dest=name, default=None, help=f"{help_text} (text, or JSON list/object)")
    elif kind is bool:
        parser.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                            help=help_text)
    elif kind in (int, float, str):
        parser.add_argument(_flag(name), dest=name, type=kind, default=None, required=field.is_required(),
                            help=help_text)
    elif origin is typing.Literal:
        parser.add_argument(_flag(name), dest=name, choices=[str(c) for c in typing.get_args(kind)],
                            default=None, required=field.is_required(), help=help_text)
    elif origin is list and _base_type(typing.get_args(kind)[0]) in (str, int, float):
        parser.add_argument(_flag(name), dest=name, action="append", default=None,
                            required=field.is_required(), help=f"{help_text} (repeat for several)")
    elif origin is dict:
        parser.add_argument(_flag(name), dest=name, action="append", default=None, metavar="NAME=VALUE|JSON",
                            required=field.is_required(), help=f"{help_text} (repeat NAME=VALUE, or one JSON object)")
    else:
        parser.add_argument(_flag(name), dest=name, default=None, metavar="JSON", required=field.is_required(),
                            help=f"{help_text} (JSON)")


def _collect(model: type, ns: argparse.Namespace) -> dict[str, Any]:
    from rootcause.tools.core.errors import UsageError

    arguments: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        value = getattr(ns, name, None)
        if value is None:
            continue
        kind = _base_type(field.annotation)
        origin = typing.get_origin(kind)
        if origin is dict:
            merged: dict[str, Any] = {}
            for item in value:
                if item.lstrip().startswith("{"):
                    merged.update(_json(name, item))
                elif "=" in item:
                    key, _, val = item.partition("=")
                    merged[key] = val
                else:
                    raise UsageError(f"--{name.replace('_', '-')} {item!r} is not NAME=VALUE or JSON.",
                                     "write e.g. --env NCCL_DEBUG=INFO")
            value = merged
        elif _text_or_json(kind):
            if value.lstrip().startswith(("[", "{")):
                value = _json(name, value)
        elif kind not in (str, int, float, bool) and origin not in (list, typing.Literal) and isinstance(value, str):
            value = _json(name, value)
        arguments[name] = value
    return arguments


def _json(name: str, text: str) -> Any:
    from rootcause.tools.core.errors import UsageError

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        hint = "quote the JSON for your shell"
        raise UsageError(f"--{name.replace('_', '-')} is not valid JSON: {exc}.", hint) from None


def _progress_sink():
    from rich.console import Console

    console = Console(stderr=True)

    async def progress(done: float, total: float | None, message: str) -> None:
        console.print(f"[dim]… {message}[/dim]")

    return progress


def run_tool(spec: ToolSpec, arguments: dict[str, Any], root: Path, as_json: bool) -> int:
    from rootcause.server.invoke import call_engine
    from rootcause.tools.core.context import ToolContext
    from rootcause.tools.core.errors import UsageError

    try:
        ctx = ToolContext.for_root(root, None if as_json else _progress_sink())
        if spec.name in LOG_READERS:
            arguments = _stdin_paths(spec, arguments, ctx)
        result = asyncio.run(call_engine(spec, arguments, ctx, surface="cli"))
    except UsageError as exc:
        print(f"error: {render(str(exc), 'cli')}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted; processes started by this call were stopped", file=sys.stderr)
        return 130
    if as_json:
        print(json.dumps(result.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False))
    else:
        print(render_result(result, "cli").summary())
    return EXIT_OK


def build_parser(only_tool: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; with only_tool, the other tools' subcommands get no arguments (their engines stay unimported)."""
    parser = argparse.ArgumentParser(
        prog="rootcause",
        description="A disciplined debugging protocol as MCP tools (and this CLI) for coding agents.",
    )
    parser.add_argument("--version", action="version", version=f"rootcause {_own_version()}")
    parser.add_argument("--root", default=None, help="the repository to work in (default: the current directory)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default)",
                           description="Run the MCP server for an MCP client (it speaks MCP on stdin/stdout); "
                                       "`rootcause install` adds it to a client.")
    serve.add_argument("--root", dest="serve_root", default=None, help="repository root (default: cwd)")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="(default: stdio)")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1, loopback)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default: 8765)")

    session = sub.add_parser("session", help="start, show or list debugging sessions")
    session_sub = session.add_subparsers(dest="session_command", metavar="ACTION", required=True)
    start = session_sub.add_parser("start", help="start a session (same as start-session)")
    start.add_argument("symptom")
    start.add_argument("--path-hint", dest="path_hint", choices=["quick", "full"], default=None)
    start.add_argument("--json", action="store_true", dest="as_json")
    show = session_sub.add_parser("show", help="print a session's Markdown report")
    show.add_argument("session_id")
    show.add_argument("--json", action="store_true", dest="as_json")
    session_sub.add_parser("list", help="list sessions, newest first: id, status, phase, age, symptom")
    _add_setup_commands(sub)

    for spec in TOOLS:
        command = spec.name.replace("_", "-")
        tool_parser = sub.add_parser(command, help=_first_sentence(spec.description), description=spec.description)
        tool_parser.set_defaults(tool=spec)
        if only_tool is not None and only_tool != command:
            continue
        try:
            _, input_model, _ = spec.load()
        except ModuleNotFoundError:
            continue
        # Positional order follows the model, except that the command comes last (`bisect-commits GOOD BAD CMD`).
        for name, field in sorted(input_model.model_fields.items(), key=lambda item: item[0] == "command"):
            _add_field(tool_parser, name, field, reads_log=spec.name in LOG_READERS,
                       names=tuple(input_model.model_fields))
        tool_parser.add_argument("--json", action="store_true", dest="as_json",
                                 help="print the exact structured result")
    return parser


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(": ")
    return head if dot else text


def _own_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rootcause")
    except PackageNotFoundError:
        return "0 (not installed)"


def _stdin_paths(spec: ToolSpec, arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """`-` as a log path (or no path and no text with piped input) reads standard input.

    The input is written to .rootcause/stdin/ first, so a log of any size is read streaming like a file.
    A log path the root does not hold is refused with the way to pipe it in instead.
    """
    from rootcause.tools.core.errors import UsageError

    for name in LOG_PATHS:
        if arguments.get(name) not in (None, "-"):
            _check_log_path(spec, name, arguments[name], ctx)
    wants = [name for name, value in arguments.items() if value == "-" and name in LOG_PATHS]
    piped = sys.stdin is not None and not sys.stdin.isatty()
    if not wants and arguments.get("path") is None and arguments.get("text") is None and piped:
        wants = ["path"]
    if not wants:
        return arguments
    if len(wants) > 1:
        raise UsageError("only one argument can read standard input.", "give the other one as a file path")
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("`-` reads the log from standard input, but nothing is piped in.",
                         "pipe the log in (cat job.log | rootcause ...) or give its path")
    import time

    target = ctx.workspace.state_dir("stdin") / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with open(target, "wb") as out:
        while chunk := sys.stdin.buffer.read(1 << 20):
            out.write(chunk)
    if target.stat().st_size == 0:
        target.unlink()
        raise UsageError("no log given: standard input is empty.", "give the log's path, or pipe the log in")
    return {**arguments, wants[0]: str(target)}


def _check_log_path(spec: ToolSpec, name: str, raw: str, ctx: Any) -> None:
    """The CLI reads logs inside --root only (as the server does): outside it, standard input still works."""
    import shlex

    from rootcause.tools.core.errors import UsageError

    _, input_model, _ = spec.load()
    positional = _positional(input_model.model_fields[name])
    try:
        ctx.workspace.resolve(raw, what=name.upper() if positional else _flag(name))
    except UsageError as exc:
        spelled = "-" if positional else f"{_flag(name)} -"
        message = str(exc).removesuffix(f" Hint: {exc.hint}") if exc.hint else str(exc)
        raise UsageError(message, f"give a path inside --root DIR, or read the file from standard input: "
                                  f"rootcause {spec.name.replace('_', '-')} {spelled} < {shlex.quote(raw)}") from None


def _serve(args: argparse.Namespace, root: Path) -> int:
    import logging

    from rootcause.tools.core.errors import UsageError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")  # to stderr
    try:
        from rootcause.server.app import build_server, serve_stdio

        app = build_server(root)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.transport == "stdio":
        if sys.stdin.isatty():
            print("rootcause serve speaks MCP over stdin/stdout and waits for an MCP client; to add it to one, run "
                  "`rootcause install --client claude|cursor|vscode` in your repository (Ctrl-C to stop).",
                  file=sys.stderr)
        serve_stdio(app)
        return EXIT_OK
    from rootcause.server.http import serve_http

    return serve_http(app, args.host, args.port)


def main(argv: list[str] | None = None) -> int:
    """The console script: output cut short by a closed pipe (`| head -1`) ends quietly."""
    try:
        try:
            code = _main(sys.argv[1:] if argv is None else argv)
        except SystemExit as exit_:  # argparse's --help and --version
            code = exit_.code if isinstance(exit_.code, int) else EXIT_USAGE if exit_.code else EXIT_OK
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit: point stdout at /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a process killed by it
    return code


def _main(argv: list[str]) -> int:
    tool_commands = {spec.name.replace("_", "-") for spec in TOOLS}
    chosen = next((token for token in argv if token in tool_commands), None)
    parser = build_parser(only_tool=chosen or "")
    args = parser.parse_args(argv)
    root = Path(getattr(args, "serve_root", None) or args.root or os.getcwd())
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    if args.command == "serve":
        return _serve(args, root)
    if args.command == "session":
        return _session(args, root)
    if args.command in ("install", "init", "demo"):
        return _setup_command(args)
    spec: ToolSpec = args.tool
    try:
        _, input_model, _ = spec.load()
        arguments = _collect(input_model, args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run_tool(spec, arguments, root, args.as_json)


class SessionReportSpec(ToolSpec):
    """`rootcause session show`: the report without closing, a CLI view of close_session's engine module."""

    def load(self) -> tuple[Any, type, type]:
        from rootcause.tools.engines.close_session import SessionIdInput, SessionReport, session_report

        return session_report, SessionIdInput, SessionReport


def _session(args: argparse.Namespace, root: Path) -> int:
    by_name = {t.name: t for t in TOOLS}
    if args.session_command == "start":
        return run_tool(by_name["start_session"], {"symptom": args.symptom, "path_hint": args.path_hint}, root,
                        args.as_json)
    if args.session_command == "show":
        report = SessionReportSpec("session_report")
        return run_tool(report, {"session_id": args.session_id}, root, args.as_json)
    import time

    from rootcause.server.readers import recent_sessions
    from rootcause.tools.core.workspace import Workspace

    for state in recent_sessions(Workspace(root), limit=sys.maxsize):
        current = next((p for p in state.phases if p.status == "in_progress"), None)
        phase = f"phase {current.number} {current.name}" if current else "no phase in progress"
        symptom = " ".join(state.symptom.split())
        symptom = symptom if len(symptom) <= 70 else symptom[:69] + "…"
        print(f"{state.session_id}  {state.status:<7}  {phase:<24}  {_age(time.time() - state.created_ts):>8}  "
              f"{symptom}")
    return EXIT_OK


def _age(seconds: float) -> str:
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def _add_setup_commands(sub: Any) -> None:
    install = sub.add_parser("install", help="configure an MCP client (Claude Code, Cursor, VS Code) for a repository",
                             description="Write or merge the client's project MCP config with a `rootcause serve` "
                                         "entry and install the rootcause-debug skill. Other servers are kept; "
                                         "running it twice changes nothing.")
    install.add_argument("--client", required=True, choices=["claude", "cursor", "vscode", "all"])
    install.add_argument("--repo", default=None, help="the repository to configure (default: the current directory)")
    install.add_argument("--dry-run", action="store_true", help="print what would be written and write nothing")
    install.add_argument("--scope", choices=["project", "user"], default="project",
                         help="project: the repository's config files, holding this machine's absolute paths "
                              "(default); user: the client's user-level config and skill folder, nothing in the "
                              "repository, the server working in the folder the client opens")
    init = sub.add_parser("init", help="create starter .agents/knowledge files (never overwrites)")
    init.add_argument("--repo", default=None, help="the repository (default: the current directory)")
    demo = sub.add_parser("demo", help="debug a bundled example project end to end through the MCP server")
    demo.add_argument("--keep", action="store_true", help="keep the example repository and print its path")


def _setup_command(args: argparse.Namespace) -> int:
    from rootcause.tools.core.errors import UsageError

    try:
        if args.command == "install":
            from rootcause.tools.ecosystem.install import install

            plan = install(args.repo, args.client, dry_run=args.dry_run, scope=args.scope)
            print(plan.summary(dry_run=args.dry_run))
            return EXIT_OK
        if args.command == "init":
            from rootcause.tools.ecosystem.scaffold import init_knowledge

            print(init_knowledge(args.repo).summary())
            return EXIT_OK
        from rootcause.tools.ecosystem.demo.driver import run_demo

        return run_demo(keep=args.keep)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
