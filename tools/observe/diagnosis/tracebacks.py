"""Python tracebacks in a stream of lines, with their chains.

Handles the standard format (also indented, as inside torchrun's error reports and DCP's
CheckpointException), Python 3.11+ caret lines, "[Previous line repeated N more times]",
and the two chain separators. In a chain the first exception is the original cause and
later ones wrap it ("During handling of the above exception, another exception occurred",
"The above exception was the direct cause of the following exception").
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.models import Frame
from rootcause.tools.observe.diagnosis.text import Line
from rootcause.tools.observe.logs.traceback_lines import FRAME, TRACEBACK, TRACEBACK_HEADER, exception_line

_TB_STANDARD = re.compile(rf"{re.escape(TRACEBACK)}:")
SEPARATOR = re.compile(
    r"^\s*(During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)\s*$"
)
# rich (accelerate, typer) and IPython tracebacks: no "File" lines, frames in their own formats.
_LOOSE_FRAMES = (
    re.compile(r"^│\s*(?P<file>\S+\.py):(?P<line>\d+) in (?P<func>\S+)\s*│?\s*$"),
    re.compile(r"^\s*File (?P<file>[^\s,]+\.py):(?P<line>\d+), in (?P<func>[\w.<>]+)"),
    re.compile(r"^(?P<file>\S+\.py) in (?P<func>[\w.<>]+)\("),
)
# A traceback printed inside another exception's message (its cause), not a separate failure that follows.
_EMBEDDED = re.compile(r"Original Traceback|\(RANK \d+\)|terminated with the following error|"
                       r"Caught \w+ in DataLoader worker|exited with (?:error|exit) code -?\d+ and exception:|"
                       r"(?:because of|with) the following (?:error|exception)|(?:^|\s)[Ee]xception:\s*$|"
                       r"Caused by:?\s*$|raised an exception:?\s*$")
_BOX = re.compile(r"^\s*[│╭╰─╮╯]")
_BANNER = re.compile(r"!{2,}\s*(?:\w+ )*?(?P<kind>Exception|[A-Z]?\w*Error)\b[^!]*!{2,}\s*(?P<message>\S.*)$")
_WRAPPED_NAME = re.compile(r"^[\w<>.]{1,40}\s*$")  # the rest of a cut name, at column 0 (code lines are indented)
_CARET = re.compile(r"^\s*[\^~\s]+$")
_REPEATED = re.compile(r"^\s*(\[Previous line repeated \d+ more times?\]|\.\.\.(\s*<\d+ lines>)?|\.\.\.)\s*$")
# A line that starts a new log record, or the runtime's own report of an abort that follows the exception
# (`terminate called after throwing ...`, glibc's `double free`, the shell's `Segmentation fault (core dumped)` at
# exit): message continuation stops there.
_MARKUP = "*_`>"
_RULE = re.compile(r"^\s*([-=_])\1{9,}\s*$")
_LOG_RECORD = re.compile(r"^\s*(\[?\d{4}-\d\d-\d\d[ T_]|\[?[IWEF]\d{4} \d\d:|\[(INFO|WARNING|ERROR|DEBUG)\b|"
                         r"(INFO|WARNING|ERROR|DEBUG|CRITICAL)[: ]|[WE]\d{4} |_{5,}|Exit code:|FAILED |PASSED |"
                         r"terminate called (?:after throwing|without an active|recursively)|Fatal Python error: |"
                         r"(?:Segmentation fault|Aborted|Bus error|Illegal instruction)(?: \(core dumped\))?\s*$|"
                         r"\*\*\* Error in |double free or corruption|free\(\): invalid)")


def unmarked(text: str) -> str:
    """A pasted line without the Markdown around it (`**RuntimeError: ...**`, a backticked or quoted line)."""
    return text.strip().strip(_MARKUP).strip()


def _pasted_exception_line(text: str) -> tuple[str, str] | None:
    found = exception_line(text)
    if found or not (text.lstrip()[:1] in tuple(_MARKUP) or text.rstrip()[-1:] in tuple(_MARKUP)):
        return found
    return exception_line(unmarked(text))


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _frames(lines: list[Line], j: int) -> tuple[list[Frame], int]:
    frames: list[Frame] = []
    n = len(lines)
    while j < n:
        text = lines[j].text
        m = FRAME.match(text)
        if m:
            func = m.group("func")
            j += 1
            if func and j < n and len(text) >= 60 and _WRAPPED_NAME.match(lines[j].text) \
                    and not exception_line(lines[j].text, lone=True):
                func += lines[j].text.strip()  # a terminal's hard wrap cut the function's name (`<module` / `>`)
                j += 1
            frames.append(Frame(file=m.group("file"), line=int(m.group("line")), function=func))
            if j < n and lines[j].text.strip() and not FRAME.match(lines[j].text) \
                    and (_indent(lines[j].text) > _indent(text) or not exception_line(lines[j].text)) \
                    and not TRACEBACK_HEADER.search(lines[j].text):
                j += 1
            while j < n and lines[j].text.strip() and _CARET.match(lines[j].text):
                j += 1
            continue
        if _REPEATED.match(text):
            j += 1
            continue
        if not text.strip() and j + 1 < n and FRAME.match(lines[j + 1].text):
            j += 1  # Spyder and some notebooks print a blank line between frames
            continue
        break
    return frames, j


def frames_after(lines: list[Line], j: int, within: int = 6) -> list[Frame]:
    """The frames a report prints after its error (ComfyUI's Error Report: `## Stack Trace` and a fence, then the
    frames): the first frame line within a few lines of j, up to the end of that run of frames."""
    for k in range(j, min(len(lines), j + within)):
        if FRAME.match(lines[k].text):
            return _frames(lines, k)[0]
    return []


def message_lines(lines: list[Line], j: int, first: str, limit: int = 40) -> tuple[str, int, bool]:
    """The exception message (first line plus continuation lines), its end, and whether a traceback
    embedded in the message follows (DataLoader's "Original Traceback", DCP's per-rank tracebacks,
    mp.spawn's "-- Process N terminated with the following error:")."""
    parts = [first]
    n = len(lines)
    blank_ok = not first
    while j < n and len(parts) < limit:
        text = lines[j].text
        if not text.strip():
            if blank_ok and j + 1 < n and lines[j + 1].text.strip() and not _RULE.match(lines[j + 1].text):
                j += 1
                blank_ok = False
                continue
            break
        if TRACEBACK_HEADER.search(text):
            message = "\n".join(parts).strip()
            return message, j, bool(_EMBEDDED.search(text) or _EMBEDDED.search(message))
        if SEPARATOR.match(text):
            break
        if FRAME.match(text):
            # Frames right after a message belong to it: a worker's traceback a wrapper embeds (Ray).
            return "\n".join(parts).strip(), j, len(parts) > 0

        # A logger relaying stderr makes every line a record: an indented one still continues the message.
        if _LOG_RECORD.match(text) or (lines[j].record and not text[:1].isspace()):
            break
        parts.append(text.strip() if not text.startswith("\t") else text.rstrip())
        blank_ok = False
        j += 1
    return "\n".join(parts).strip(), j, False


def _loose(lines: list[Line], j: int) -> tuple[list[Frame], int] | None:
    """A rich or IPython traceback from j: its frames and the index of its unindented error line."""
    frames: list[Frame] = []
    for k in range(j, min(len(lines), j + 1500)):
        text = lines[k].text
        for pattern in _LOOSE_FRAMES:
            m = pattern.match(text)
            if m:
                line = m.groupdict().get("line")
                frames.append(Frame(file=m.group("file"), line=int(line) if line else None, function=m.group("func")))
                break
        else:
            if text and not text[0].isspace() and not _BOX.match(text) and exception_line(text):
                return frames, k
    return None


def parse_tracebacks(stream: list[Line], chain_base: int) -> Iterator[FoundError]:
    """Every traceback of one rank's stream (in order), chain ids starting at chain_base."""
    n = len(stream)
    i = 0
    chain = chain_base - 1
    link = 0
    pending_link = False
    embedded = 0  # > 0: the next tracebacks are embedded in the last exception's message (its causes)
    while i < n:
        text = stream[i].text
        headerless = bool(FRAME.match(text))
        if headerless or TRACEBACK_HEADER.search(text):
            start = i
            found = None
            if headerless or _TB_STANDARD.search(text):
                # A pasted excerpt often starts at the frames, without the "Traceback" header.
                frames, j = _frames(stream, i if headerless else i + 1)
                k = j
                # Unprefixed junk from another process may sit between the frames and the error line.
                while k < n and k <= j + 4:
                    found = _pasted_exception_line(stream[k].text)
                    if found or TRACEBACK_HEADER.search(stream[k].text):
                        break
                    k += 1
                if not found and frames and not headerless and not any(ln.text.strip() for ln in stream[j:]):
                    # The log ends inside the traceback (cut off): the frames are all there is, unless a banner
                    # just above said the message (ComfyUI's `!!! Exception during processing !!! <message>`).
                    chain += 1
                    said = next((b for ln in reversed(stream[max(0, start - 3):start])
                                 if (b := _BANNER.search(ln.text))), None)
                    yield FoundError(type=said.group("kind") if said else "IncompleteTraceback",
                                     message=said.group("message").strip() if said else "",
                                     line=stream[j - 1].index, rank=stream[j - 1].rank, frames=frames, chain=chain,
                                     start=stream[start - 1 if said else start].index, end=stream[j - 1].index)
                    break
            else:
                loose = _loose(stream, i + 1)
                frames, j = ([], i + 1) if loose is None else loose
                k = j
                found = exception_line(stream[k].text) if loose is not None else None
            if not found:
                i = max(j, i + 1)
                pending_link = False
                continue
            message, end, embeds = message_lines(stream, k + 1, found[1])
            if embedded:
                this_link = -1000 + embedded
                embedded += 1
            elif pending_link and chain >= chain_base:
                link += 1
                this_link = link
            else:
                chain += 1
                link = this_link = 0
            if embeds and not embedded:
                embedded = 1
            elif not embeds:
                embedded = 0
            pending_link = False
            yield FoundError(type=found[0], message=message, line=stream[k].index, rank=stream[k].rank,
                             frames=frames, chain=chain, link=this_link, start=stream[start].index,
                             end=stream[max(end - 1, k)].index)
            i = end
            continue
        if SEPARATOR.match(text):
            pending_link = chain >= chain_base
        elif text.strip():
            pending_link = False
            embedded = 0
        i += 1
