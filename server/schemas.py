"""The tool schemas a client sees: compact JSON Schema made from the pydantic models, cached on disk.

tools/list is in the agent's context every session, so every schema is post-processed the same way
(whatever fields the models gain): titles go (the property name says it), `X | None` becomes a type
list, `default: null` goes, and output schemas keep types and structure but no descriptions or
defaults (the tool's description and docs/ say what the fields mean). Generating the schemas needs
every engine module imported (about 300 ms), so they are cached per rootcause source state: the
server answers tools/list without importing an engine; an engine is imported on its first call.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from server.catalog import TOOLS, ToolSpec

SCHEMA_FORMAT = 1
CACHE_KEEP = 8
_PACKAGES = ("tools", "server", "prompts")


def compact(schema: dict[str, Any], *, output: bool = False) -> dict[str, Any]:
    """A JSON Schema with the same meaning for validation and less text."""
    return _schema(schema, output)


def compact_input(schema: dict[str, Any]) -> dict[str, Any]:
    """What a caller needs to build a call: names, types, bounds, choices, defaults, one sentence each.

    The model's docstring goes (the tool's description is the catalog's); `X | None` becomes X (a
    caller omits an optional argument rather than sending null; the validation still accepts null);
    defaults of false or empty go (that is what omitting means).
    """
    schema = compact(schema)
    schema.pop("description", None)
    for definition in schema.get("$defs", {}).values():
        definition.pop("description", None)
    for properties in _property_maps(schema):
        for prop in properties.values():
            kinds = prop.get("type")
            if isinstance(kinds, list) and "null" in kinds and len(kinds) == 2:
                prop["type"] = next(k for k in kinds if k != "null")
            if "default" in prop and prop["default"] in (False, [], {}, ""):
                del prop["default"]
            if isinstance(prop.get("description"), str):
                prop["description"] = first_sentence(prop["description"])
    return schema


def compact_output(schema: dict[str, Any]) -> dict[str, Any]:
    """The result's top-level fields and their types; what nested lists and objects hold stays open.

    Enough for a client to validate structuredContent and for an agent to know which fields come
    back; what a nested record holds is in docs/tools/ and in the result itself.
    """
    schema = _object_root(compact(schema, output=True))
    properties = {name: _merge_nullable(_shallow(prop)) for name, prop in schema.get("properties", {}).items()}
    return {"type": "object", "properties": properties}


def _shallow(prop: dict[str, Any]) -> dict[str, Any]:
    """Types of the field itself; what a list or an object holds is left open."""
    if "$ref" in prop:
        return {"type": "object"}
    out = {key: value for key, value in prop.items() if key not in ("items", "additionalProperties", "required")}
    for key in ("anyOf", "oneOf"):
        if key in out:
            out[key] = [_shallow(option) for option in out[key]]
    return out


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
        if output and key in ("description", "examples"):
            continue
        if key in ("properties", "$defs", "patternProperties"):
            out[key] = {name: _schema(sub, output) for name, sub in value.items()}
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = [_schema(sub, output) for sub in value]
        elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
            out[key] = _schema(value, output)
        else:
            out[key] = value
    return _merge_nullable(out)


def _merge_nullable(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [{type: X, ...}, {type: null}]` -> `{type: [X, null], ...}` when X is a plain typed schema."""
    options = node.get("anyOf")
    if not isinstance(options, list) or len(options) != 2 or {"type": "null"} not in options:
        return node
    other = options[0] if options[1] == {"type": "null"} else options[1]
    kind = other.get("type")
    if not isinstance(kind, str) or "enum" in other or "const" in other:
        return node
    merged = {k: v for k, v in node.items() if k != "anyOf"}
    merged.update(other)
    merged["type"] = [kind, "null"]
    return merged


SHARED_MIN_TOOLS = 3
_PHASE_NOTE = re.compile(r"\s*\(advances Phase \d\)")


def tool_schemas() -> dict[str, Any]:
    """{"tools": {tool: {"input", "output"}}, "shared": {argument: description}}, cached while current."""
    path = _cache_path()
    if path is not None:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    schemas = generate()
    if path is not None:
        _write(path, schemas)
    return schemas


def generate(specs: tuple[ToolSpec, ...] = TOOLS) -> dict[str, Any]:
    """Import every tool's models and build its compact schemas (the slow path).

    An optional argument that many tools take (session_id, python, cwd, timeout_s...) is described
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
    takers: dict[str, list[dict[str, Any]]] = {}
    for schema in tools.values():
        required = set(schema["input"].get("required", ()))
        for name, prop in schema["input"].get("properties", {}).items():
            if name not in required and "description" in prop:
                takers.setdefault(name, []).append(prop)
    shared = {}
    for name, props in takers.items():
        if len(props) >= SHARED_MIN_TOOLS:
            # the wording most tools use (on a tie the catalog's first); the phase is in each tool's description
            texts = [_PHASE_NOTE.sub("", prop["description"]) for prop in props]
            shared[name] = min(texts, key=lambda text: (-texts.count(text), texts.index(text)))
            for prop in props:
                del prop["description"]
    return shared


def glossary(shared: dict[str, str]) -> str:
    """The shared arguments, for the server's instructions."""
    if not shared:
        return ""
    lines = "\n".join(f"- {name}: {text}" for name, text in shared.items())
    return f"Optional arguments many tools take (described here once, not in each tool):\n{lines}\n"


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
