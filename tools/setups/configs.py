"""Structured config files (YAML, JSON, TOML) flattened to `a.b[0].c` keys, and a text fallback."""

from __future__ import annotations

import difflib
import json
import tomllib
from pathlib import PurePosixPath
from typing import Any

STRUCTURED = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}
SCRIPTS = {".sh", ".bash", ".zsh", ".slurm", ".sbatch"}


class ConfigParseError(ValueError):
    """The file's text is not valid for its format; the message says where."""


def file_format(path: str) -> str:
    """yaml | json | toml | script | lock | requirements | text, from the file name."""
    name = PurePosixPath(path).name.lower()
    suffix = PurePosixPath(name).suffix
    if name in {"uv.lock", "poetry.lock", "pdm.lock"}:
        return "lock"
    if name.startswith("requirements") and suffix in {".txt", ".in", ".lock"}:
        return "requirements"
    if suffix in STRUCTURED:
        return STRUCTURED[suffix]
    if suffix in SCRIPTS:
        return "script"
    return "text"


def parse(text: str, fmt: str) -> Any:
    """The document a config file holds (several YAML documents become a list)."""
    try:
        if fmt == "json":
            return json.loads(text)
        if fmt == "toml":
            return tomllib.loads(text)
        if fmt == "yaml":
            import yaml

            docs = list(yaml.safe_load_all(text))
            return docs[0] if len(docs) == 1 else docs
    except json.JSONDecodeError as exc:
        raise ConfigParseError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigParseError(f"invalid TOML: {exc}") from None
    except Exception as exc:  # yaml.YAMLError and its subclasses carry the position in str()
        raise ConfigParseError(f"invalid YAML: {' '.join(str(exc).split())}") from None
    raise ValueError(f"not a structured format: {fmt}")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves keyed by path: dict keys joined with '.', list items as [i]; empty containers are leaves."""
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{index}]"))
    else:
        out[prefix or "(document)"] = value
    return out


def text_changes(good: str, bad: str) -> list[tuple[str, str | None, str | None]]:
    """(where, removed lines, added lines) for each changed block of two texts, line by line."""
    a, b = good.splitlines(), bad.splitlines()
    changes = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        where = f"lines {i1 + 1}-{i2}" if i2 > i1 else f"after line {i1}"
        changes.append((where, "\n".join(a[i1:i2]) if i2 > i1 else None, "\n".join(b[j1:j2]) if j2 > j1 else None))
    return changes
