"""The `rootcause` command: serve, session helpers, and one subcommand per tool.

Tool subcommands are generated from the catalog: the same input model as the MCP tool, every
argument as the same `--option` everywhere (lists repeat the option, dicts take NAME=value pairs
or JSON, objects take JSON), and each tool's one main argument (its command, else its path, else
its symptom, else its only required argument) also positionally: `rootcause diagnose-log job.log`,
`rootcause check-constraints "shape mismatch"`, `rootcause reproduce "pytest -x" --session-id ID`.
An argument the subcommand does not take is refused with the nearest option, or the whole call in
the right form. `--json` prints the exact structured result the MCP tool returns. Exit codes: 0 for
a call that worked (a reproduced failure included; output cut short by a closed pipe too), 2 for
bad input, 1 for an internal error.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import shlex
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
MAIN_ARGUMENTS = ("command", "path", "symptom")  # the first a tool takes is its positional argument


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


def main_argument(model: type) -> str | None:
    """The one argument a subcommand also takes positionally: command, else path, else symptom, else the only
    required argument (close-session's session id, capture-knowledge's kind); None when there is none."""
    fields = model.model_fields
    named = next((name for name in MAIN_ARGUMENTS if name in fields), None)
    if named is not None:
        return named
    required = [name for name, field in fields.items() if field.is_required()]
    return required[0] if len(required) == 1 else None


class _Once(argparse.Action):
    """Store a value; the main argument given both positionally and as its option is refused."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values is None:
            return
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{_flag(self.dest)} is given twice (positionally and as {_flag(self.dest)}); give it once.")
        setattr(namespace, self.dest, values)


def _add_field(parser: argparse.ArgumentParser, name: str, field: Any, main: bool = False,
               names: tuple[str, ...] = ()) -> None:
    kind = _base_type(field.annotation)
    origin = typing.get_origin(kind)
    required = " (required)" if field.is_required() else ""
    help_text = (render(field.description or "", "cli", names) + _default_text(field) + required).replace("%", "%%")
    if main:
        # positionally too: `rootcause reproduce CMD`, `... diagnose-log PATH` (`-` or nothing: standard input).
        # No argparse choices here (it would check them against the absent default): the model names them.
        parser.add_argument(name, nargs="?", default=argparse.SUPPRESS, action=_Once, metavar=name.upper(),
                            help=f"{help_text} (or {_flag(name)})")
    if _text_or_json(kind):
        parser.add_argument(_flag(name), dest=name, default=None, action=_Once,
                            help=f"{help_text} (text, or JSON list/object)")
    elif kind is bool:
        parser.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                            help=help_text)
    elif kind in (int, float, str):
        parser.add_argument(_flag(name), dest=name, type=kind, default=None, action=_Once if kind is str else None,
                            help=help_text)
    elif origin is typing.Literal:
        parser.add_argument(_flag(name), dest=name, choices=[str(c) for c in typing.get_args(kind)],
                            default=None, action=_Once, help=help_text)
    elif origin is list and _base_type(typing.get_args(kind)[0]) in (str, int, float):
        parser.add_argument(_flag(name), dest=name, action="append", default=None,
                            help=f"{help_text} (repeat for several)")
    elif origin is dict:
        parser.add_argument(_flag(name), dest=name, action="append", default=None, metavar="NAME=VALUE|JSON",
                            help=f"{help_text} (repeat NAME=VALUE, or one JSON object)")
    else:
        parser.add_argument(_flag(name), dest=name, default=None, metavar="JSON", help=f"{help_text} (JSON)")


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
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default: 8765; 0: a free one, printed)")

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
        main = main_argument(input_model)
        for name, field in input_model.model_fields.items():
            _add_field(tool_parser, name, field, main=name == main, names=tuple(input_model.model_fields))
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
    positional = main_argument(input_model) == name
    try:
        ctx.workspace.resolve(raw, what=_flag(name))
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

    return serve_http(app, args.host, args.port, str(root))


def main(argv: list[str] | None = None) -> int:
    """The console script: output cut short by a closed pipe (`| head -1`) ends quietly."""
    try:
        try:
            code = _main(sys.argv[1:] if argv is None else argv)
        except SystemExit as exit_:  # argparse's --help and --version
            code = exit_.code if isinstance(exit_.code, int) else EXIT_USAGE if exit_.code else EXIT_OK
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader took what it wanted (`| head -1`): the call worked, so the exit code is 0. Python would
        # report the pipe again when it flushes stdout at exit: point stdout at /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return code


def _main(argv: list[str]) -> int:
    tool_commands = {spec.name.replace("_", "-") for spec in TOOLS}
    chosen = next((token for token in argv if token in tool_commands), None)
    parser = build_parser(only_tool=chosen or "")
    args, extras = parser.parse_known_args(argv)
    if extras:
        spec = getattr(args, "tool", None)
        if spec is None:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        print(f"error: {_unrecognized(spec, args, extras)}", file=sys.stderr)
        return EXIT_USAGE
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


def _unrecognized(spec: ToolSpec, args: argparse.Namespace, extras: list[str]) -> str:
    """What the subcommand does not take, and the right form: the nearest option, or the whole call."""
    _, input_model, _ = spec.load()
    command = spec.name.replace("_", "-")
    flags = [_flag(name) for name in input_model.model_fields] + ["--json"]
    options = [token for token in extras if token.startswith("-") and token != "-"]
    if options:
        name = options[0].partition("=")[0]
        best = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
        hint = f"did you mean {best[0]}?" if best else f"its options: {', '.join(flags)}"
        return f"{command} has no option {name}; {hint} (rootcause {command} --help)"
    main = main_argument(input_model)
    given = ([str(getattr(args, main))] if main and getattr(args, main, None) is not None else []) + extras
    # the values in the order the subcommand once took them positionally: its required text, the command last
    earlier = [name for name, field in sorted(input_model.model_fields.items(), key=lambda item: item[0] == "command")
               if field.is_required() and _base_type(field.annotation) is not bool]
    if main is None:
        return (f"{command} takes no positional argument; give {', '.join(shlex.quote(v) for v in extras)} with its "
                f"option ({', '.join(flags[:-1])}).")
    if len(given) == len(earlier) and main in earlier:
        words = [f"{_flag(name)} {shlex.quote(value)}" for name, value in zip(earlier, given, strict=True)
                 if name != main]
        form = " ".join([f"rootcause {command}", *words, shlex.quote(given[earlier.index(main)])])
        return f"{command} takes one positional argument, {main.upper()}; the others are options: {form}"
    others = ", ".join(flag for flag in flags[:-1] if flag != _flag(main))
    return (f"{command} takes one positional argument, {main.upper()} (here {shlex.quote(given[0])}); give "
            f"{', '.join(shlex.quote(v) for v in extras)} with its option: {others}.")


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
