"""Input checks shared by the tools: package names (PEP 508), versions (PEP 440), regex arguments."""

from __future__ import annotations

import re
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import field_validator
from rootcause.tools.core.errors import UsageError

_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


def package_name(name: str) -> str:
    """The canonical name of a distribution; refuses specifiers, URLs, options and anything not PEP 508."""
    raw = (name or "").strip()
    if raw.startswith("-") or not _NAME.match(raw):
        raise UsageError(
            f"package {name[:100]!r} is not a distribution name.",
            "give a bare PEP 508 name like 'click' or 'transformers' (no version, extras, URL or option)",
        )
    return canonicalize_name(raw)


def version(text: str, what: str = "version") -> Version:
    raw = (text or "").strip()
    if raw.startswith("-"):
        raise UsageError(f"{what} {text[:100]!r} starts with '-'.", "give a PEP 440 version like 8.2.0")
    try:
        return Version(raw)
    except (InvalidVersion, ValueError):  # ValueError: a release number past Python's int-from-str limit
        raise UsageError(f"{what} {text[:100]!r} is not a PEP 440 version.",
                         "give a release like 8.2.0 or 2.1.0rc1") from None


def regex(pattern: str, argument: str, flags: int = 0) -> str:
    """The pattern when it compiles as a Python regex; refused naming the argument that carried it."""
    try:
        re.compile(pattern, flags)
    except (re.error, RecursionError, OverflowError) as exc:  # deep nesting overflows the parser's recursion
        reason = exc if isinstance(exc, re.error) else "nested too deeply"
        raise UsageError(f"{argument} {pattern[:100]!r} is not a valid regex: {reason}.",
                         "escape the characters ( ) [ ] { } . * + ? | \\ ^ $ to match them as text, e.g. "
                         "'shape \\(4, 8\\)'") from None
    return pattern


def regex_field(name: str, flags: int = 0) -> Any:
    """A pydantic field validator for the model that holds `name`: a given (non-blank) value must compile."""
    def check(cls: type, value: str | None) -> str | None:
        if isinstance(value, str) and value.strip():
            regex(value.strip(), name, flags)
        return value

    return field_validator(name)(check)
