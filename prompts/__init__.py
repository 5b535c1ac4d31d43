"""The protocol's prompt templates (Markdown files beside this module) and their loader.

Placeholders are written `{{name}}`; everything else in a template is literal text.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

PROMPT_NAMES = ("debug_protocol", "quick_path", "verification_subagent", "distributed_checklist",
                "numerical_checklist")
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@cache
def template(name: str) -> str:
    if name not in PROMPT_NAMES:
        raise KeyError(f"unknown prompt {name!r}; known: {', '.join(PROMPT_NAMES)}")
    return resources.files(__package__).joinpath(f"{name}.md").read_text(encoding="utf-8")


def placeholders(name: str) -> list[str]:
    return list(dict.fromkeys(_PLACEHOLDER.findall(template(name))))


def render(name: str, **values: str) -> str:
    """The template with every placeholder filled; a missing value is an error, not a blank."""
    missing = [p for p in placeholders(name) if p not in values]
    if missing:
        raise KeyError(f"prompt {name!r} needs {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template(name))
