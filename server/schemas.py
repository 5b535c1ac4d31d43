"""The tool schemas a client sees: compact JSON Schema made from the pydantic models, cached on disk.

tools/list is in the agent's context every session, so every schema is post-processed the same way
(whatever fields the models gain): titles go (the property name says it), `anyOf` of plain types
becomes a type list and `anyOf` of choices one `enum`, `default: null` goes, and a description that
several tools repeat word for word, or a nested object several tools take, is written once in the
server's instructions. Output schemas describe the structuredContent completely (every field of every
nested model, each model once under `$defs`), types and shapes without descriptions: a client validates
the result with them, the agent reads the result itself (tools/list stays within 60,000 characters,
25,000 of them what the model reads: tests/test_tool_list.py). Generating the schemas needs every engine
module imported (about 300 ms), so they are cached per rootcause source state: the server answers
tools/list without importing an engine; an engine is imported on its first call.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from rootcause.server.catalog import TOOLS, ToolSpec

SCHEMA_FORMAT = 4
MAX_SECONDS = 7 * 24 * 3600  # every argument named *_s is a duration in seconds: > 0 and at most 7 days
CACHE_KEEP = 8
_PACKAGES = ("tools", "server", "prompts")
_LIMITS = Path(__file__).with_name("limits.yaml")


def compact(schema: dict[str, Any], *, output: bool = False) -> dict[str, Any]:
    """A JSON Schema with the same meaning for validation and less text."""
    return _schema(schema, output)


def compact_input(schema: dict[str, Any]) -> dict[str, Any]:
    """What a caller needs to build a call: names, types, bounds, choices, defaults, one sentence each.

    The model's docstring goes (the tool's description is the catalog's); `X | None` becomes X (a
    caller omits an optional argument rather than sending null; the validation still accepts null);
    defaults of false or empty go (that is what omitting means). Every `*_s` number is a duration: > 0 and
    at most MAX_SECONDS. An argument of several types is an `anyOf` with one type per branch (a type
    list is legal JSON Schema, but clients that map schemas onto a single-type dialect reject it).
    """
    schema = compact(schema)
    schema.pop("description", None)
    for definition in schema.get("$defs", {}).values():
        definition.pop("description", None)
    for properties in _property_maps(schema):
        for prop in properties.values():
            kinds = prop.get("type")
            if isinstance(kinds, list) and "null" in kinds:
                rest = [k for k in kinds if k != "null"]
                prop["type"] = rest[0] if len(rest) == 1 else rest
            if isinstance(prop.get("enum"), list) and None in prop["enum"] and len(prop["enum"]) > 1:
                prop["enum"] = [choice for choice in prop["enum"] if choice is not None]
            if isinstance(prop.get("anyOf"), list) and {"type": "null"} in prop["anyOf"]:
                rest = [option_ for option_ in prop.pop("anyOf") if option_ != {"type": "null"}]
                prop.update(rest[0] if len(rest) == 1 else {"anyOf": rest})
            if "default" in prop and prop["default"] in (False, [], {}, ""):
                del prop["default"]
            if isinstance(prop.get("description"), str):
                prop["description"] = first_sentence(prop["description"])
        for name, prop in properties.items():
            if name.endswith("_s"):
                _duration_bounds(prop)
            properties[name] = _one_type_each(prop)
            _size_limits(properties[name], limit_of(name))
    return schema


@functools.cache
def _limit_table() -> dict[str, dict[str, int]]:
    import yaml

    return yaml.safe_load(_LIMITS.read_text(encoding="utf-8"))


def limit_of(name: str) -> dict[str, int]:
    """{"text": characters, "items": entries} for an argument (server/limits.yaml, else its defaults)."""
    table = _limit_table()
    return {**table["default"], **table.get(name, {})}


def _size_limits(node: Any, limit: dict[str, int]) -> None:
    """Every string, list and object of an argument gets its bound (the model's own, when lower, stays)."""
    if not isinstance(node, dict):
        return
    kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if "string" in kinds:
        node["maxLength"] = min(node.get("maxLength", limit["text"]), limit["text"])
    if "array" in kinds:
        node["maxItems"] = min(node.get("maxItems", limit["items"]), limit["items"])
        _size_limits(node.get("items"), limit)
    if "object" in kinds and isinstance(node.get("additionalProperties"), dict):
        node["maxProperties"] = min(node.get("maxProperties", limit["items"]), limit["items"])
        _size_limits(node["additionalProperties"], limit)
    for option in node.get("anyOf", ()):
        _size_limits(option, limit)


def _duration_bounds(prop: dict[str, Any]) -> None:
    if prop.get("type") not in ("number", "integer"):
        return
    if "minimum" not in prop and "exclusiveMinimum" not in prop:
        prop["exclusiveMinimum"] = 0
    prop["maximum"] = min(prop.get("maximum", MAX_SECONDS), MAX_SECONDS)


def _one_type_each(prop: dict[str, Any]) -> dict[str, Any]:
    """`{type: [string, array], items: X}` -> `{anyOf: [{type: string}, {type: array, items: X}]}`."""
    kinds = prop.get("type")
    if not isinstance(kinds, list) or len(kinds) < 2:
        return prop
    specific = {key for kind in kinds for key in _TYPE_SPECIFIC.get(kind, ())}
    out = {key: value for key, value in prop.items() if key != "type" and key not in specific}
    out["anyOf"] = [{"type": kind, **{key: prop[key] for key in _TYPE_SPECIFIC.get(kind, ()) if key in prop}}
                    for kind in kinds]
    return out


def compact_output(schema: dict[str, Any]) -> dict[str, Any]:
    """The whole result: every field and its type, nested models once each under `$defs`, nothing left open.

    Descriptions, defaults and `required` go: a result always carries every field of its model (it is dumped
    whole), so listing them would say nothing the properties do not, at about 4,600 characters of tools/list.
    """
    return {"type": "object", **_object_root(compact(schema, output=True))}


def _property_maps(schema: dict[str, Any]):
    yield schema.get("properties", {})
    for definition in schema.get("$defs", {}).values():
        yield definition.get("properties", {})


_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!etc)(?<!vs)[.!?](?=\s+[A-Z`]|$)")


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence ('e.g. x' and 'v1.2' do not)."""
    match = _SENTENCE_END.search(text)
    return text[: match.end()] if match else text


def _schema(node: Any, output: bool) -> Any:
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and (value is None or output)):
            continue
        if output and key in ("description", "examples", "required"):
            continue
        if key in ("properties", "$defs", "patternProperties"):
            out[key] = {name: _schema(sub, output) for name, sub in value.items()}
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = [_schema(sub, output) for sub in value]
        elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
            out[key] = _schema(value, output)
        else:
            out[key] = value
    if ("enum" in out or "const" in out) and isinstance(out.get("type"), str):
        del out["type"]  # the choices say it
    return _merge_choices(_merge_nullable(out))


def _merge_choices(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf` of choices (and null) -> one `enum`: `[{enum: [a, b]}, {enum: [c]}, {type: null}]` -> `{enum: [a, b, c,
    null]}`, the same instances valid."""
    options = node.get("anyOf")
    if not isinstance(options, list) or len(options) < 2:
        return node
    choices: list[Any] = []
    for option in options:
        if option == {"type": "null"}:
            choices.append(None)
        elif isinstance(option, dict) and set(option) == {"enum"}:
            choices.extend(option["enum"])
        elif isinstance(option, dict) and set(option) == {"const"}:
            choices.append(option["const"])
        else:
            return node
    out = {k: v for k, v in node.items() if k != "anyOf"}
    out["enum"] = [c for n, c in enumerate(choices) if all(c != d or type(c) is not type(d) for d in choices[:n])]
    return out


def _merge_nullable(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf` of plainly typed options -> one schema with a type list, when no keyword is ambiguous.

    `[{type: string}, {type: array, items: ...}]` -> `{type: [string, array], items: ...}` and
    `[{type: X}, {type: null}]` -> `{type: [X, null]}`: the same instances validate, since each merged
    keyword (items, minimum, ...) applies only to its own type.
    """
    options = node.get("anyOf")
    if not isinstance(options, list) or len(options) < 2:
        return node
    kinds: list[str] = []
    merged: dict[str, Any] = {}
    for option in options:
        kind = option.get("type") if isinstance(option, dict) else None
        if not isinstance(kind, str) or kind in kinds:
            return node
        extra = {k: v for k, v in option.items() if k != "type"}
        if any(k not in _TYPE_SPECIFIC.get(kind, ()) or k in merged for k in extra):
            return node
        kinds.append(kind)
        merged.update(extra)
    out = {k: v for k, v in node.items() if k != "anyOf"}
    out.update(merged)
    out["type"] = kinds
    return out


_TYPE_SPECIFIC = {
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems"),
    "object": ("properties", "additionalProperties", "required", "minProperties", "maxProperties"),
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "integer": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
}

SHARED_MIN_TOOLS = 2
_PHASE_NOTE = re.compile(r"\s*\(advances Phase \d\)")


def tool_schemas() -> dict[str, Any]:
    """{"tools": {tool: {"input", "output"}}, "shared": {argument: description}}, cached while current."""
    path = _cache_path()
    if path is not None:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    # Modules imported before the key was taken may be older than the files the key describes (a
    # long-lived process whose sources were edited): only a generation that imported them now is cached.
    fresh = not any(spec.input.partition(":")[0] in sys.modules for spec in TOOLS)
    schemas = generate()
    if path is not None and fresh:
        _write(path, schemas)
    return schemas


def generate(specs: tuple[ToolSpec, ...] = TOOLS) -> dict[str, Any]:
    """Import every tool's models and build its compact schemas (the slow path).

    An argument description several tools repeat (session_id, python, cwd, timeout_s...) is written
    once, in "shared" (the server's instructions carry it), rather than in every tool.
    """
    tools: dict[str, dict[str, Any]] = {}
    for spec in specs:
        try:
            _, input_model, output_model = spec.load()
        except ModuleNotFoundError as exc:
            if not spec.engine.startswith((f"{exc.name}:", f"{exc.name}.")):
                raise
            continue  # a tool whose engine is not in this build is not served
        tools[spec.name] = {
            "input": compact_input(input_model.model_json_schema(by_alias=True)),
            "output": compact_output(output_model.model_json_schema(by_alias=True, mode="serialization")),
        }
    return {"tools": tools, "shared": _share_descriptions(tools)}


def _share_descriptions(tools: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Move descriptions that SHARED_MIN_TOOLS or more tools repeat word for word into one glossary.

    An argument (session_id, python, cwd, timeout_s...) whose wording several tools repeat is
    described once; a tool that words it differently keeps its own. A nested object several tools
    take (`slurm`) is spelled out once too. Types, bounds and defaults stay in every schema.
    """
    shared_defs = _share_definitions(tools)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for schema in tools.values():
        for name, prop in schema["input"].get("properties", {}).items():
            if "description" in prop:
                groups.setdefault((name, _PHASE_NOTE.sub("", prop["description"])), []).append(prop)
    shared: dict[str, str] = {}
    for (name, text), props in sorted(groups.items(), key=lambda item: -len(item[1])):
        if len(props) >= SHARED_MIN_TOOLS and name not in shared:
            shared[name] = text
            for prop in props:
                del prop["description"]
    return {**shared, **shared_defs}


def _share_definitions(tools: dict[str, dict[str, Any]]) -> dict[str, str]:
    """A nested object that several tools take (the same $defs entry) is spelled out once, in the glossary.

    Each tool's schema keeps the argument as an object; the server validates its fields either way.
    """
    seen: dict[str, list[dict[str, Any]]] = {}
    for schema in tools.values():
        for name, definition in schema["input"].get("$defs", {}).items():
            seen.setdefault(name + json.dumps(definition, sort_keys=True), []).append(schema["input"])
    shared: dict[str, str] = {}
    for key, holders in seen.items():
        if len(holders) < SHARED_MIN_TOOLS:
            continue
        def_name = next(name for name in holders[0]["$defs"] if key == name + json.dumps(
            holders[0]["$defs"][name], sort_keys=True))
        definition = holders[0]["$defs"][def_name]
        ref = {"$ref": f"#/$defs/{def_name}"}
        for schema in holders:
            del schema["$defs"][def_name]
            if not schema["$defs"]:
                del schema["$defs"]
            for argument, prop in schema["properties"].items():
                if prop.get("$ref") == ref["$ref"] or ref in prop.get("anyOf", ()):
                    description = prop.pop("description", None) or definition.get("description", "")
                    prop.pop("anyOf", None)
                    prop.pop("$ref", None)
                    prop["type"] = "object"  # optional: omitted rather than null, as compact_input does
                    fields = "; ".join(f"{field} ({describe(sub, definition, sizes=True)}"
                                       + (f", default {sub['default']}" if "default" in sub else "") + ")"
                                       + (f": {sub['description'].rstrip('.')}" if sub.get("description") else "")
                                       for field, sub in definition.get("properties", {}).items())
                    shared[argument] = f"{description} An object with: {fields}".strip()
    return shared


def describe(prop: dict[str, Any], schema: dict[str, Any], sizes: bool = False) -> str:
    """A property's JSON Schema in words: 'an integer from 1 to 20', "one of 'quick', 'full'".

    sizes: also the length limits ('text of at most 4,096 characters', 'a list of at most 1,000 ...').
    """
    if "$ref" in prop:
        target = schema.get("$defs", {}).get(prop["$ref"].rsplit("/", 1)[-1], {})
        fields = ", ".join(target.get("properties", {}))
        return f"an object with {fields}" if fields else "an object"
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " or ".join(describe(option_, schema, sizes) for option_ in prop[key])
    if "enum" in prop:
        return "one of " + ", ".join(repr(v) for v in prop["enum"])
    if "const" in prop:
        return repr(prop["const"])
    kinds = prop.get("type")
    if isinstance(kinds, list):
        return " or ".join(describe({**prop, "type": k}, schema, sizes) for k in kinds)
    words = {"string": "text", "integer": "an integer", "number": "a number", "boolean": "true or false",
             "null": "null", "object": "an object", "array": "a list"}
    text = words.get(kinds, "a value")
    if kinds == "array" and isinstance(prop.get("items"), dict):
        if sizes and "maxItems" in prop:
            text = f"a list of at most {prop['maxItems']:,} entries, each {describe(prop['items'], schema, sizes)}"
        else:
            text = f"a list of {_plural(describe(prop['items'], schema))}"
    if kinds == "object" and isinstance(prop.get("additionalProperties"), dict):
        text = f"an object of NAME: {describe(prop['additionalProperties'], schema, sizes)}"
    if sizes and kinds == "string" and "maxLength" in prop:
        text += f" of at most {prop['maxLength']:,} characters"
    return text + _bounds(prop)


def _bounds(prop: dict[str, Any]) -> str:
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}"
    words = []
    if low is not None:
        words.append(f">= {low:g}")
    if prop.get("exclusiveMinimum") is not None:
        words.append(f"> {prop['exclusiveMinimum']:g}")
    if high is not None:
        words.append(f"<= {high:g}")
    if prop.get("exclusiveMaximum") is not None:
        words.append(f"< {prop['exclusiveMaximum']:g}")
    if prop.get("minLength"):
        words.append(f"at least {prop['minLength']} characters")
    return (" " + " and ".join(words)) if words else ""


def _plural(text: str) -> str:
    return {"an integer": "integers", "a number": "numbers", "an object": "objects"}.get(text, text)


def glossary(shared: dict[str, str]) -> str:
    """The shared arguments, for the server's instructions."""
    if not shared:
        return ""
    lines = "\n".join(f"- {name}: {text}" for name, text in shared.items())
    return f"Arguments several tools share (described here once, not in each tool's schema):\n{lines}\n"


def _object_root(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return {**schema["$defs"][ref.removeprefix("#/$defs/")], **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def source_key() -> str:
    """Changes whenever a source file of rootcause, pydantic or Python changes (stat-based, like .pyc)."""
    import pydantic

    digest = hashlib.sha256(f"{SCHEMA_FORMAT}|{sys.version}|{pydantic.VERSION}".encode())
    base = Path(__file__).resolve().parent.parent
    for package in _PACKAGES:
        for folder, dirs, files in os.walk(base / package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".yaml", ".yml", ".json", ".md")):
                    stat = os.stat(os.path.join(folder, name))
                    digest.update(f"{folder}/{name}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def _cache_path() -> Path | None:
    if os.environ.get("ROOTCAUSE_SCHEMA_CACHE") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rootcause" / f"schemas-{source_key()}.json"


def _write(path: Path, schemas: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(schemas, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)
        # several checkouts or versions may share the cache: keep the most recent few
        cached = sorted(path.parent.glob("schemas-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in cached[CACHE_KEEP:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only home only costs the next start the generation time
