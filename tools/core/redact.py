"""Secret redaction for text returned to a client (results, errors, run logs as resources).

Logs on disk stay verbatim; what the server sends back passes through `redact_data` /
`redact_text`, which replace:

- the values of environment variables whose names look secret (a name component is TOKEN,
  KEY, SECRET, PASSWORD... : HF_TOKEN, OPENAI_API_KEY, but not TOKENIZERS_PARALLELISM),
  taken from the server's environment and from the call's arguments (env dicts, NAME=value
  words in commands);
- common token shapes (Hugging Face, GitHub, OpenAI/Anthropic-style `sk-`, Slack, GitLab,
  AWS access key ids, `Bearer <token>`, credentials in URLs);
- the value of `NAME=value` assignments whose name looks secret, and `password=...`-style pairs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"
SECRET_COMPONENTS = frozenset({"TOKEN", "TOKENS", "KEY", "KEYS", "APIKEY", "SECRET", "SECRETS", "PASSWORD",
                               "PASSWD", "PASS", "PWD", "CREDENTIAL", "CREDENTIALS", "PAT", "AUTH"})
# Names whose values are never secret even though a component matches (PWD is the working directory).
NOT_SECRET = frozenset({"PWD", "OLDPWD"})
MIN_SECRET_VALUE = 8  # shorter values ("1", "true") would redact ordinary words everywhere

_SHAPES = re.compile(
    r"\bhf_[A-Za-z0-9]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bglpat-[A-Za-z0-9_\-]{20,}"
    r"|\bsk-[A-Za-z0-9_\-]{20,}"
    r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"
)
_BEARER = re.compile(r"(\b[Bb]earer\s+)[A-Za-z0-9._~+/=\-]{8,}")
# Every pattern runs in time linear in the text: no quantified part may start at many places and scan to the
# same far end. A scheme is at most 32 characters (an unbounded one rescanned `a.a.a...` from every letter),
# and a secret-looking key is found by its own words (an open prefix `\b[\w-]*?` before them tried every split
# of a hyphenated run: 20,000 characters of `a-a-...` took 74 s).
_URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]{0,31}://[^/\s:@]+:)[^/\s@]+(@)")
_ENV_ASSIGNMENT = re.compile(r"\b([A-Z][A-Z0-9_]*)(=)([\"']?)([^\s\"',;]+)")
_KEY_VALUE = re.compile(
    r"(?i)(?=[pshrbgai])((?:pass(?:word|wd)|secret|api[_\-]?key|access[_\-]?key|private[_\-]?key"
    r"|(?:access|auth|api|hf|refresh|id|bearer|github)[_\-]?token)"
    r"[\"']?\s*[=:]\s*[\"']?)([^\s\"',;}]+)"
)


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper in NOT_SECRET:
        return False
    return any(part in SECRET_COMPONENTS for part in re.split(r"[^A-Z0-9]+", upper))


def secret_values(env: Mapping[str, str] | None = None, arguments: Any = None) -> set[str]:
    """Values to hide: secret-named variables of `env` (default: the server's) and of the call's arguments."""
    found: set[str] = set()
    for name, value in (os.environ if env is None else env).items():
        if is_secret_name(name) and isinstance(value, str) and len(value) >= MIN_SECRET_VALUE:
            found.add(value)
    _collect(arguments, found)
    return found


def _collect(value: Any, found: set[str]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and is_secret_name(key) and isinstance(item, str) \
                    and len(item) >= MIN_SECRET_VALUE:
                found.add(item)
            _collect(item, found)
    elif isinstance(value, str):
        for match in _ENV_ASSIGNMENT.finditer(value):
            if is_secret_name(match.group(1)) and len(match.group(4)) >= MIN_SECRET_VALUE:
                found.add(match.group(4))
    elif isinstance(value, Iterable) and not isinstance(value, bytes):
        for item in value:
            _collect(item, found)


class Redactor:
    """Redacts one call's outputs: built once per call with the secret values in play."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        ordered = sorted({v for v in values if len(v) >= MIN_SECRET_VALUE}, key=len, reverse=True)
        self._values = re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None

    def text(self, text: str) -> str:
        if not text:
            return text
        if self._values is not None:
            text = self._values.sub(REDACTED, text)
        text = _SHAPES.sub(REDACTED, text)
        text = _BEARER.sub(rf"\1{REDACTED}", text)
        text = _URL_CREDENTIALS.sub(rf"\1{REDACTED}\2", text)
        text = _ENV_ASSIGNMENT.sub(_assignment, text)
        return _KEY_VALUE.sub(_key_value, text)

    def data(self, value: Any) -> Any:
        """The same structure with every string redacted (dict keys are kept: they are names)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.data(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.data(item) for item in value]
        return value


def _assignment(match: re.Match[str]) -> str:
    name, equals, quote, value = match.groups()
    if not is_secret_name(name) or value == REDACTED or value.startswith("<"):
        return match.group(0)
    return f"{name}{equals}{quote}{REDACTED}"


def _key_value(match: re.Match[str]) -> str:
    if match.group(2) == REDACTED or match.group(2).startswith("<"):
        return match.group(0)
    return f"{match.group(1)}{REDACTED}"


# Secret values seen in earlier calls' arguments (a run's env): later outputs that replay them (a session
# report, a run log read as a resource) are redacted too. Bounded; lives as long as the server process.
_SEEN: dict[str, None] = {}
_SEEN_LIMIT = 1_000


def remember(values: Iterable[str]) -> None:
    for value in values:
        _SEEN[value] = None
    while len(_SEEN) > _SEEN_LIMIT:
        _SEEN.pop(next(iter(_SEEN)))


def for_call(arguments: Any = None, extra: Iterable[str] = ()) -> Redactor:
    """A redactor for one tool call or resource read: the server's secrets, those given in the arguments
    (remembered for later reads), those seen in earlier calls, and `extra`."""
    given = secret_values({}, arguments)
    remember(given)
    return Redactor(secret_values(None) | given | set(_SEEN) | set(extra))


def redact_text(text: str, arguments: Any = None, extra: Iterable[str] = ()) -> str:
    return for_call(arguments, extra).text(text)


def redact_data(data: Any, arguments: Any = None) -> Any:
    return for_call(arguments).data(data)
