"""Start-up stays cheap: `rootcause serve` answers tools/list from cached schemas without importing an
engine or a heavy library, and the cache says exactly what the models say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rootcause.server.schemas import compact_input, first_sentence, source_key, tool_schemas

HEAVY = ("torch", "numpy", "matplotlib", "safetensors", "yaml", "rapidfuzz", "markdown_it", "git", "psutil")

PROBE = """
import json, sys
from rootcause.server.cli import build_parser
build_parser(only_tool="")
from rootcause.server.app import build_server
build_server(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def test_serve_imports_no_engine_and_no_heavy_library(repo: Path) -> None:
    # the cache is written once per source state, by a process that imports the engines afresh
    subprocess.run([sys.executable, "-c", "from rootcause.server.schemas import tool_schemas; tool_schemas()"],
                   check=True)
    done = subprocess.run([sys.executable, "-c", PROBE, str(repo)], capture_output=True, text=True, check=True)
    modules = set(json.loads(done.stdout))
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == [], heavy
    light = {"rootcause.tools.core", *(f"rootcause.tools.core.{m}" for m in ("context", "errors", "redact", "results",
                                                                            "workspace"))}
    engines = sorted(m for m in modules if m.startswith("rootcause.tools.") and m not in light)
    assert engines == [], engines


def test_cached_schemas_equal_fresh_ones() -> None:
    """The cache says what the models on disk say (generated in a new process, without the cache)."""
    fresh = subprocess.run([sys.executable, "-c", "import json; from rootcause.server.schemas import generate; "
                            "print(json.dumps(generate()))"], capture_output=True, text=True, check=True,
                           env={**os.environ, "ROOTCAUSE_SCHEMA_CACHE": "0"})
    assert tool_schemas() == json.loads(fresh.stdout)


def test_cache_key_follows_the_sources(tmp_path: Path) -> None:
    assert source_key() == source_key()
    assert len(source_key()) == 24


def test_compaction_keeps_validation_meaning() -> None:
    from pydantic import BaseModel, Field

    class Example(BaseModel):
        """Docstring that the tool description replaces."""

        runs: int = Field(2, ge=1, le=20, description="How many runs. Extra detail the agent can do without.")
        python: str | None = Field(None, description="The interpreter, e.g. .venv/bin/python.")
        shell: bool = Field(False, description="Through /bin/sh.")

    schema = compact_input(Example.model_json_schema())
    assert schema == {"type": "object", "properties": {
        "runs": {"default": 2, "description": "How many runs.", "maximum": 20, "minimum": 1, "type": "integer"},
        "python": {"description": "The interpreter, e.g. .venv/bin/python.", "type": "string",
                   "maxLength": 4096},  # every text argument has a limit (server/limits.yaml)
        "shell": {"description": "Through /bin/sh.", "type": "boolean"},
    }}


def test_first_sentence_keeps_abbreviations_and_versions() -> None:
    assert first_sentence("A version, e.g. '8.1.0'. More.") == "A version, e.g. '8.1.0'."
    assert first_sentence("Limit in seconds; v1.2 style. Second") == "Limit in seconds; v1.2 style."
