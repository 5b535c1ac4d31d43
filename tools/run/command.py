"""Commands as the tools take them: split, validated, resolved to a program, given a run id."""

from __future__ import annotations

import os
import re
import secrets
import shlex
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace

_ENV_NAME_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
MAX_ENV_NAME = 255


def _pieces(comments: bool) -> re.Pattern[str]:
    """The pieces a POSIX shell word is made of, one alternative each (none can match what another does)."""
    plain = r"""[^ \t\r\n'"\\#]+""" if comments else r"""[^ \t\r\n'"\\]+"""
    return re.compile(
        rf"""(?P<space>[ \t\r\n]+)|(?P<plain>{plain})|\\(?P<escaped>.)|'(?P<single>[^']*)'"""
        r'''|"(?P<double>[^"\\]*(?:\\.[^"\\]*)*)"|(?P<comment>#[^\n]*\n?)''', re.DOTALL)


_PIECES = {False: _pieces(False), True: _pieces(True)}
_ESCAPED_IN_DOUBLE = re.compile(r'\\([\\"])')
_OPEN_ESCAPE = re.compile(r'\\\Z|"[^"\\]*(?:\\.[^"\\]*)*\\\Z', re.DOTALL)


def split_words(text: str, comments: bool = False) -> list[str]:
    """`shlex.split(text, comments=comments)`, word for word and error for error, in linear time.

    shlex grows each word one character at a time (`token += c`), quadratic in a word's length (a
    300,000-character word: 1.3 s; 3,000,000: over two minutes). Here a word is joined from regex pieces.
    """
    words: list[str] = []
    word: list[str] = []
    started = False
    at = 0
    for match in _PIECES[comments].finditer(text):
        if match.start() != at:
            break  # an unclosed quote or a trailing backslash: nothing matches there
        at = match.end()
        kind = match.lastgroup
        if kind in ("space", "comment"):
            if started:
                words.append("".join(word))
                word, started = [], False
            continue
        started = True  # a quoted empty string is a word
        if kind == "plain":
            word.append(match.group())
        elif kind == "double":
            word.append(_ESCAPED_IN_DOUBLE.sub(r"\1", match.group(kind)))
        else:
            word.append(match.group(kind))
    if at != len(text):
        raise ValueError("No escaped character" if _OPEN_ESCAPE.match(text, at) else "No closing quotation")
    if started:
        words.append("".join(word))
    return words


def parse_command(command: str | list[str], shell: bool = False) -> tuple[list[str], dict[str, str]]:
    """argv and env from a command: a string is split like a shell would, leading NAME=value go to env."""
    if isinstance(command, list):
        words = [str(w) for w in command]
        if shell:
            words = ["/bin/sh", "-c", shlex.join(words)]
            return words, {}
    else:
        if not command.strip():
            raise UsageError("command is empty.", "give the command that reproduces the failure, e.g. 'pytest -x'")
        if "\x00" in command:
            raise UsageError("command contains a NUL byte.", "remove it")
        if shell:
            return ["/bin/sh", "-c", command], {}
        try:
            words = split_words(command)
        except ValueError as exc:
            raise UsageError(f"command cannot be split into words: {exc}.", "balance the quotes") from None
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("="):
        name, _, value = words[0].partition("=")
        if not valid_env_name(name):
            break
        env[name] = value
        words = words[1:]
    if not words or not words[0].strip():
        raise UsageError("command is empty.", "give the command that reproduces the failure, e.g. 'pytest -x tests/'")
    return words, env


def valid_env_name(name: str) -> bool:
    return 0 < len(name) <= MAX_ENV_NAME and set(name) <= _ENV_NAME_CHARS and not name[0].isdigit()


class PreparedCommand(BaseModel):
    """A validated command as the tools take it: argv, env (caller's then the command's NAME=value), cwd."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    cwd_rel: str


def prepare_command(
    command: str | list[str], shell: bool, env: dict[str, str], cwd: str, workspace: Workspace
) -> PreparedCommand:
    """The one place a tool's command arguments are checked and turned into argv/env/cwd."""
    argv, command_env = parse_command(command, shell)
    for name in env:
        if not valid_env_name(name):
            shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name):,} characters)"
            raise UsageError(f"env name {shown} is not a valid variable name.",
                             f"use NAME=value with NAME like FOO_1, at most {MAX_ENV_NAME} characters")
    folder = workspace.resolve(cwd, must_exist=True, what="cwd")
    if not folder.is_dir():
        raise UsageError(f"cwd {cwd!r} is not a directory.", "give a folder inside the root")
    return PreparedCommand(argv=argv, env={**env, **command_env}, cwd=folder,
                           cwd_rel=os.path.relpath(folder, workspace.root))


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def run_dir(workspace: Workspace, run_id: str) -> Path:
    if not run_id or "/" in run_id or run_id.startswith(".") or len(run_id) > 64:
        raise UsageError(f"run id {run_id!r} is malformed.", "use a run_id from a reproduce result")
    path = workspace.root / ".rootcause" / "runs" / run_id
    if not (path / "log.txt").is_file():
        raise UsageError(f"unknown run {run_id!r}.", "use a run_id from a reproduce result")
    return path


def resolve_program(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    from shutil import which

    program = argv[0]
    if os.sep in program:
        path = Path(program) if Path(program).is_absolute() else cwd / program
        if not path.exists():
            raise UsageError(f"command not found: {program} (no such file under {cwd}).", "check the path")
        return str(path)
    found = which(program, path=env.get("PATH"))
    if not found:
        raise UsageError(f"command not found: {program}.",
                         "install it, give its full path, or pass python= for the project's interpreter")
    return found
