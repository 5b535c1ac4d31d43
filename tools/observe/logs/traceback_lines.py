"""The lines of a Python traceback, defined once for every reader: the header, a frame line, the exception line.

An exception's type is a class name, dotted or not, whose last part ends in one of the suffixes of
`exception_types.yaml` (Error, Exception, Warning, Interrupt, Exit, ...) or is one of its names. Two ways of
finding one, built from those same parts:
- `exception_line(text)`: the line IS an exception line (`Type: message`, `Type`, Ray's
  `RayTaskError(ValueError): ...`), anchored at the line's start. After a traceback's frames any class-like name
  counts too (`c10::Error`, `torch.Size`-style dotted names with a lower-case package).
- `exception_named(...)`: an exception NAMED somewhere in a text (a symptom, a flattened traceback's tail, a
  message), only by its suffix, as a word or with the message after its colon.
Frame lines: `FRAME` (a whole `File "x.py", line 3, in f` line), `FRAME_START` (a line starting with a frame's
location, code may follow it), `frame_location()` (the regex source, to build other shapes from), and
faulthandler's `File "x.py", line 3 in f` (`FAULTHANDLER_FRAME`).
All patterns are lookaround-free (RE2 can compile them).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

import yaml

TRACEBACK = "Traceback (most recent call last)"
"""The header's text (followed by `:` as Python prints it)."""
TRACEBACK_HEADER = re.compile(re.escape(TRACEBACK))
"""The header, found anywhere in a line (also inside a wrapper's message, after a prefix)."""


def frame_location(named: bool = True) -> str:
    """Regex source of a frame's location, `File "<file>", line <n>` (groups `file` and `line` when named)."""
    return r'File "(?P<file>[^"]+)", line (?P<line>\d+)' if named else r'File "[^"]+", line \d+'


FRAME = re.compile(rf"^\s*{frame_location()}(?:, in (?P<func>.+?))?\s*$")
"""A whole frame line of a traceback (groups `file`, `line`, `func`)."""
FRAME_START = re.compile(rf"^\s*{frame_location(named=False)}")
"""A line starting with a frame's location (its function and code may follow on the same line)."""
FAULTHANDLER_FRAME = re.compile(rf"^\s+{frame_location()} in (?P<func>\S+)")
"""faulthandler's frame line (`  File "x.py", line 3 in f`, no comma), in its dumps and Fatal Python errors."""


def _load() -> tuple[tuple[str, ...], tuple[str, ...], frozenset[str]]:
    data = yaml.safe_load(Path(__file__).with_name("exception_types.yaml").read_text(encoding="utf-8"))
    return tuple(data["suffixes"]), tuple(data["warnings"]), frozenset(data["names"])


SUFFIXES, WARNING_SUFFIXES, NAMES = _load()


def type_pattern(*, warnings: bool = True) -> str:
    """Regex source of an exception type named by its suffix (no groups): `[module.]*Class<suffix>`, something
    before the suffix (a bare `Error:` is prose as often as a class)."""
    suffixes = "|".join(map(re.escape, (s for s in SUFFIXES if warnings or s not in WARNING_SUFFIXES)))
    return rf"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:{suffixes})"


def short_name(name: str) -> str:
    """The class without its module (`torch.cuda.OutOfMemoryError` -> `OutOfMemoryError`, `c10::Error` -> `Error`)."""
    return re.split(r"\.|::", name)[-1]


def is_warning(name: str) -> bool:
    return short_name(name).endswith(WARNING_SUFFIXES)


def is_exception_type(name: str, *, by_suffix: bool = False) -> bool:
    """Whether a name is an exception's type: its class ends in a suffix or is one of the names; unless by_suffix,
    any class of a lower-case package (`torch.Size`-like) or of a C++ namespace (`c10::Error`) counts too."""
    if not name or len(name) > 120 or name.startswith(".") or name.endswith("."):
        return False
    short = short_name(name).lstrip("_")
    if not short or not (short[0].isupper() or "::" in name):
        return False
    if short.endswith(SUFFIXES) or short in NAMES:
        return True
    return not by_suffix and (("." in name and short[0].isupper() and name.split(".")[0].islower()) or "::" in name)


# Ray names the cause in the type: `ray.exceptions.RayTaskError(TypeError): ...`.
_LINE = re.compile(r"^\s*(?P<type>[A-Za-z_][\w.]*(?:::[\w:]+)?)(?:\((?P<inner>[A-Za-z_][\w.]*)\))?"
                   r"(?::(?:\s(?P<msg>.*)|$)|$)")


def exception_line(text: str, *, lone: bool = False) -> tuple[str, str] | None:
    """(type, message) of an exception line: `Type: message` or a lone `Type` from the line's start (indent
    allowed); None for any other line. `lone`: a line read outside a traceback, which must say more than a
    traceback's last line may: neither an empty `Type:` nor a wrapper's `Type(Cause):` (those end a traceback)."""
    m = _LINE.match(text)
    if not m or not is_exception_type(m.group("type")):
        return None
    message = (m.group("msg") or "").strip()
    if lone and (m.group("inner") or (not message and m.end("type") < len(text))):
        return None
    return m.group("type"), message


_BEFORE = {"word": r"\b", "space": r"(?:^|\s)", "start": "^"}
_AFTER = {"word": r"\b", "colon": r"(?::\s|:$|$)", "message": r"\s*:\s*(?P<message>[^\n]*)"}


@cache
def exception_named(before: Literal["word", "space", "start"] = "word",
                    after: Literal["word", "colon", "message"] = "word", *, warnings: bool = True) -> re.Pattern[str]:
    """An exception named by its suffix (group `type`) in a text. Before the name: `word` (anywhere, as a word),
    `space` (the text's start or whitespace: in a flattened traceback's code, `print("ValueError: x")` names none)
    or `start` (the text starts with it). After it: `word`, `colon` (`: ` or the text's end, where an exception
    line starts) or `message` (a colon and the message, group `message`: the rest of that line)."""
    return re.compile(rf"{_BEFORE[before]}(?P<type>{type_pattern(warnings=warnings)}){_AFTER[after]}")
