"""A log file read a bounded piece at a time, whatever its line lengths.

A progress bar redraws itself with a carriage return and may never print a line break (a 300 MB
tqdm log is one line), and some files have no line break at all. A line is read at most
MAX_LINE characters at a time: a longer line comes in pieces that end at a carriage return
(whole progress-bar updates, each piece under its physical line's number), and a segment (the
text between two line breaks or carriage returns) longer than MAX_LINE keeps its first MAX_LINE
characters while the rest is skipped unread. Every cut is counted in `Cuts`, for the caller to state.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TextIO

MAX_LINE = 100_000
"""Characters of one segment read at most (a metric line is a few hundred)."""


@dataclass
class Cuts:
    """Segments longer than the cap: how many, the characters skipped, where the first one was."""
    segments: int = 0
    skipped: int = 0
    first_line: int | None = None
    """0-based physical line of the first cut segment."""
    longest: int = 0
    """Length of the longest cut segment (characters)."""

    def add(self, line: int, length: int, limit: int) -> None:
        if length <= limit:
            return  # it filled the piece exactly and ended there
        self.segments += 1
        self.skipped += length - limit
        self.longest = max(self.longest, length)
        if self.first_line is None:
            self.first_line = line

    def note(self, limit: int = MAX_LINE) -> str | None:
        """The cut in words, or None when nothing was cut."""
        if not self.segments:
            return None
        where = f"line {self.first_line + 1}" if self.first_line is not None else "a line"
        if self.segments == 1:
            return (f"{where} holds {self.longest:,} characters without a line break or carriage return: only its "
                    f"first {limit:,} were read ({self.skipped:,} skipped)")
        return (f"{self.segments:,} segments, the first on {where}, hold more than {limit:,} characters without a "
                f"line break or carriage return (the longest {self.longest:,}): only the first {limit:,} of each "
                f"were read ({self.skipped:,} characters skipped)")


_BLOCK = 1 << 20
"""Characters read at once while lines are short (split in one call: faster than a readline per line)."""


def pieces(fh: TextIO, cuts: Cuts, limit: int = MAX_LINE, start: int = 0) -> Iterator[tuple[str, int, bool]]:
    """(text, 0-based line number from `start`, first piece of its line) for a file opened with newline="\\n".

    A line of at most `limit` characters is one piece, as read (its carriage returns inside it); a
    longer one is several, each at most `limit` characters and cut at a carriage return, or a cut segment."""
    number = start
    tail = ""  # the start of a line the block ended in (shorter than `limit`)
    while True:
        block = fh.read(_BLOCK)
        if not block:
            if tail:
                yield tail, number, True
            return
        lines = (tail + block if tail else block).split("\n")
        tail = lines.pop()
        for line in lines:
            if len(line) <= limit:
                yield line, number, True
            else:
                yield from _long_line(_Pending(line + "\n", None), cuts, limit, number)
            number += 1
        if len(tail) >= limit:  # a long line going on past the block: the rest of it a piece at a time
            ended = yield from _long_line(_Pending(tail, fh), cuts, limit, number)
            if not ended:
                return
            tail = ""
            number += 1


class _Pending:
    """readline(n) over text already read (holding at most one line break, at its end), then over the file."""

    def __init__(self, text: str, fh: TextIO | None) -> None:
        self.text, self.fh = text, fh

    def readline(self, size: int) -> str:
        if not self.text:
            return self.fh.readline(size) if self.fh is not None else ""
        out, self.text = self.text[:size], self.text[size:]
        return out


def _long_line(fh: _Pending, cuts: Cuts, limit: int, number: int) -> Generator[tuple[str, int, bool], None, bool]:
    """The pieces of one line longer than `limit`; True when it ended with a line break, False at the file's end."""
    carry = ""  # the unfinished last segment of the line read so far
    skipping = -1  # length so far of the overlong segment being skipped, -1 when not skipping
    first = True
    while True:
        chunk = fh.readline(limit - len(carry))
        if not chunk:
            if carry:
                yield carry, number, first
            if skipping >= 0:
                cuts.add(number, skipping, limit)
            return False
        ended = chunk.endswith("\n")
        if ended:
            chunk = chunk[:-1]
        if skipping >= 0:
            resume = chunk.find("\r")
            if resume < 0:
                skipping += len(chunk)
                chunk = ""
            else:
                cuts.add(number, skipping + resume, limit)
                skipping, chunk = -1, chunk[resume:]
        text = carry + chunk
        carry = ""
        if not ended:
            cut = text.rfind("\r")
            if cut > 0:
                text, carry = text[:cut], text[cut:]
            elif len(text) >= limit and skipping < 0:
                skipping = len(text)  # one segment fills the whole piece: keep it, skip the rest of it
                text = text[:limit]
            else:
                carry, text = text, ""
        if text:
            yield text, number, first
            first = False
        if ended:
            if skipping >= 0:
                cuts.add(number, skipping, limit)
            if first:
                yield "", number, True  # a line that was all one skipped segment still counts as a line
            return True
