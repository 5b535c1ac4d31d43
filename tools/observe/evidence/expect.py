"""What "the failure" is: the one matcher that says whether a failing run shows the expected failure.

Two yardsticks, one rule for every tool:
- `expect` (a tool argument): a text or a regex the failure must show, searched in the run's
  output and its diagnosis line (case-insensitive; a string that is not a valid regex is refused where it
  enters, each tool's input model validating it with `regex_field("expect", EXPECT_FLAGS)`);
- a session's symptom: its category and keywords (from the session's triage), and the group of the
  log diagnosed in the session (diagnose_log), when there is one: a run sharing that group shows the
  reported failure, "at the same call site" when its signature is the log's too.
  An exception type the symptom names (AttributeError) must be the run's root error or appear as
  `Type:` in its output (a generic one, RuntimeError, quoted with its message also needs most of the
  message's words); otherwise the run's category must be the symptom's (or a close one), or
  most of the symptom's keywords must appear in the failure's text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.validate import regex
from rootcause.tools.observe.logs.traceback_lines import exception_named, short_name

if TYPE_CHECKING:
    from rootcause.tools.observe.diagnosis import Diagnosis

MAX_EXPECT = 2_000
EXPECT_FLAGS = re.IGNORECASE | re.MULTILINE
EXPECT_TEXT = ("A text or regex the expected failure shows (e.g. \"KeyError: 'console_scripts'\"); a run failing "
               "otherwise is a different failure.")
"""The first sentence of every tool's `expect` description (one entry in the tool list's glossary)."""
_EXCEPTION_NAME = exception_named()
_GENERIC = {"python_exception", "test_failure"}
_CLOSE = [{"hang", "distributed_error"}, {"nonfinite", "gradient_explosion"}]
_QUOTED_ERROR = exception_named("word", "message", warnings=False)
_WORD = re.compile(r"[a-z_][a-z0-9_]{2,}")
_GENERIC_TYPES = {"Exception", "Error", "RuntimeError", "ValueError", "TypeError", "AssertionError", "OSError"}


class Yardstick(BaseModel):
    """The expected failure: from an `expect` argument or from a session's symptom."""

    source: Literal["expect", "session"]
    text: str = Field(description="The expect text / regex, or the session's symptom.")
    pattern: str | None = None
    category: str | None = None
    keywords: list[str] = Field(default_factory=list)
    exception_types: list[str] = Field(default_factory=list)
    error_messages: dict[str, str] = Field(default_factory=dict, description="Type -> the message the symptom "
                                                                             "quotes after `Type:`.")
    group: str | None = None
    """The group of the log diagnosed in the session (the reported failure), when there is one."""
    signature: str | None = None

    def describe(self) -> str:
        if self.source == "expect":
            return f"expect /{self.text[:200]}/"
        parts = [f"category {self.category}"] if self.category and self.category not in _GENERIC else []
        if self.exception_types:
            parts.insert(0, " or ".join(self.exception_types))
        elif self.keywords:
            parts.append("keywords " + ", ".join(self.keywords))
        if self.group:
            parts.append(f"the diagnosed log's group `{self.group}`")
        return "the session's symptom (" + ("; ".join(parts) or self.text[:120]) + ")"


def from_expect(expect: str | None) -> Yardstick | None:
    """A yardstick from an `expect` argument (None when not given)."""
    if expect is None:
        return None
    text = expect.strip()
    if not text:
        raise UsageError("expect is empty.", "give a text or regex the failure must show, or omit expect")
    if len(text) > MAX_EXPECT:
        raise UsageError(f"expect is {len(text)} characters, over {MAX_EXPECT}.", "give the error's key line only")
    return Yardstick(source="expect", text=text, pattern=regex(text, "expect", EXPECT_FLAGS))


def from_symptom(symptom: str, category: str | None, keywords: list[str]) -> Yardstick | None:
    """A yardstick from a session's symptom, its category and keywords (None when they say nothing)."""
    types = list(dict.fromkeys(short_name(m.group("type")) for m in _EXCEPTION_NAME.finditer(symptom)))
    messages = {short_name(m.group("type")): m.group("message").strip() for m in _QUOTED_ERROR.finditer(symptom)}
    if not types and (not category or category in _GENERIC) and not keywords:
        return None
    return Yardstick(source="session", text=symptom, category=category, keywords=keywords, exception_types=types,
                     error_messages=messages)


def yardstick(expect: str | None, session_state: object | None) -> Yardstick | None:
    """expect when given, else the session's symptom when there is a session, else None."""
    given = from_expect(expect)
    if given is not None or session_state is None:
        return given
    stick = from_symptom(getattr(session_state, "symptom", ""), getattr(session_state, "category", None),
                         list(getattr(session_state, "keywords", []) or []))
    pasted = _pasted_diagnosis(session_state)
    if pasted is not None and pasted.get("group"):
        stick = stick or Yardstick(source="session", text=getattr(session_state, "symptom", ""))
        stick.group, stick.signature = pasted["group"], pasted.get("signature")
    return stick


def _pasted_diagnosis(session_state: object) -> dict | None:
    """The diagnosis of the latest log diagnosed in the session (diagnose_log's evidence), as recorded."""
    for ev in reversed(list(getattr(session_state, "evidence", []) or [])):
        data = getattr(ev, "data", None) or {}
        if getattr(ev, "tool", None) == "diagnose_log" and isinstance(data.get("diagnosis"), dict):
            return data["diagnosis"]
    return None


def _words(message: str) -> list[str]:
    """The message's words (numbers, shapes and sizes left out: they change between occurrences)."""
    return list(dict.fromkeys(_WORD.findall(message.lower())))


def matches(stick: Yardstick, diagnosis: Diagnosis | None, output: str) -> tuple[bool | None, str]:
    """Whether a failing run shows the expected failure, and what it showed instead.

    None when the symptom is too vague to say no: no error type, no specific category, and its
    prose keywords are not in the failure ("the script breaks on the new machine").
    """
    shown = diagnosis.one_line() if diagnosis is not None else ""
    if stick.source == "expect":
        assert stick.pattern is not None
        compiled = re.compile(stick.pattern, EXPECT_FLAGS)
        found = compiled.search(output) or compiled.search(shown)
        return (True, f"shows /{stick.text[:120]}/: {found.group(0)[:120]!r}") if found else (
            False, f"no line matches /{stick.text[:120]}/")
    if stick.group and diagnosis is not None and diagnosis.group == stick.group:
        where = "the same call site" if diagnosis.signature == stick.signature else "another call site"
        return True, f"the diagnosed log's failure (same group, {where})"
    category = diagnosis.category if diagnosis is not None else None
    same_category = bool(category) and (category == stick.category or
                                        any({category, stick.category} <= g for g in _CLOSE))
    if stick.exception_types:
        root = (diagnosis.exception_type or "").rsplit(".", 1)[-1] if diagnosis else ""
        for name in stick.exception_types:
            if not (name == root or re.search(rf"(?m)\b{re.escape(name)}:", output)):
                continue
            # A generic type (RuntimeError) quoted with its message: the message must be there too.
            words = _words(stick.error_messages.get(name, "")) if name in _GENERIC_TYPES else []
            text = f"{shown}\n{output}".lower()
            if words and sum(w in text for w in words) * 2 < len(words):
                return False, f"shows {name}, but not its message ({' '.join(words[:6])})"
            return True, f"shows {name}"
        return False, f"no {' or '.join(stick.exception_types)} in the failure"
    if stick.category and stick.category not in _GENERIC and same_category:
        return True, f"category {category}"
    if stick.keywords:
        text = f"{shown}\n{output}".lower()
        hits = [k for k in stick.keywords if k.lower() in text]
        if len(hits) * 2 > len(stick.keywords) or (len(stick.keywords) == 1 and hits):
            return True, f"shows the keywords {', '.join(hits)}"
        if not stick.category or stick.category in _GENERIC:
            return None, "the symptom names no error type or category to compare the failure with"
        return False, f"category {category or '?'}; keywords found: {', '.join(hits) or 'none'}"
    if stick.group and (not stick.category or stick.category in _GENERIC):
        return False, f"not the diagnosed log's failure: group {diagnosis.group if diagnosis else '?'}"
    return False, f"category {category or '?'}, not {stick.category}"
