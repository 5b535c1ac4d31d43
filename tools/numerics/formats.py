"""Which checkpoint format a path holds, decided from its layout and first bytes (no torch); which part of a
training checkpoint (model, optimizer, scheduler, ...) each of its keys holds."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.numerics._ckpt_worker import looks_like_safetensors

Format = Literal["torch", "safetensors", "hf_sharded", "dcp"]
ShardFormat = Literal["torch", "safetensors", "dcp"]
CHECKPOINT_SUFFIXES = {".safetensors", ".pt", ".pth", ".bin", ".ckpt"}
ZIP_MAGIC = b"PK\x03\x04"


@dataclass
class Detected:
    format: Format
    groups: dict[ShardFormat, list[Path]]
    """Files (or the DCP directory) per format the worker reads."""
    notes: list[str] = field(default_factory=list)
    index_names: set[str] | None = None
    """Tensor names an HF index promises (checked against the shards)."""


def _sniff(path: Path) -> ShardFormat | None:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(ZIP_MAGIC):
        return "torch"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "torch"  # the legacy (pre-1.6) torch.save layout: a plain pickle stream
    if looks_like_safetensors(path):
        return "safetensors"
    return None


def _describe_bytes(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(16)
    return f"{path.stat().st_size} bytes starting with {head!r}"


def _from_index(index: Path, workspace: Workspace) -> Detected:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        weight_map = data["weight_map"]
        assert isinstance(weight_map, dict)
    except (ValueError, KeyError, AssertionError, UnicodeDecodeError):
        raise UsageError(f"{index.name} is not a Hugging Face index: no JSON object with a 'weight_map'.",
                         "pass the *.index.json written by save_pretrained, or a shard file itself") from None
    groups: dict[ShardFormat, list[Path]] = {}
    for shard in sorted(set(weight_map.values())):
        file = workspace.resolve(index.parent / str(shard), what="shard")
        if not file.is_file():
            raise UsageError(f"{index.name} names shard {shard!r}, which does not exist next to it.",
                             "copy every shard the index lists, or inspect the shards that exist one by one")
        kind = _sniff(file)
        if kind is None:
            raise UsageError(f"shard {shard!r} is neither safetensors nor torch.save: {_describe_bytes(file)}.",
                             "check the file")
        groups.setdefault(kind, []).append(file)
    return Detected("hf_sharded", groups, index_names=set(weight_map))


def detect(path: Path, workspace: Workspace) -> Detected:
    """The format of a checkpoint file or directory; a UsageError names what was found instead."""
    if path.is_dir():
        if (path / ".metadata").is_file():
            return Detected("dcp", {"dcp": [path]})
        indexes = sorted(path.glob("*.index.json"))
        preferred = [p for p in indexes if p.name.endswith(".safetensors.index.json")]
        if len(indexes) == 1 or len(preferred) == 1:
            chosen = preferred[0] if preferred else indexes[0]
            detected = _from_index(chosen, workspace)
            if len(indexes) > 1:
                detected.notes.append(f"several index files; used {chosen.name}")
            return detected
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in CHECKPOINT_SUFFIXES)
        if len(files) == 1:
            return detect(files[0], workspace)
        if files and all(p.suffix == ".safetensors" for p in files):
            return Detected("hf_sharded", {"safetensors": files}, notes=["no index file: every *.safetensors read"])
        found = ", ".join(sorted(p.name for p in path.iterdir())[:12]) or "nothing"
        raise UsageError(
            f"{path.name}/ is not a checkpoint directory: no .metadata (DCP), no *.index.json (Hugging Face), "
            f"not exactly one checkpoint file. Found: {found}.",
            "pass a checkpoint file, a DCP directory or a Hugging Face *.index.json",
        )
    if not path.is_file():
        raise UsageError(f"{path} is not a file or directory.", "pass a checkpoint file or directory")
    if path.name.endswith(".index.json"):
        return _from_index(path, workspace)
    kind = _sniff(path)
    if kind is None:
        raise UsageError(
            f"unknown checkpoint format: {path.name} is {_describe_bytes(path)} — not safetensors, not a "
            "torch.save zip or pickle, not a DCP directory or a Hugging Face index.",
            "pass a .safetensors / torch.save file, a DCP directory or an *.index.json",
        )
    return Detected("safetensors" if kind == "safetensors" else "torch", {kind: [path]})


# ------------------------------------------------------------------ groups (rules in checkpoint_groups.yaml)

TOP_LEVEL_KEY = ""
"""The key of tensors stored directly at the top level: a plain state dict."""


@cache
def _group_rules() -> dict[str, Any]:
    return yaml.safe_load(Path(__file__).with_name("checkpoint_groups.yaml").read_text(encoding="utf-8"))


def group_order() -> list[str]:
    return list(_group_rules()["shown_in_order"])


def _exact(key: str) -> str | None:
    lowered = key.lower()
    return next((g["name"] for g in _group_rules()["groups"] if lowered in g["keywords"]), None)


def _match(key: str) -> str | None:
    """The group whose keyword is the whole key, else the first group (in the file's order) naming one of its words."""
    found = _exact(key)
    if found:
        return found
    words = set(re.split(r"[^a-z0-9]+", key.lower()))
    return next((g["name"] for g in _group_rules()["groups"] if words & set(g["keywords"])), None)


@dataclass(frozen=True)
class Grouper:
    """(group, key) of every entry of one checkpoint: the same answer for its entries and for a target's."""

    whole: str | None = None

    @classmethod
    def for_top_keys(cls, top_keys: set[str]) -> Grouper:
        rules = _group_rules()
        return cls(next((w["group"] for w in rules.get("whole", []) if set(w["keys"]) == top_keys), None))

    def of(self, path: Sequence[str | int], tensor: bool) -> tuple[str, str]:
        rules = _group_rules()
        if self.whole:
            return self.whole, TOP_LEVEL_KEY
        if not path:
            return rules["top_level"], TOP_LEVEL_KEY
        first = str(path[0])
        if len(path) == 1 and tensor:  # "fc1.weight" of a plain state dict; "rng" is still extra
            found = _exact(first)
            return (found, first) if found else (rules["top_level"], TOP_LEVEL_KEY)
        found = _match(first)
        if found:
            return found, first
        if len(path) > 2:
            second = _match(str(path[1]))
            if second:
                return second, f"{first}.{path[1]}"
        return rules["unknown"], first


def fallback_path(name: str) -> list[str]:
    """A path for a flattened name whose structure was not recorded (a DCP checkpoint without planner data)."""
    first, _, rest = name.partition(".")
    return [first, rest] if rest and _match(first) else [name]
