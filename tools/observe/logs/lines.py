"""The one line model of every log reader: raw log text to normalised lines.

Three steps, each in its own module:
- paste repair (`paste.raw_lines`): what a paste or a collector did to the whole text undone (HTML
  entities, JSON log records, an indented, quoted or double-spaced paste, newest-first order, a
  terminal's hard wrap);
- the prefix model (`prefixes.LineModel`): each line's stacked prefixes (ANSI codes, timestamps,
  rank and worker tags, logger formats) peeled off, its rank, worker, level and record start kept;
- traceback unfolding (`unfold`): tracebacks flattened onto one line unfolded, keeping the line's
  rank; interleaved unprefixed tracebacks told apart (`interleaved.demux`), two processes' writes glued into
  one line split (`interleaved.unglue`).
The lines of a Python traceback (header, frame, exception line) are defined once in `traceback_lines`.
tests/test_diagnosis_shapes.py checks that every shape keeps a corpus log's diagnosis.

API: `clean`, `raw_lines`, `Line`, `LineModel` (`detect`, `split`, `make`), `split_lines`,
`iter_lines`, `unflatten`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rootcause.tools.observe.logs.interleaved import demux, unglue
from rootcause.tools.observe.logs.paste import raw_lines
from rootcause.tools.observe.logs.prefixes import PREFIXES, Line, LineModel, Parsed, clean
from rootcause.tools.observe.logs.traceback_lines import TRACEBACK
from rootcause.tools.observe.logs.unfold import has_flattened, unflatten, unfold

__all__ = ["PREFIXES", "Line", "LineModel", "Parsed", "clean", "demux", "iter_lines", "raw_lines", "split_lines",
           "unflatten"]


def split_lines(text: str) -> list[Line]:
    """Every line of a text, normalised, with the model detected from the text itself."""
    raw = raw_lines(text)
    model = LineModel.detect(raw[:20_000])
    split = unglue([model.split(r) for r in raw])
    if TRACEBACK in text and any(has_flattened(t) for t, _ in split):
        split = unfold(split)
    return demux([model.make(i, t, parsed) for i, (t, parsed) in enumerate(split)])


def iter_lines(path: Path, sample: int = 2_000, encoding: str = "utf-8") -> Iterator[Line]:
    """A file's lines, streaming: the model is detected on its first `sample` lines."""
    with open(path, encoding=encoding, errors="replace", newline="") as fh:
        head: list[str] = []
        for raw in fh:
            head.extend(clean(raw).rstrip("\n").split("\n"))
            if len(head) >= sample:
                break
        model = LineModel.detect(head)
        index = 0
        for raw in head:
            yield model.line(index, raw)
            index += 1
        for chunk in fh:
            for raw in clean(chunk).rstrip("\n").split("\n"):
                yield model.line(index, raw)
                index += 1
