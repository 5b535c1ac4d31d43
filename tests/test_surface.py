"""server/surface.py: the one rendering of MCP wording into command-line wording."""

from __future__ import annotations

import pytest
from rootcause.server.surface import render, render_result


@pytest.mark.parametrize(("mcp", "cli"), [
    ("pass python=... for the project's", "pass --python ... for the project's"),
    ("fix the interpreter first (pass python=). ", "fix the interpreter first (pass --python). "),
    ("with the project's interpreter (python=.venv/bin/python) so", "with the project's interpreter "
                                                                   "(--python .venv/bin/python) so"),
    ("if you trust the file, pass allow_pickle=true (unpickling", "if you trust the file, pass --allow-pickle ("
                                                                 "unpickling"),
    ("a larger timeout_s or values=false may help", "a larger timeout_s or --no-values may help"),
    ("record it with session_id=<id>", "record it with --session-id <id>"),
    ("give a path inside the repository the server was started in (rootcause serve --root DIR)",
     "give a path inside the repository given by --root DIR (default: the current directory)"),
    ("then check_constraints, or read docs/tools/check_constraints.md", "then check-constraints, or read "
                                                                         "docs/tools/check_constraints.md"),
    ("loss=nan at step=30", "loss=nan at step=30"),  # not arguments: left alone
])
def test_cli_wording(mcp: str, cli: str) -> None:
    assert render(mcp, "cli") == cli
    assert render(mcp, "mcp") == mcp


def test_only_guidance_fields_of_a_result_are_rendered() -> None:
    from rootcause.tools.observe.evidence.observation import Observation

    fields = Observation.model_fields
    assert "interpreter_note" in fields and "error" in fields
    run = Observation.model_construct(error="KeyError: path=foo", interpreter_note="pass python=... here")
    shown = render_result(run, "cli")
    assert shown.interpreter_note == "pass --python ... here"
    assert shown.error == "KeyError: path=foo"  # what the run printed is quoted as it was
    assert run.interpreter_note == "pass python=... here"  # a copy: the result itself is untouched
    assert render_result(run, "mcp") is run
