"""Two checkpoint inventories side by side: what one holds (a Side: tensors and entries as the worker listed them),
which values are non-finite, and the keys that differ from a reference (missing, unexpected, another shape or dtype,
likely renames).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field
from rootcause.tools.numerics.formats import Format, Grouper

RENAME_MIN_SIMILARITY = 0.4


class NonFinite(BaseModel):
    name: str
    dtype: str
    numel: int
    nan: int
    posinf: int
    neginf: int


class ShapeMismatch(BaseModel):
    name: str
    shape: list[int]
    reference_shape: list[int]


class DtypeMismatch(BaseModel):
    name: str
    dtype: str
    reference_dtype: str


class Rename(BaseModel):
    from_: str = Field(alias="from", description="The missing key: the reference's (compare_to) or the target's "
                                                 "(load_into).")
    to: str = Field(description="The unexpected key: the one path holds.")
    shape: list[int]
    dtype: str
    name_similarity: float
    same_content: bool | None = Field(None, description="Equal value hashes; null when values were not read.")

    model_config = {"populate_by_name": True}


class SideSummary(BaseModel):
    path: str
    format: Format
    tensors: int
    parameters: int
    bytes: int
    dtypes: dict[str, int]
    nonfinite_tensors: int
    values_checked: bool
    interpreter: str
    inventory_path: str = Field(description="Every tensor (name, dtype, shape, counts, hash) as JSON lines.")


class Side(BaseModel):
    path: str
    format: Format
    records: dict[str, dict[str, Any]]
    """Tensors by name (each with its path in the nested checkpoint)."""
    entries: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Stored values that are not tensors, by name."""
    notes: list[str]
    values_checked: bool
    interpreter: str
    inventory_path: str

    def summary(self) -> SideSummary:
        return SideSummary(path=self.path, format=self.format, tensors=len(self.records),
                           parameters=sum(r["numel"] for r in self.records.values()),
                           bytes=sum(r.get("nbytes", 0) for r in self.records.values()),
                           dtypes=dict(Counter(r["dtype"] for r in self.records.values())),
                           nonfinite_tensors=len(nonfinite_of(self)), values_checked=self.values_checked,
                           interpreter=self.interpreter, inventory_path=self.inventory_path)

    def grouper(self) -> Grouper:
        return Grouper.for_top_keys({str(r["path"][0]) for r in [*self.records.values(), *self.entries.values()]
                                     if r["path"]})


def nonfinite_of(side: Side) -> list[NonFinite]:
    return [NonFinite(name=name, dtype=r["dtype"], numel=r["numel"], nan=r.get("nan", 0),
                      posinf=r.get("posinf", 0), neginf=r.get("neginf", 0))
            for name, r in side.records.items() if r.get("nan") or r.get("posinf") or r.get("neginf")]


def likely_renames(missing: list[str], unexpected: list[str], ref: dict[str, dict[str, Any]],
                   side: dict[str, dict[str, Any]], key_of: Any = None) -> list[Rename]:
    """Pairs (reference key, path key) of equal shape and dtype, best name similarity and equal content first.

    With key_of, a pair stays inside one group key: a model weight never pairs with an optimizer moment.
    """
    from rapidfuzz import fuzz

    def kind(r: dict[str, Any]) -> tuple[Any, ...]:
        return (key_of(r) if key_of else None, r["dtype"], tuple(r["shape"]))

    by_kind: dict[tuple[Any, ...], list[str]] = {}
    for name in unexpected:
        by_kind.setdefault(kind(side[name]), []).append(name)
    missing_per_kind = Counter(kind(ref[m]) for m in missing)
    candidates: list[tuple[float, Rename]] = []
    for old in missing:
        a = ref[old]
        pool = by_kind.get(kind(a), [])
        # The only missing and the only unexpected tensor of a shape and dtype pair up whatever their names.
        only_pair = len(pool) == 1 and missing_per_kind[kind(a)] == 1
        for new in pool:
            b = side[new]
            similarity = fuzz.ratio(old, new) / 100
            same = a["hash"] == b["hash"] if a.get("hash") and b.get("hash") else None
            if similarity < RENAME_MIN_SIMILARITY and not same and not only_pair:
                continue
            rename = Rename(from_=old, to=new, shape=a["shape"], dtype=a["dtype"],
                            name_similarity=round(similarity, 3), same_content=same)
            candidates.append((similarity + (1.0 if same else 0.0), rename))
    candidates.sort(key=lambda c: (-c[0], c[1].from_, c[1].to))
    used_from: set[str] = set()
    used_to: set[str] = set()
    chosen = []
    for _, rename in candidates:
        if rename.from_ in used_from or rename.to in used_to:
            continue
        used_from.add(rename.from_)
        used_to.add(rename.to)
        chosen.append(rename)
    return chosen


def mismatches(names: Sequence[str], stored: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]],
                ) -> tuple[list[ShapeMismatch], list[DtypeMismatch]]:
    shapes, dtypes = [], []
    for name in sorted(names):
        a, b = stored[name], other[name]
        if a["shape"] != b["shape"]:
            shapes.append(ShapeMismatch(name=name, shape=a["shape"], reference_shape=b["shape"]))
        if a["dtype"] != b["dtype"]:
            dtypes.append(DtypeMismatch(name=name, dtype=a["dtype"], reference_dtype=b["dtype"]))
    return shapes, dtypes


def compare(side: Side, ref: Side) -> dict[str, list[Any]]:
    missing = sorted(set(ref.records) - set(side.records))
    unexpected = sorted(set(side.records) - set(ref.records))
    shapes, dtypes = mismatches(set(ref.records) & set(side.records), side.records, ref.records)
    grouper = side.grouper()
    return {"missing": missing, "unexpected": unexpected, "shape_mismatches": shapes, "dtype_mismatches": dtypes,
            "likely_renames": likely_renames(missing, unexpected, ref.records, side.records,
                                             lambda r: grouper.of(r["path"], True)[1])}
