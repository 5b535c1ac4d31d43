"""One difference between the good and the bad setup."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

Kind = Literal["code", "config", "env", "package", "launcher", "command"]
KINDS: tuple[str, ...] = ("code", "config", "launcher", "command", "env", "package")


class Difference(BaseModel):
    kind: Kind
    key: str = Field(description="What differs: a flattened config key, a file and hunk, a variable, a package.")
    good: str | None = Field(description="The value on the good side; null when absent there.")
    bad: str | None = Field(description="The value on the bad side; null when absent there.")
    suspect: bool = False
    why: str | None = Field(None, description="Why it is flagged suspect: the keyword or path it touches.")
    file: str | None = Field(None, description="The file the difference was found in, when there is one.")


def show(value: Any) -> str | None:
    """A config or argument value as text: strings as they are, everything else as JSON; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def diff_maps(
    kind: Kind, prefix: str, good: dict[str, Any], bad: dict[str, Any], file: str | None = None
) -> list[Difference]:
    """One Difference per key whose value differs or that exists on one side only, in key order."""
    out: list[Difference] = []
    for key in _ordered_union(good, bad):
        a, b = good.get(key, _MISSING), bad.get(key, _MISSING)
        if a == b and type(a) is type(b):
            continue
        out.append(Difference(kind=kind, key=f"{prefix}{key}", file=file,
                              good=None if a is _MISSING else show(a) if a is not None else "null",
                              bad=None if b is _MISSING else show(b) if b is not None else "null"))
    return out


_MISSING = object()


def _ordered_union(good: dict[str, Any], bad: dict[str, Any]) -> list[str]:
    """Keys in the good side's order, then the bad side's new keys in theirs (file order reads best)."""
    seen = dict.fromkeys(good)
    for key in bad:
        seen.setdefault(key, None)
    return list(seen)
