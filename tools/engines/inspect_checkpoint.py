"""inspect_checkpoint: what a checkpoint holds (per group: model, optimizer, ...), which values are non-finite,
how it differs from a reference, and what a load into the project's own model / optimizer would leave out.

The server never imports torch: the tensors are read by `_ckpt_worker.py` running as a
subprocess of the target interpreter (through the shared runner), one tensor at a time,
and written as JSON lines under `.rootcause/numerics/<id>/`. With load_into the same worker
imports the project's callable and describes what it returns as the load sees it. This module
picks the format and the interpreter, runs the workers and renders the result; the inventories are
compared in tools/numerics/checkpoint_diff.py and a load is audited in tools/numerics/load_audit.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.results import ToolResult
from rootcause.tools.numerics.checkpoint_diff import (
    DtypeMismatch,
    NonFinite,
    Rename,
    ShapeMismatch,
    Side,
    SideSummary,
    compare,
    nonfinite_of,
)
from rootcause.tools.numerics.formats import TOP_LEVEL_KEY, Detected, Format, detect, fallback_path
from rootcause.tools.numerics.load_audit import Audit, CheckpointGroup, Target, audit, groups_of

LIST_LIMIT = 100
WORKER = Path(__file__).parents[1] / "numerics" / "_ckpt_worker.py"
TARGET_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)
MAX_SPEC = 300
DCP_SEMANTICS = ("dcp.load reads only the target's keys: a stored key the target lacks is skipped without a word; "
                 "a key the target has and the checkpoint lacks makes dcp.load raise (unless the planner allows a "
                 "partial load)")
STATE_DICT_SEMANTICS = ("load_state_dict(strict=False) skips both kinds without a word (strict=True raises on "
                        "either); an optimizer restores its stored state by position, any other Stateful takes "
                        "what is stored under its key")


class InspectCheckpointInput(BaseModel):
    """Inspect a checkpoint: tensors, parameters, dtypes, NaN/Inf per tensor, and key diffs against compare_to.

    Contents are grouped by top-level key (model, optimizer, scheduler, scaler, extra, other). With
    compare_to (a reference checkpoint) or load_into (the project's own target, e.g. a freshly
    built model and optimizer): keys missing, unexpected, with another shape or dtype, and likely
    renames (a missing key paired with an unexpected one of the same shape and dtype, ranked by
    name similarity and equal content). Reads torch.save state dicts
    (weights_only=True), safetensors files, Hugging Face sharded checkpoints (*.index.json) and
    torch.distributed.checkpoint (DCP) directories. torch runs in the project's interpreter as
    a subprocess, one tensor at a time.
    """

    path: str = Field(description="The checkpoint to inspect: a file, a DCP directory or an *.index.json "
                                  "(relative to the root or absolute inside it).")
    compare_to: str | None = Field(None, description="A reference checkpoint (e.g. the model's own state dict or "
                                                     "a known-good checkpoint). missing = keys the reference has "
                                                     "and path lacks; unexpected = keys only path has.")
    load_into: str | None = Field(None, description="module:callable of the project (imported with the root on "
                                                    "sys.path, run by python=) returning what its code loads path "
                                                    "into: an nn.Module, an optimizer, a dict of them ({'model': m, "
                                                    "'optim': opt}) or a state dict. missing = what it expects and "
                                                    "path lacks; unexpected = stored entries it will NOT restore.")
    python: str | None = Field(None, description="Interpreter with torch to read torch / DCP checkpoints; default "
                                                 "<root>/.venv/bin/python, else the server's own.")
    allow_pickle: bool = Field(False, description="Load torch.save files that weights_only=True refuses. "
                                                  "Unpickling runs arbitrary code: only for files you trust.")
    values: bool = Field(True, description="Read tensor values for NaN/Inf counts and content hashes; false "
                                           "lists names, dtypes and shapes only (fast).")
    timeout_s: float = Field(3600.0, description="Wall-clock limit for reading one checkpoint.")
    session_id: str | None = Field(None, description="Append the findings to this session as evidence.")


class LoadTarget(BaseModel):
    spec: str = Field(description="The load_into callable.")
    description: str = Field(description="What it returned, e.g. 'dict of 2: model Net (nn.Module), ...'.")
    semantics: str = Field(description="How the load treats keys on one side only (dcp.load or load_state_dict).")
    placed_at: str = Field(description="Where the target was compared: the checkpoint key a single model / "
                                       "optimizer / state dict sits under (best key overlap), or a torch.save "
                                       "dict's keys matched by group ('optim -> optimizer'); '' = as returned.")
    tensors: int
    entries: int
    not_restored: int = Field(description="Stored keys the target lacks: the load leaves them out (= unexpected).")
    missing: int = Field(description="Keys the target has and the checkpoint lacks (= missing).")
    would_raise: list[str] = Field(default_factory=list, description="What the load itself would refuse.")
    interpreter: str
    inventory_path: str = Field(description="The target's tensors and entries as JSON lines.")


class InspectCheckpointResult(ToolResult):
    path: str
    format: Format
    tensors: int
    parameters: int
    bytes: int
    dtypes: dict[str, int] = Field(description="Tensor count per dtype.")
    entries: int = Field(0, description="Stored values that are not tensors.")
    groups: list[CheckpointGroup] = Field(default_factory=list, description="The contents per group, in the "
                                                                            "order model, optimizer, ...")
    values_checked: bool
    nonfinite: list[NonFinite] = Field(description="Tensors holding NaN or Inf (count per kind).")
    nonfinite_tensors: int
    compare_to: SideSummary | None = None
    load_into: LoadTarget | None = None
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
        others = f", {_plural(self.entries, 'other entry', 'other entries')}" if self.entries else ""
        lines = [f"{self.format} checkpoint {self.path}: {self.tensors} tensors, {self.parameters:,} parameters, "
                 f"{human_bytes(self.bytes)} ({hist or 'no tensors'}){others}."]
        lines += group_table(self.groups, audited=self.load_into is not None)
        if self.load_into is not None:
            lines += audit_lines(self)
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
        if self.compare_to is not None or self.load_into is not None:
            for s in self.shape_mismatches[:5]:
                lines.append(f"Shape: {s.name} {s.shape} vs {self._other} {s.reference_shape}")
            for d in self.dtype_mismatches[:5]:
                lines.append(f"Dtype: {d.name} {d.dtype} vs {self._other} {d.reference_dtype}")
            for r in self.likely_renames[:8]:
                content = {True: ", same content", False: ", different content", None: ""}[r.same_content]
                pair = (f"stored {r.to} is the target's {r.from_}" if self.load_into is not None
                        else f"{r.from_} -> {r.to}")
                lines.append(f"Likely rename: {pair} (name similarity {r.name_similarity:.2f}{content})")
        lines += [f"Note: {n}" for n in self.notes]
        if self.full_list_path:
            lines.append(f"Full lists: {self.full_list_path}")
        return "\n".join(lines)

    @property
    def _other(self) -> str:
        return "target" if self.load_into is not None else "reference"


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _shown_key(key: str) -> str:
    return "(top level)" if key == TOP_LEVEL_KEY else key


def group_table(groups: list[CheckpointGroup], audited: bool) -> list[str]:
    if not groups:
        return []
    rows = [["group", "keys", "tensors", "parameters", "bytes", "entries", "dtypes"]
            + (["not restored", "missing"] if audited else [])]
    for g in groups:
        keys = ", ".join(_shown_key(k) for k in g.keys[:3]) + (f" +{len(g.keys) - 3}" if len(g.keys) > 3 else "")
        dtypes = ", ".join(f"{k}: {v}" for k, v in sorted(g.dtypes.items(), key=lambda kv: -kv[1])[:3]) or "-"
        row = [g.group, keys, str(g.tensors), f"{g.parameters:,}", human_bytes(g.bytes), str(g.entries), dtypes]
        if audited:
            row += [str(g.not_restored or 0), str(g.missing or 0)]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    numeric = {2, 3, 4, 5, 7, 8}
    return ["  " + "  ".join(cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                             for i, cell in enumerate(row)).rstrip() for row in rows]


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _examples(names: list[str], total: int, limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f" … (+{total - min(limit, len(names))})" if total > limit else "")


def audit_lines(result: InspectCheckpointResult) -> list[str]:
    target = result.load_into
    assert target is not None
    placed = f", compared under '{target.placed_at}'" if target.placed_at else ""
    lines = [f"Load into {target.spec}: {target.description}{placed}. {target.semantics}."]
    for g in result.groups:
        if g.not_restored:
            entries = g.not_restored - (g.not_restored_tensors or 0)
            parts = [f"{_plural(g.not_restored_tensors or 0, 'tensor')} ({human_bytes(g.not_restored_bytes or 0)})"
                     ] if g.not_restored_tensors else []
            parts += [_plural(entries, "entry", "entries")] if entries else []
            what = " and ".join(parts)
            lines.append(f"WILL NOT BE RESTORED ({g.group}: stored, absent from the target): {what}: "
                         f"{_examples(g.examples.get('not_restored', []), g.not_restored)}")
    for g in result.groups:
        if g.missing:
            lines.append(f"MISSING ({g.group}: the target expects it, the checkpoint lacks it): {g.missing}: "
                         f"{_examples(g.examples.get('missing', []), g.missing)}")
    lines += [f"Would raise: {r}" for r in target.would_raise]
    if not target.not_restored and not target.missing:
        lines.append("Every stored entry is restored and nothing the target expects is missing.")
    return lines


# ------------------------------------------------------------------ reading one side


def _interpreter(detected: Detected, inp: InspectCheckpointInput, ctx: ToolContext) -> Path:
    from rootcause.tools.run.interpreters import resolve_python

    if set(detected.groups) == {"safetensors"} and not inp.python:
        return Path(sys.executable)  # numpy is our own dependency; safetensors values need no torch
    return resolve_python(ctx.workspace, inp.python)


TARGET_ERRORS = {
    "target_import": ("importing it from {root} failed: {message}",
                      "load_into takes module:callable importable from the root with the root first on sys.path "
                      "(train.py at the root -> 'train:build_model'; a package -> 'pkg.models:build'); its import "
                      "must not start training"),
    "target_missing": ("{message}", "name a function of that module that builds and returns what the project "
                                    "loads the checkpoint into"),
    "target_not_callable": ("{message}", "name a function or class that takes no arguments"),
    "target_raised": ("raised {message}", "load_into is called with no arguments in python=; fix it, or point at a "
                                          "small function that builds the model / optimizer as the project does"),
    "target_unloadable": ("{message}: nothing a checkpoint is loaded into",
                          "return an nn.Module, an optimizer, a dict of them ({'model': model, 'optim': optimizer}) "
                          "or a state dict"),
}


def _worker_error(error: dict[str, Any], path: str, python: Path, spec: str | None = None,
                  root: Path | None = None) -> UsageError:
    code, message = error.get("error"), error.get("message", "")
    if spec is not None and code in TARGET_ERRORS:
        text, hint = TARGET_ERRORS[code]
        return UsageError(f"load_into {spec!r}: {text.format(message=message.rstrip('.'), root=root)}.", hint)
    if code == "weights_only_refused":
        return UsageError(
            f"{path} is a pickle that torch.load(weights_only=True) refuses: {message.rstrip('.')}.",
            "if you trust the file, pass allow_pickle=true (unpickling runs arbitrary code); "
            "better, re-save it as a plain state dict or safetensors",
        )
    if code == "no_torch":
        needs = f"load_into {spec!r}" if spec is not None else f"reading {path}"
        return UsageError(f"{needs} needs torch, which is not importable in {python}.",
                          "pass python= the project's interpreter that has torch installed")
    if spec is not None:
        return UsageError(f"load_into {spec!r}: {message}", "check that the callable returns a model, an optimizer "
                                                             "or a dict of them")
    return UsageError(f"cannot read {path}: {message}", "check that the file is a complete checkpoint")


async def _run_worker(argv: list[str], inp: InspectCheckpointInput, ctx: ToolContext, out: Path, label: str,
                      shown: str, python: Path, spec: str | None = None) -> list[dict[str, Any]]:
    """The worker's records (tensors, entries, notes, objects); its error as a UsageError in our words."""
    from rootcause.tools.run import run_captured

    record, output = await run_captured([*argv, "--out", str(out)], ctx.workspace, timeout_s=inp.timeout_s,
                                        label=f"inspect_checkpoint {label}", progress=ctx.progress)
    items: list[dict[str, Any]] = []
    done = False
    if out.is_file():
        with open(out, encoding="utf-8") as fh:
            for line in fh:
                item = json.loads(line)
                if item["kind"] == "error":
                    raise _worker_error(item, shown, python, spec, ctx.workspace.root)
                if item["kind"] == "done":
                    done = True
                else:
                    items.append(item)
    if not done:
        what = f"load_into {spec!r}" if spec is not None else f"the checkpoint reader for {shown}"
        raise UsageError(
            f"{what} ended with {record.outcome} (exit {record.exit_code}, {record.timed_out or 'no'} timeout) "
            f"after {record.duration_s:.0f}s: {output.strip()[-600:]}",
            f"full log: {record.log_path}; a larger timeout_s or values=false may help",
        )
    return items


async def read_side(raw_path: str, inp: InspectCheckpointInput, ctx: ToolContext, out_dir: Path, label: str,
                    want_hash: bool) -> Side:
    path = ctx.workspace.resolve(raw_path, must_exist=True, what=label)
    detected = detect(path, ctx.workspace)
    python = _interpreter(detected, inp, ctx)
    shown = ctx.workspace.relative(path)
    records: dict[str, dict[str, Any]] = {}
    entries: dict[str, dict[str, Any]] = {}
    notes = list(detected.notes)
    inventory = out_dir / f"{label}.jsonl"
    with open(inventory, "w", encoding="utf-8") as merged:
        for number, (kind, files) in enumerate(detected.groups.items()):
            argv = [str(python), str(WORKER), "--format", kind]
            argv += ["--allow-pickle"] * inp.allow_pickle + ["--hash"] * want_hash + ["--no-values"] * (not inp.values)
            items = await _run_worker(argv + [str(f) for f in files], inp, ctx, out_dir / f"{label}.{number}.jsonl",
                                      label, shown, python)
            for item in items:
                if item["kind"] == "note":
                    notes.append(item["text"])
                    continue
                item["file"] = ctx.workspace.relative(Path(item["file"]))
                item.setdefault("path", fallback_path(item["name"]))
                merged.write(json.dumps(item) + "\n")
                into = entries if item["kind"] == "entry" else records
                if item["name"] in into:
                    notes.append(f"{'entry' if into is entries else 'tensor'} {item['name']} appears in two "
                                 "shards; the first is kept")
                    continue
                into[item["name"]] = item
                if item.get("values_error"):
                    notes.append(f"values of {item['name']} not readable: {item['values_error']}")
    if detected.index_names is not None:
        absent = sorted(detected.index_names - set(records))
        if absent:
            notes.append(f"{len(absent)} tensors named in the index are in no shard: {', '.join(absent[:5])}")
    values_checked = inp.values and all("nan" in r for r in records.values())
    return Side(path=shown, format=detected.format, records=records, entries=entries, notes=notes,
                values_checked=values_checked, interpreter=str(python),
                inventory_path=ctx.workspace.relative(inventory))


def check_spec(spec: str) -> str:
    spec = spec.strip()
    module, _, name = spec.partition(":")
    dotted = module.removeprefix("./").removesuffix(".py").replace("/", ".")
    if (module.endswith(".py") or "/" in module) and TARGET_SPEC.fullmatch(f"{dotted}:{name or 'build'}"):
        raise UsageError(f"load_into names a module, not a file: {spec[:120]!r}.",
                         f"write it as '{dotted}:{name or 'build'}'")
    if len(spec) > MAX_SPEC or not TARGET_SPEC.fullmatch(spec):
        raise UsageError(f"load_into takes module:callable (e.g. 'train:build_model'), not {spec[:120]!r}.",
                         "a dotted module importable from the root, a colon, then the function's name")
    return spec


async def read_target(spec: str, checkpoint_format: Format, inp: InspectCheckpointInput, ctx: ToolContext,
                      out_dir: Path) -> Target:
    from rootcause.tools.run.interpreters import resolve_python

    python = resolve_python(ctx.workspace, inp.python)
    flattening = "dcp" if checkpoint_format == "dcp" else "torch"
    argv = [str(python), str(WORKER), "--format", flattening, "--target", spec, "--root", str(ctx.workspace.root)]
    items = await _run_worker(argv, inp, ctx, out_dir / "load_into.0.jsonl", "load_into", spec, python, spec)
    records: dict[str, dict[str, Any]] = {}
    entries: dict[str, dict[str, Any]] = {}
    objects: list[dict[str, Any]] = []
    about: dict[str, Any] = {"description": "?", "single": False}
    inventory = out_dir / "load_into.jsonl"
    with open(inventory, "w", encoding="utf-8") as merged:
        for item in items:
            if item["kind"] == "object":
                objects.append(item)
            elif item["kind"] == "target":
                about = item
            elif item["kind"] in ("tensor", "entry"):
                item.pop("file", None)
                merged.write(json.dumps(item) + "\n")
                (entries if item["kind"] == "entry" else records)[item["name"]] = item
    return Target(records=records, entries=entries, objects=objects, description=about["description"],
                  single=about["single"], interpreter=str(python), inventory_path=ctx.workspace.relative(inventory))


# ------------------------------------------------------------------ the tool


async def inspect_checkpoint(inp: InspectCheckpointInput, ctx: ToolContext) -> InspectCheckpointResult:
    import anyio
    from rootcause.tools.run import new_run_id

    store = None
    if inp.session_id:
        from rootcause.tools.record.store import SessionStore

        store = SessionStore(ctx.workspace)
        store.load(inp.session_id)
    if inp.compare_to and inp.load_into:
        raise UsageError("compare_to and load_into each name what path is compared with: give one of them.",
                         "compare_to for another checkpoint, load_into for the project's own model / optimizer; "
                         "call the tool twice for both")
    spec = check_spec(inp.load_into) if inp.load_into is not None else None
    # Resolve both paths and the format before running anything, so a bad argument fails fast.
    checkpoint = ctx.workspace.resolve(inp.path, must_exist=True, what="path")
    if inp.compare_to:
        ctx.workspace.resolve(inp.compare_to, must_exist=True, what="compare_to")
    checkpoint_format = detect(checkpoint, ctx.workspace).format if spec else None
    out_dir = ctx.workspace.state_dir("numerics", "checkpoint-" + new_run_id())
    want_hash = inp.values and inp.compare_to is not None
    read: dict[str, Any] = {}
    failures: list[Exception] = []

    async def run(label: str, job: Any) -> None:
        try:
            read[label] = await job
        except Exception as exc:  # re-raised below as itself, not wrapped in an ExceptionGroup
            failures.append(exc)
            group.cancel_scope.cancel()

    # Both sides are read at once (two workers): the wall time of one torch start-up, not two.
    async with anyio.create_task_group() as group:
        group.start_soon(run, "path", read_side(inp.path, inp, ctx, out_dir, "path", want_hash))
        if inp.compare_to:
            group.start_soon(run, "compare_to", read_side(inp.compare_to, inp, ctx, out_dir, "compare_to", want_hash))
        if spec and checkpoint_format:
            group.start_soon(run, "load_into", read_target(spec, checkpoint_format, inp, ctx, out_dir))
    if failures:
        raise failures[0]
    side: Side = read["path"]
    nonfinite = nonfinite_of(side)
    summary = side.summary()
    lists: dict[str, list[Any]] = {"nonfinite": nonfinite}
    ref_summary = None
    notes = list(side.notes)
    found: Audit | None = None
    target_summary = None
    if inp.compare_to:
        ref = read["compare_to"]
        ref_summary = ref.summary()
        notes += [f"compare_to: {n}" for n in ref.notes]
        lists.update(compare(side, ref))
    if spec:
        target: Target = read["load_into"]
        found = audit(side, target)
        lists.update({k: getattr(found, k) for k in ("missing", "unexpected", "shape_mismatches",
                                                     "dtype_mismatches", "likely_renames")})
        target_summary = LoadTarget(
            spec=spec, description=target.description, placed_at=found.placed_at,
            semantics=DCP_SEMANTICS if side.format == "dcp" else STATE_DICT_SEMANTICS,
            tensors=len(target.records), entries=len(target.entries), not_restored=len(found.unexpected),
            missing=len(found.missing), would_raise=found.would_raise, interpreter=target.interpreter,
            inventory_path=target.inventory_path)
    groups = groups_of(side, found)
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
        bytes=summary.bytes, dtypes=summary.dtypes, entries=len(side.entries), groups=groups,
        values_checked=side.values_checked, nonfinite_tensors=len(nonfinite), compare_to=ref_summary,
        load_into=target_summary, counts=counts, full_list_path=full_list_path, inventory_path=side.inventory_path,
        interpreter=side.interpreter, notes=notes, **capped,
    )
    if store is not None and inp.session_id:
        from rootcause.tools.record.findings import CheckpointEvidence, dump

        evidence = CheckpointEvidence.model_validate({
            **result.model_dump(mode="json", include={"path", "format", "tensors", "parameters", "dtypes",
                                                      "nonfinite_tensors", "counts", "values_checked"}),
            "nonfinite": [n.name for n in nonfinite[:20]],
            "likely_renames": [r.model_dump(by_alias=True, include={"from_", "to"})
                               for r in result.likely_renames[:20]],
            "load_into": spec,
            "groups": [g.model_dump(include={"group", "keys", "tensors", "entries", "not_restored", "missing"})
                       for g in groups],
        })
        store.record(inp.session_id, "inspect_checkpoint", evidence.render(), dump(evidence), phase=None)
    return result
