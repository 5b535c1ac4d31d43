"""Lock and requirements files read as {package: version}: a lock compared as packages, not as TOML rows."""

from __future__ import annotations

import tomllib

from rootcause.tools.run.interpreters import parse_freeze
from rootcause.tools.setups.configs import ConfigParseError


def packages_of(text: str, fmt: str) -> dict[str, str]:
    """uv.lock / poetry.lock / pdm.lock ([[package]] name + version) or requirements lines."""
    if fmt == "requirements":
        return parse_freeze(text)
    from packaging.utils import canonicalize_name

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigParseError(f"invalid TOML lock file: {exc}") from None
    out: dict[str, str] = {}
    for entry in data.get("package", []):
        if not isinstance(entry, dict) or "name" not in entry:
            continue
        version = entry.get("version")
        if version is None:
            source = entry.get("source", {})
            version = next((f"{k}={v}" for k, v in source.items()), "?") if isinstance(source, dict) else "?"
        name = canonicalize_name(str(entry["name"]))
        # A lock may hold one package at several versions (per-marker forks): keep them all.
        out[name] = f"{out[name]}, {version}" if name in out and out[name] != str(version) else str(version)
    return out
