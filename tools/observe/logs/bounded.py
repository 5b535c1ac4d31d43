"""A log file read a bounded piece at a time, whatever its line lengths.

A progress bar redraws itself with a carriage return and may never print a line break (a 300 MB
tqdm log is one line), and some files have no line break at all. A line is read at most
MAX_LINE characters at a time: a longer line comes in pieces that end at a carriage return
(whole progress-bar updates, each piece under its physical line's number), and a segment (the
text between two line breaks or carriage returns) longer than MAX_LINE keeps its first MAX_LINE
characters while the rest is skipped unread. Every cut is counted in `Cuts`, for the caller to state.
"""

from __future__ import annotations

from collections.abc import Iterator
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


def pieces(fh: TextIO, cuts: Cuts, limit: int = MAX_LINE, start: int = 0) -> Iterator[tuple[str, int, bool]]:
    """(text, 0-based line number from `start`, first piece of its line) for a file opened with newline="\\n".

    A line of at most `limit` characters is one piece, as read (its carriage returns inside it); a
    longer one is several, each at most `limit` characters and cut at a carriage return, or a cut segment."""
    number = start
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
            return
        ended = chunk.endswith("\n")
        if ended:
            chunk = chunk[:-1]
        if not carry and skipping < 0 and ended and first:
            yield chunk, number, True  # the common case: a whole line at once
            number += 1
            continue
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
                skipping = -1
            number += 1
            first = True
