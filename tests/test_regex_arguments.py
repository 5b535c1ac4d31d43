"""Every regex argument is checked where it enters (issue 24, point 5): a pattern that does not compile is refused
by the tool's input model, naming the argument, before anything runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rootcause.server.catalog import TOOLS
from rootcause.tools.core.errors import UsageError

from tests.conftest import error_text, stdio_client, structured

REGEX_ARGUMENTS = ("expect", "disproof_regex")
"""The arguments compiled as a regex (verify_hypothesis' expect is a word or a regex)."""
BAD = "(unclosed"


def _tools_with(argument: str) -> list[str]:
    return [spec.name for spec in TOOLS if argument in spec.load()[1].model_fields]


def _arguments(tool: str, **given: str) -> dict[str, str]:
    """The tool's required arguments (each a string: 'x', the command one that would leave a file) and `given`."""
    from rootcause.server.invoke import input_schema

    schema = input_schema(next(spec for spec in TOOLS if spec.name == tool).load()[1])
    base = {name: "touch ran" if name == "command" else "fail" if name == "expect" else "x"
            for name in schema.get("required", [])}
    return {**base, **given}


def test_the_shared_check_names_the_argument() -> None:
    from rootcause.tools.core.validate import regex

    assert regex(r"shape \(4, 8\)", "expect") == r"shape \(4, 8\)"
    with pytest.raises(UsageError, match=r"^disproof_regex '\(unclosed' is not a valid regex: missing \)") as bad:
        regex(BAD, "disproof_regex", re.MULTILINE)
    assert bad.value.hint and "escape" in bad.value.hint
    with pytest.raises(UsageError, match="nested too deeply"):
        regex("(" * 1500 + ")" * 1500, "expect")  # the parser's recursion, not a crash


def test_every_regex_argument_is_known() -> None:
    """A new argument compiled as a regex gets a name ending in _regex (or is expect) and so is covered here."""
    found = {name for spec in TOOLS for name in spec.load()[1].model_fields
             if name == "expect" or name.endswith(("_regex", "_pattern"))}
    assert found == set(REGEX_ARGUMENTS)
    assert len(_tools_with("expect")) >= 7


@pytest.mark.anyio
@pytest.mark.slow
async def test_bad_regexes_are_refused_at_the_boundary_over_stdio(repo: Path) -> None:
    async with stdio_client(repo) as client:
        for tool in _tools_with("expect"):
            text = error_text(await client.call_tool(tool, _arguments(tool, expect=BAD)))
            assert text.startswith(f"{tool}: expect '(unclosed' is") and "valid regex" in text, text
            assert "Hint: escape" in text
        assert not (repo / "ran").exists(), "a refused call ran its command"

        # Both bad at once: each argument is named (the engine used to stop at the first one it checked).
        text = error_text(await client.call_tool("verify_hypothesis", _arguments(
            "verify_hypothesis", expect="shape [4", disproof_regex=BAD)))
        assert "expect 'shape [4' is neither" in text and "disproof_regex '(unclosed' is not a valid regex" in text
        text = error_text(await client.call_tool("verify_hypothesis", _arguments(
            "verify_hypothesis", disproof="still fails with /(bad/")))
        assert "the /pattern/ marked in disproof '(bad' is not a valid regex" in text
        assert not (repo / "ran").exists()

        # A valid regex still reaches the run, and escaped text is matched as text.
        (repo / "boom.py").write_text("raise ValueError('shape (4, 8) is wrong')\n")
        data = structured(await client.call_tool("reproduce", {"command": "python boom.py", "runs": 1,
                                                               "expect": r"shape \(4, 8\)"}))
        assert data["status"] == "reproduced" and data["matches_symptom"] is True
