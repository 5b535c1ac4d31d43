"""The lines of a Python traceback, defined once (tools/observe/logs/traceback_lines.py): every reader of a log or a
symptom recognises the same exception names, from the one suffix list in exception_types.yaml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rootcause.tools.judge.classify import classify
from rootcause.tools.observe.evidence.expect import from_symptom
from rootcause.tools.observe.keywords import extract_keywords
from rootcause.tools.observe.logs.lines import split_lines, unflatten
from rootcause.tools.observe.logs.traceback_lines import (
    FAULTHANDLER_FRAME,
    FRAME,
    FRAME_START,
    SUFFIXES,
    TRACEBACK_HEADER,
    WARNING_SUFFIXES,
    exception_line,
    exception_named,
    is_exception_type,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_every_reader_names_an_exception_by_every_suffix_of_the_data(suffix: str) -> None:
    name = f"Widget{suffix}"
    assert exception_line(f"pkg.errors.{name}: boom") == (f"pkg.errors.{name}", "boom")
    assert exception_named().search(f"the run ends with {name} on rank 3")["type"] == name
    assert extract_keywords(f"{name}: the widget went away")[0] == name
    assert from_symptom(f"{name}: the widget went away", None, []).exception_types == [name]
    # A warning quoted in free text is not its error; any other suffix is.
    assert (classify(f"{name}: boom").basis == "error_rules") == (suffix not in WARNING_SUFFIXES)
    # A flattened traceback's last frame: its code, then the exception line.
    flat = f'Traceback (most recent call last): File "/w/a.py", line 3, in f x = load() {name}: boom'
    assert unflatten(flat)[-2:] == ["    x = load()", f"{name}: boom"]
    # Two interleaved unprefixed tracebacks: each ends at its own exception line.
    interleaved = ("Traceback (most recent call last):\nTraceback (most recent call last):\n"
                   '  File "/w/a.py", line 3, in f\n  File "/w/b.py", line 4, in g\n    x = load()\n    y = load()\n'
                   f"{name}: first\n{name}: second\n")
    workers = {ln.text: ln.worker for ln in split_lines(interleaved)}
    assert workers[f"{name}: first"] == "tb1" and workers[f"{name}: second"] == "tb2"


def test_an_exception_line_and_a_name_inside_a_text_are_variants_of_one_definition() -> None:
    assert exception_line("    ValueError: bad width") == ("ValueError", "bad width")
    assert exception_line("KeyboardInterrupt") == ("KeyboardInterrupt", "")
    assert exception_line("StopIteration") == ("StopIteration", "")  # one of the names without a suffix
    assert exception_line("ray.exceptions.RayTaskError(TypeError): x")[0] == "ray.exceptions.RayTaskError"
    assert exception_line("c10::Error: CUDA error") == ("c10::Error", "CUDA error")
    assert exception_line("Epoch 3: loss 2.1") is None
    # A line outside a traceback must say more: not an empty `Type:`, not a wrapper naming its cause.
    assert exception_line("ChildFailedError:", lone=True) is None
    assert exception_line("ray.exceptions.RayTaskError(TypeError): x", lone=True) is None
    assert exception_line("RuntimeError: boom", lone=True) == ("RuntimeError", "boom")
    assert is_exception_type("torch.Size") and not is_exception_type("torch.Size", by_suffix=True)

    quoted = 'print("ValueError: not raised") TypeError: raised'
    assert exception_named("space", "colon").search(quoted)["type"] == "TypeError"
    assert exception_named("word", "colon").search(quoted)["type"] == "ValueError"
    assert exception_named("start", "colon").match("torch.OutOfMemoryError: CUDA out of memory")
    assert not exception_named("start", "colon").match("  torch.OutOfMemoryError: indented")
    m = exception_named("word", "message").search("it fails: `RuntimeError: shape '[2, 3]' is invalid`\nthen")
    assert (m["type"], m["message"]) == ("RuntimeError", "shape '[2, 3]' is invalid`")
    assert not exception_named(warnings=False).search("UserWarning: deprecated")
    assert not exception_named().search("Error: prose names no class")  # a class has a name before its suffix


def test_the_traceback_header_and_the_frame_lines() -> None:
    assert TRACEBACK_HEADER.search("[rank1]: Traceback (most recent call last):")
    frame = FRAME.match('  File "/w/train.py", line 12, in <module>')
    assert frame and (frame["file"], frame["line"], frame["func"]) == ("/w/train.py", "12", "<module>")
    assert FRAME.match('  File "/w/train.py", line 12, in f    x = g()') is not None  # the function takes the rest
    assert FRAME_START.match('File "/w/train.py", line 12 x = g()') and not FRAME.match('File "/w/a.py" line 1')
    dump = FAULTHANDLER_FRAME.match('  File "/w/train.py", line 9 in wait_for_peer')
    assert dump and dump["func"] == "wait_for_peer" and not FRAME.match('  File "/w/a.py", line 9 in f')


# Where a copy of the definitions would hide: a suffix alternation (not a report form's `(?:Exception|Error)[ _]?Type`
# label), the header's words, a frame's location regex.
_COPIES = re.compile(r"(?:Error|Exception)\|(?:Error|Exception|Warning|Interrupt|Exit|Failure|Timeout)[|)](?!\[ _\])|"
                     r"most recent call last|File \"\(\?P<file>|File \"\[\^\"\]")
# The RE2 pre-filter of big logs matches bytes in one automaton with its other markers.
_ALLOWED = {"tools/observe/logs/traceback_lines.py", "tools/observe/diagnosis/streaming.py"}


def test_no_reader_keeps_its_own_copy_of_the_definitions() -> None:
    sources = [p for folder in ("tools", "server") for p in (ROOT / folder).rglob("*.py")
               if p.relative_to(ROOT).as_posix() not in _ALLOWED]
    copies = [f"{path.relative_to(ROOT)}:{n}" for path in sources
              for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if _COPIES.search(line)]
    assert copies == []
