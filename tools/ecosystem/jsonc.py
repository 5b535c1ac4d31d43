"""JSON with comments and trailing commas (VS Code's mcp.json), read and edited in place.

json-five parses the text into a model that keeps every token with its offset; a change is a
splice of the original text (like VS Code's own jsonc-parser `modify`), so the user's comments,
trailing commas, indentation and other servers stay byte for byte. Only the edited value is
written fresh, as indented JSON.
"""

from __future__ import annotations

import json
from typing import Any

from rootcause.tools.core.errors import UsageError


def loads(text: str, what: str) -> Any:
    """The data in a JSONC text; UsageError naming the line and column of a syntax error."""
    import json5

    try:
        return json5.loads(text)
    except Exception as exc:  # json-five raises its own JSON5DecodeError (a ValueError) or lexer errors
        raise UsageError(f"{what} is not valid JSON with comments ({_position(exc)}).") from None


def set_member(text: str, path: tuple[str, ...], value: Any) -> str:
    """The text with the object member at `path` set to value (created with its parents when missing)."""
    import json5
    from json5.loader import ModelLoader

    model = json5.loads(text, loader=ModelLoader())
    node = model.value
    for depth, key in enumerate(path):
        pair = next((p for p in node.key_value_pairs if _key(p.key) == key), None)
        if pair is None:
            nested: Any = value
            for parent in reversed(path[depth + 1:]):
                nested = {parent: nested}
            return _insert(text, node, key, nested)
        if depth == len(path) - 1:
            start, end = _span(pair.value)
            indent = _indent_of(text, _span(pair.key)[0])
            return text[:start] + _render(value, indent) + text[end:]
        node = pair.value
        if type(node).__name__ != "JSONObject":
            raise UsageError(f"{'.'.join(path[:depth + 1])} is not an object.")
    raise AssertionError("empty path")


def _insert(text: str, obj: Any, key: str, value: Any) -> str:
    """Add `"key": value` as the last member of obj, keeping everything already there."""
    open_at, close_at = _span(obj)
    close_at -= 1  # the closing brace itself
    pairs = obj.key_value_pairs
    if pairs:
        indent = _indent_of(text, _span(pairs[-1].key)[0])
        last_end = _span(pairs[-1].value)[1]
        line_start = text.rfind("\n", 0, close_at) + 1
        if text[line_start:close_at].strip() == "" and line_start > last_end:
            # the closing brace sits on its own line: the new member goes on a line above it
            comma = "" if obj.trailing_comma is not None else ","
            trail = "," if obj.trailing_comma is not None else ""
            added = f"{indent}{json.dumps(key)}: {_render(value, indent)}{trail}\n"
            return text[:last_end] + comma + text[last_end:line_start] + added + text[line_start:]
        # on the line of the last member: right after its value, so a trailing comma the object has stays last
        one_line = "\n" not in text[open_at:close_at]
        rendered = json.dumps(value, ensure_ascii=False) if one_line else _render(value, indent)
        return text[:last_end] + f", {json.dumps(key)}: {rendered}" + text[last_end:]
    outer = _indent_of(text, open_at)
    indent = outer + "  "
    inside = text[open_at + 1:close_at]
    member = f"{json.dumps(key)}: {_render(value, indent)}"
    return text[:open_at + 1] + inside.rstrip(" ") + ("" if inside.endswith("\n") else "\n") + \
        f"{indent}{member}\n{outer}" + text[close_at:]


def _render(value: Any, indent: str) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + indent)


def _span(node: Any) -> tuple[int, int]:
    end_tok = getattr(node, "_end_tok", None) or node._tok
    return node._tok.index, end_tok.end


def _key(node: Any) -> str:
    return getattr(node, "characters", None) or getattr(node, "name", "")


def _indent_of(text: str, offset: int) -> str:
    line_start = text.rfind("\n", 0, offset) + 1
    prefix = text[line_start:offset]
    return prefix[: len(prefix) - len(prefix.lstrip())]


def _position(exc: Exception) -> str:
    lineno, colno = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    token = getattr(exc, "token", None)
    if lineno is None and token is not None:
        lineno, colno = getattr(token, "lineno", None), getattr(token, "colno", None)
    where = f"line {lineno}, column {colno}" if lineno else "position unknown"
    return f"{where}: {str(exc).splitlines()[0]}" if str(exc) else where
