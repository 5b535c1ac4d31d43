"""What a load of a checkpoint into the project's own target (load_into) would do: where the target's parts sit in
the checkpoint, what the load leaves out (stored, not restored), what it lacks (missing), what it would refuse, and
the per-group table (model, optimizer, ...) with those counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field
from rootcause.tools.numerics.checkpoint_diff import (
    DtypeMismatch,
    Rename,
    ShapeMismatch,
    Side,
    likely_renames,
    mismatches,
)
from rootcause.tools.numerics.formats import Grouper, group_order


class CheckpointGroup(BaseModel):
    """One part of the checkpoint (model weights, optimizer state, ...): every top-level key of that kind."""

    group: str = Field(description="model | optimizer | scheduler | scaler | extra | other "
                                   "(tools/numerics/checkpoint_groups.yaml).")
    keys: list[str] = Field(description="Its top-level keys; '' is a plain state dict's top level.")
    tensors: int
    parameters: int
    bytes: int
    dtypes: dict[str, int]
    entries: int = Field(description="Stored values that are not tensors (a step, an lr, param_groups' lists).")
    not_restored: int | None = Field(None, description="With load_into: its stored keys the target lacks.")
    not_restored_tensors: int | None = None
    not_restored_bytes: int | None = None
    missing: int | None = Field(None, description="With load_into: keys of this group the target expects and the "
                                                  "checkpoint lacks.")
    examples: dict[str, list[str]] = Field(default_factory=dict, description="With load_into: up to 5 names each "
                                                                             "of not_restored and missing.")


class Target(BaseModel):
    """What load_into returned, as the load sees it: names in the checkpoint's flattening."""

    records: dict[str, dict[str, Any]]
    entries: dict[str, dict[str, Any]]
    objects: list[dict[str, Any]]
    description: str
    single: bool
    interpreter: str
    inventory_path: str


class Audit(BaseModel):
    placed_at: str
    missing: list[str]
    unexpected: list[str]
    shape_mismatches: list[ShapeMismatch]
    dtype_mismatches: list[DtypeMismatch]
    likely_renames: list[Rename]
    would_raise: list[str]
    target_paths: dict[str, list[Any]]
    """Every placed target name's path (for its group)."""
    target_tensors: set[str]


def _under(path: Sequence[Any], prefix: Sequence[Any]) -> bool:
    return len(path) >= len(prefix) and list(path[:len(prefix)]) == list(prefix)


Placement = dict[tuple[Any, ...], tuple[Any, ...]]
"""Target path prefix -> the checkpoint's prefix it is compared under."""


def _placement(side: Side, target: Target, grouper: Grouper) -> Placement:
    """Where the target's parts sit in the checkpoint.

    A single model / optimizer / state dict: under the prefix with most keys in common (else the one key of its
    own group). A dict is compared as returned, except that for a torch.save checkpoint (whose keys the project's
    own code picks: `opt.load_state_dict(ckpt["optimizer"])`) a key the checkpoint lacks is compared under the
    checkpoint's one key of the same group ("optim" -> "optimizer"). dcp.load uses the dict's keys as they are.
    """
    stored = {**side.records, **side.entries}
    prefixes: set[tuple[Any, ...]] = set()
    for r in stored.values():
        path = tuple(r["path"])
        prefixes.update(path[:depth] for depth in (1, 2) if len(path) > depth)

    def group_keys(kind: str) -> set[tuple[Any, ...]]:
        return {p for p in prefixes if len(p) == 1 and grouper.of((*p, "", ""), False)[0] == kind}

    if not target.single:
        if side.format == "dcp":
            return {}
        mapping: Placement = {}
        top_stored = {str(r["path"][0]) for r in stored.values() if r["path"]}
        top_wanted = {str(r["path"][0]) for r in [*target.records.values(), *target.entries.values()] if r["path"]}
        for key in sorted(top_wanted - top_stored):
            free = group_keys(grouper.of((key, "", ""), False)[0]) - set(mapping.values()) - {(k,) for k in top_wanted}
            if len(free) == 1:
                mapping[(key,)] = free.pop()
        return mapping
    wanted = [tuple(r["path"]) for r in [*target.records.values(), *target.entries.values()]]
    names = set(stored)

    def overlap(prefix: tuple[Any, ...]) -> int:
        return sum(".".join(map(str, prefix + path)) in names for path in wanted)

    best = max(sorted(prefixes, key=str), key=overlap, default=())
    if overlap(best) > overlap(()):
        return {(): best}
    if overlap(()) == 0:
        # Nothing in common anywhere (every key renamed?): the checkpoint's one key of the target's own kind.
        keys = group_keys("optimizer" if any(o["type"] == "optimizer" for o in target.objects) else "model")
        if len(keys) == 1:
            return {(): keys.pop()}
    return {}


def _placed(path: Sequence[Any], placement: Placement) -> list[Any]:
    for source, dest in placement.items():
        if _under(path, source):
            return [*dest, *path[len(source):]]
    return list(path)


def _describe_placement(placement: Placement) -> str:
    def shown(p: tuple[Any, ...]) -> str:
        return ".".join(map(str, p))

    if list(placement) == [()]:
        return shown(placement[()])
    return ", ".join(f"{shown(a)} -> {shown(b)}" for a, b in sorted(placement.items(), key=str))


def _optimizer_groups(stored: dict[str, dict[str, Any]], prefix: tuple[Any, ...]) -> list[int] | None:
    """Parameter count per group of a stored optimizer state dict (param_groups.<i>.params), by position."""
    sizes: dict[int, int] = {}
    for r in stored.values():
        path = r["path"]
        if (len(path) == len(prefix) + 3 and _under(path, prefix) and path[len(prefix)] == "param_groups"
                and path[-1] == "params" and isinstance(path[-2], int) and "len" in r):
            sizes[path[-2]] = r["len"]
    return [sizes[i] for i in sorted(sizes)] if sizes else None


def audit(side: Side, target: Target) -> Audit:
    grouper = side.grouper()
    placement = _placement(side, target, grouper)
    dcp = side.format == "dcp"

    def placed(items: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        out = {}
        for r in items.values():
            path = _placed(r["path"], placement)
            out[".".join(map(str, path))] = {**r, "path": path}
        return out

    t_records, t_entries = placed(target.records), placed(target.entries)
    wanted = {**t_records, **t_entries}
    stored = {**side.records, **side.entries}
    would_raise: list[str] = []
    settled: set[str] = set()  # names decided by an object's own load_state_dict rule, not by key
    not_restored: set[str] = set()
    missing: set[str] = set()
    if not dcp:
        for obj in target.objects:
            if obj["type"] == "module":
                continue
            at = _placed(obj["path"], placement)
            mine = {n for n, r in stored.items() if _under(r["path"], at)}
            theirs = {n for n, r in wanted.items() if _under(r["path"], at)}
            settled |= mine | theirs
            shown = ".".join(map(str, at)) or "(top level)"
            if not mine:
                missing |= theirs
                continue
            if obj["type"] == "optimizer":
                saved = _optimizer_groups(stored, tuple(at))
                if saved != obj["group_sizes"]:
                    held = "no param_groups" if saved is None else f"parameter groups of {saved} parameters"
                    would_raise.append(f"{shown}: {obj['class']}.load_state_dict raises ValueError: the checkpoint "
                                       f"holds {held}, the target's groups hold {obj['group_sizes']}")
                    not_restored |= mine
    rest_stored = set(stored) - settled
    rest_wanted = set(wanted) - settled
    missing |= rest_wanted - rest_stored
    not_restored |= rest_stored - rest_wanted
    common = (rest_stored & rest_wanted) & set(side.records) & set(t_records)
    shapes, dtypes = mismatches(common, side.records, t_records)
    missing_list, unexpected_list = sorted(missing), sorted(not_restored)
    if missing and dcp:
        would_raise.append(f"dcp.load raises on the {len(missing)} missing keys (\"Missing key in checkpoint "
                           "state_dict\") unless its planner allows a partial load")
    if shapes:
        loader = "dcp.load" if dcp else "load_state_dict (even with strict=False)"
        would_raise.append(f"{loader} raises on the {len(shapes)} shape mismatches (size mismatch for "
                           f"{shapes[0].name})")
    renames = likely_renames([n for n in missing_list if n in t_records],
                             [n for n in unexpected_list if n in side.records], t_records, side.records,
                             lambda r: grouper.of(r["path"], True)[1])
    return Audit(placed_at=_describe_placement(placement), missing=missing_list, unexpected=unexpected_list,
                 shape_mismatches=shapes, dtype_mismatches=dtypes, likely_renames=renames, would_raise=would_raise,
                 target_paths={n: r["path"] for n, r in wanted.items()}, target_tensors=set(t_records))


def groups_of(side: Side, found: Audit | None) -> list[CheckpointGroup]:
    """The per-group table; with an audit, what each group loses and lacks (tensors named first)."""
    grouper = side.grouper()
    rows: dict[str, dict[str, Any]] = {}
    name_groups: dict[str, str] = {}
    examples: dict[str, dict[str, list[str]]] = {}

    def row(group: str) -> dict[str, Any]:
        return rows.setdefault(group, {"keys": [], "tensors": 0, "parameters": 0, "bytes": 0, "dtypes": Counter(),
                                       "entries": 0, "not_restored": 0, "not_restored_tensors": 0,
                                       "not_restored_bytes": 0, "missing": 0})

    for tensor, items in ((True, side.records), (False, side.entries)):
        for name, r in items.items():
            group, key = grouper.of(r["path"], tensor)
            name_groups[name] = group
            g = row(group)
            if key not in g["keys"]:
                g["keys"].append(key)
            if tensor:
                g["tensors"] += 1
                g["parameters"] += r["numel"]
                g["bytes"] += r.get("nbytes", 0)
                g["dtypes"][r["dtype"]] += 1
            else:
                g["entries"] += 1
    if found is not None:
        for name in sorted(found.unexpected, key=lambda n: (n not in side.records, n)):
            group = name_groups[name]
            g = row(group)
            g["not_restored"] += 1
            if name in side.records:
                g["not_restored_tensors"] += 1
                g["not_restored_bytes"] += side.records[name].get("nbytes", 0)
            examples.setdefault(group, {}).setdefault("not_restored", []).append(name)
        for name in sorted(found.missing, key=lambda n: (n not in found.target_tensors, n)):
            group, _ = grouper.of(found.target_paths[name], name in found.target_tensors)
            row(group)["missing"] += 1
            examples.setdefault(group, {}).setdefault("missing", []).append(name)
    order = group_order()
    audited = found is not None
    out = []
    for group in sorted(rows, key=lambda g: (order.index(g) if g in order else len(order), g)):
        g = rows[group]
        extra = {k: g[k] if audited else None for k in ("not_restored", "not_restored_tensors", "not_restored_bytes",
                                                        "missing")}
        shown = {k: v[:5] for k, v in examples.get(group, {}).items()}
        out.append(CheckpointGroup(group=group, keys=sorted(g["keys"])[:20], tensors=g["tensors"],
                                   parameters=g["parameters"], bytes=g["bytes"], dtypes=dict(g["dtypes"]),
                                   entries=g["entries"], examples=shown, **extra))
    return out
