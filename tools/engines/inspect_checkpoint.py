"""inspect_checkpoint: what a checkpoint holds, which values are non-finite, how it differs from a reference.

The server never imports torch: the tensors are read by `_ckpt_worker.py` running as a
subprocess of the target interpreter (through the shared runner), one tensor at a time,
and written as JSON lines under `.rootcause/numerics/<id>/`. This module picks the format,
the interpreter, runs the worker and compares the two inventories.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.numerics.formats import Detected, Format, detect

LIST_LIMIT = 100
WORKER = Path(__file__).parents[1] / "numerics" / "_ckpt_worker.py"
RENAME_MIN_SIMILARITY = 0.4


class InspectCheckpointInput(BaseModel):
    """Inspect a checkpoint: tensors, parameters, dtypes, NaN/Inf per tensor, and key diffs against compare_to.

    With compare_to (a reference checkpoint): keys missing, unexpected, with another shape or
    dtype, and likely renames (a missing key paired with an unexpected one of the same shape
    and dtype, ranked by name similarity and equal content). Reads torch.save state dicts
    (weights_only=True), safetensors files, Hugging Face sharded checkpoints (*.index.json) and
    torch.distributed.checkpoint (DCP) directories. torch runs in the project's interpreter as
    a subprocess, one tensor at a time.
    """

    path: str = Field(description="The checkpoint to inspect: a file, a DCP directory or an *.index.json "
                                  "(relative to the root or absolute inside it).")
    compare_to: str | None = Field(None, description="A reference checkpoint (e.g. the model's own state dict or "
                                                     "a known-good checkpoint). missing = keys the reference has "
                                                     "and path lacks; unexpected = keys only path has.")
    python: str | None = Field(None, description="Interpreter with torch to read torch / DCP checkpoints; default "
                                                 "<root>/.venv/bin/python, else the server's own.")
    allow_pickle: bool = Field(False, description="Load torch.save files that weights_only=True refuses. "
                                                  "Unpickling runs arbitrary code: only for files you trust.")
    values: bool = Field(True, description="Read tensor values for NaN/Inf counts and content hashes; false "
                                           "lists names, dtypes and shapes only (fast).")
    timeout_s: float = Field(3600.0, description="Wall-clock limit for reading one checkpoint.")
    session_id: str | None = Field(None, description="Append the findings to this session as evidence.")


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
    from_: str = Field(alias="from", description="The reference's key (missing from path).")
    to: str = Field(description="The key in path (unexpected against the reference).")
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


class InspectCheckpointResult(ToolResult):
    path: str
    format: Format
    tensors: int
    parameters: int
    bytes: int
    dtypes: dict[str, int] = Field(description="Tensor count per dtype.")
    values_checked: bool
    nonfinite: list[NonFinite] = Field(description="Tensors holding NaN or Inf (count per kind).")
    nonfinite_tensors: int
    compare_to: SideSummary | None = None
    missing: list[str] = Field(default_factory=list)
    unexpected: list[str] = Field(default_factory=list)
    shape_mismatches: list[ShapeMismatch] = Field(default_factory=list)
    dtype_mismatches: list[DtypeMismatch] = Field(default_factory=list)
    likely_renames: list[Rename] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict, description="Full counts of every list (lists are capped).")
    full_list_path: str | None = Field(None, description="JSON file with every list uncapped, when one was capped.")
    inventory_path: str
    interpreter: str
    notes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        hist = ", ".join(f"{k}: {v}" for k, v in sorted(self.dtypes.items()))
        lines = [f"{self.format} checkpoint {self.path}: {self.tensors} tensors, {self.parameters:,} parameters "
                 f"({hist or 'no tensors'})."]
        if not self.values_checked:
            lines.append("Values not read: NaN/Inf not checked.")
        elif self.nonfinite:
            shown = "; ".join(f"{n.name} NaN {n.nan} +Inf {n.posinf} -Inf {n.neginf} of {n.numel}"
                              for n in self.nonfinite[:5])
            more = f" (+{self.nonfinite_tensors - 5} more)" if self.nonfinite_tensors > 5 else ""
            lines.append(f"NON-FINITE values in {self.nonfinite_tensors} tensor(s): {shown}{more}.")
        else:
            lines.append("All values finite.")
        if self.compare_to is not None:
            c = self.counts
            lines.append(f"Against {self.compare_to.path} ({self.compare_to.format}, {self.compare_to.tensors} "
                         f"tensors): {c.get('missing', 0)} missing, {c.get('unexpected', 0)} unexpected, "
                         f"{c.get('shape_mismatches', 0)} shape mismatches, {c.get('dtype_mismatches', 0)} "
                         "dtype mismatches.")
            for label, items in (("Missing", self.missing), ("Unexpected", self.unexpected)):
                if items:
                    lines.append(f"{label}: {', '.join(items[:8])}{' …' if len(items) > 8 else ''}")
            for s in self.shape_mismatches[:5]:
                lines.append(f"Shape: {s.name} {s.shape} vs reference {s.reference_shape}")
            for d in self.dtype_mismatches[:5]:
                lines.append(f"Dtype: {d.name} {d.dtype} vs reference {d.reference_dtype}")
            for r in self.likely_renames[:8]:
                content = {True: ", same content", False: ", different content", None: ""}[r.same_content]
                lines.append(f"Likely rename: {r.from_} -> {r.to} (name similarity {r.name_similarity:.2f}"
                             f"{content})")
        lines += [f"Note: {n}" for n in self.notes]
        if self.full_list_path:
            lines.append(f"Full lists: {self.full_list_path}")
        return "\n".join(lines)


# ------------------------------------------------------------------ reading one side


class Side(BaseModel):
    path: str
    format: Format
    records: dict[str, dict[str, Any]]
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


def nonfinite_of(side: Side) -> list[NonFinite]:
    return [NonFinite(name=name, dtype=r["dtype"], numel=r["numel"], nan=r.get("nan", 0),
                      posinf=r.get("posinf", 0), neginf=r.get("neginf", 0))
            for name, r in side.records.items() if r.get("nan") or r.get("posinf") or r.get("neginf")]


def _interpreter(detected: Detected, inp: InspectCheckpointInput, ctx: ToolContext) -> Path:
    from rootcause.tools.run.interpreters import resolve_python

    if set(detected.groups) == {"safetensors"} and not inp.python:
        return Path(sys.executable)  # numpy is our own dependency; safetensors values need no torch
    return resolve_python(ctx.workspace, inp.python)


def _worker_error(error: dict[str, Any], path: str, python: Path) -> UsageError:
    code, message = error.get("error"), error.get("message", "")
    if code == "weights_only_refused":
        return UsageError(
            f"{path} is a pickle that torch.load(weights_only=True) refuses: {message.rstrip('.')}.",
            "if you trust the file, pass allow_pickle=true (unpickling runs arbitrary code); "
            "better, re-save it as a plain state dict or safetensors",
        )
    if code == "no_torch":
        return UsageError(f"reading {path} needs torch, which is not importable in {python}.",
                          "pass python= the project's interpreter that has torch installed")
    return UsageError(f"cannot read {path}: {message}", "check that the file is a complete checkpoint")


async def read_side(raw_path: str, inp: InspectCheckpointInput, ctx: ToolContext, out_dir: Path, label: str,
                    want_hash: bool) -> Side:
    from rootcause.tools.run import run_captured

    path = ctx.workspace.resolve(raw_path, must_exist=True, what=label)
    detected = detect(path, ctx.workspace)
    python = _interpreter(detected, inp, ctx)
    shown = ctx.workspace.relative(path)
    records: dict[str, dict[str, Any]] = {}
    notes = list(detected.notes)
    inventory = out_dir / f"{label}.jsonl"
    with open(inventory, "w", encoding="utf-8") as merged:
        for number, (kind, files) in enumerate(detected.groups.items()):
            out = out_dir / f"{label}.{number}.jsonl"
            argv = [str(python), str(WORKER), "--format", kind, "--out", str(out)]
            argv += ["--allow-pickle"] * inp.allow_pickle + ["--hash"] * want_hash + ["--no-values"] * (not inp.values)
            record, output = await run_captured(argv + [str(f) for f in files], ctx.workspace,
                                                timeout_s=inp.timeout_s, label=f"inspect_checkpoint {label}",
                                                progress=ctx.progress)
            done = False
            if out.is_file():
                with open(out, encoding="utf-8") as fh:
                    for line in fh:
                        item = json.loads(line)
                        if item["kind"] == "error":
                            raise _worker_error(item, shown, python)
                        if item["kind"] == "note":
                            notes.append(item["text"])
                        elif item["kind"] == "done":
                            done = True
                        else:
                            item["file"] = ctx.workspace.relative(Path(item["file"]))
                            merged.write(json.dumps(item) + "\n")
                            if item["name"] in records:
                                notes.append(f"tensor {item['name']} appears in two shards; the first is kept")
                                continue
                            records[item["name"]] = item
                            if item.get("values_error"):
                                notes.append(f"values of {item['name']} not readable: {item['values_error']}")
            if not done:
                raise UsageError(
                    f"the checkpoint reader for {shown} ended with {record.outcome} (exit {record.exit_code}, "
                    f"{record.timed_out or 'no'} timeout) after {record.duration_s:.0f}s: {output.strip()[-600:]}",
                    f"full log: {record.log_path}; a larger timeout_s or values=false may help",
                )
    if detected.index_names is not None:
        absent = sorted(detected.index_names - set(records))
        if absent:
            notes.append(f"{len(absent)} tensors named in the index are in no shard: {', '.join(absent[:5])}")
    values_checked = inp.values and all("nan" in r for r in records.values())
    return Side(path=shown, format=detected.format, records=records, notes=notes, values_checked=values_checked,
                interpreter=str(python), inventory_path=ctx.workspace.relative(inventory))


# ------------------------------------------------------------------ comparing two sides


def likely_renames(missing: list[str], unexpected: list[str], ref: Side, side: Side) -> list[Rename]:
    """Pairs (reference key, path key) of equal shape and dtype, best name similarity and equal content first."""
    from rapidfuzz import fuzz

    by_kind: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for name in unexpected:
        r = side.records[name]
        by_kind.setdefault((r["dtype"], tuple(r["shape"])), []).append(name)
    missing_per_kind = Counter((ref.records[m]["dtype"], tuple(ref.records[m]["shape"])) for m in missing)
    candidates: list[tuple[float, Rename]] = []
    for old in missing:
        a = ref.records[old]
        kind = (a["dtype"], tuple(a["shape"]))
        pool = by_kind.get(kind, [])
        # The only missing and the only unexpected tensor of a shape and dtype pair up whatever their names.
        only_pair = len(pool) == 1 and missing_per_kind[kind] == 1
        for new in pool:
            b = side.records[new]
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


def compare(side: Side, ref: Side) -> dict[str, list[Any]]:
    missing = sorted(set(ref.records) - set(side.records))
    unexpected = sorted(set(side.records) - set(ref.records))
    shapes, dtypes = [], []
    for name in sorted(set(ref.records) & set(side.records)):
        a, b = side.records[name], ref.records[name]
        if a["shape"] != b["shape"]:
            shapes.append(ShapeMismatch(name=name, shape=a["shape"], reference_shape=b["shape"]))
        if a["dtype"] != b["dtype"]:
            dtypes.append(DtypeMismatch(name=name, dtype=a["dtype"], reference_dtype=b["dtype"]))
    return {"missing": missing, "unexpected": unexpected, "shape_mismatches": shapes, "dtype_mismatches": dtypes,
            "likely_renames": likely_renames(missing, unexpected, ref, side)}


# ------------------------------------------------------------------ the tool


async def inspect_checkpoint(inp: InspectCheckpointInput, ctx: ToolContext) -> InspectCheckpointResult:
    from rootcause.tools.run import new_run_id

    store = None
    if inp.session_id:
        from rootcause.tools.record.store import SessionStore

        store = SessionStore(ctx.workspace)
        store.load(inp.session_id)
    # Resolve both paths before running anything, so a bad compare_to fails fast.
    ctx.workspace.resolve(inp.path, must_exist=True, what="path")
    if inp.compare_to:
        ctx.workspace.resolve(inp.compare_to, must_exist=True, what="compare_to")
    out_dir = ctx.workspace.state_dir("numerics", "checkpoint-" + new_run_id())
    want_hash = inp.values and inp.compare_to is not None
    if inp.compare_to:
        import anyio

        sides: dict[str, Side] = {}
        failures: list[Exception] = []

        async def read(raw: str, label: str) -> None:
            try:
                sides[label] = await read_side(raw, inp, ctx, out_dir, label, want_hash)
            except Exception as exc:  # re-raised below as itself, not wrapped in an ExceptionGroup
                failures.append(exc)
                group.cancel_scope.cancel()

        # Both checkpoints are read at once (two workers): the wall time of one torch start-up, not two.
        async with anyio.create_task_group() as group:
            group.start_soon(read, inp.path, "path")
            group.start_soon(read, inp.compare_to, "compare_to")
        if failures:
            raise failures[0]
        side = sides["path"]
    else:
        side = await read_side(inp.path, inp, ctx, out_dir, "path", want_hash)
    nonfinite = nonfinite_of(side)
    summary = side.summary()
    lists: dict[str, list[Any]] = {"nonfinite": nonfinite}
    ref_summary = None
    notes = list(side.notes)
    if inp.compare_to:
        ref = sides["compare_to"]
        ref_summary = ref.summary()
        notes += [f"compare_to: {n}" for n in ref.notes]
        lists.update(compare(side, ref))
    counts = {key: len(items) for key, items in lists.items()}
    full_list_path = None
    if any(n > LIST_LIMIT for n in counts.values()):
        full = out_dir / "lists.json"
        full.write_text(json.dumps({k: [i.model_dump(mode="json", by_alias=True) if isinstance(i, BaseModel) else i
                                        for i in v] for k, v in lists.items()}, indent=1), encoding="utf-8")
        full_list_path = ctx.workspace.relative(full)
    capped = {key: items[:LIST_LIMIT] for key, items in lists.items()}
    result = InspectCheckpointResult(
        path=side.path, format=side.format, tensors=summary.tensors, parameters=summary.parameters,
        bytes=summary.bytes, dtypes=summary.dtypes, values_checked=side.values_checked,
        nonfinite_tensors=len(nonfinite), compare_to=ref_summary, counts=counts, full_list_path=full_list_path,
        inventory_path=side.inventory_path, interpreter=side.interpreter, notes=notes, **capped,
    )
    if store is not None and inp.session_id:
        from rootcause.tools.record.findings import CheckpointEvidence, dump

        evidence = CheckpointEvidence.model_validate({
            **result.model_dump(mode="json", include={"path", "format", "tensors", "parameters", "dtypes",
                                                      "nonfinite_tensors", "counts", "values_checked"}),
            "nonfinite": [n.name for n in nonfinite[:20]],
            "likely_renames": [r.model_dump(by_alias=True, include={"from_", "to"})
                               for r in result.likely_renames[:20]],
        })
        store.record(inp.session_id, "inspect_checkpoint", evidence.render(), dump(evidence), phase=None)
    return result
