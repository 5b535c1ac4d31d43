"""Checkpoint scanner that runs INSIDE the debugged project's interpreter, as a subprocess.

Self-contained on purpose: it imports nothing from rootcause (it runs in the user's
environment) and only the standard library at module level, so the server can import
`read_safetensors_header` from here without pulling numpy or torch. numpy and torch are
imported lazily and only when a file needs them.

Usage: python _ckpt_worker.py --format F --out OUT.jsonl [--allow-pickle] [--hash] [--no-values] FILE...
       python _ckpt_worker.py --format F --out OUT.jsonl --target MODULE:CALLABLE --root ROOT

OUT gets one JSON object per line: {"kind": "tensor", name, path, dtype, shape, numel, nbytes,
nan, posinf, neginf, hash, file}, {"kind": "entry", name, path, type, len, file} for a value that
is not a tensor, {"kind": "note", "text"}, and finally {"kind": "done"} or
{"kind": "error", "error": CODE, "message"} (exit code 3). `path` is the entry's place in the
nested checkpoint (absent when the checkpoint does not record it). Memory stays bounded: one
tensor at a time, values scanned in chunks. With --target, the records describe what the
callable returns as the load sees it (F: the checkpoint's format), then {"kind": "object", path,
type, class, group_sizes} per stateful object and {"kind": "target", description, single}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHUNK_BYTES = 8 * 1024 * 1024
DCP_BATCH_BYTES = 256 * 1024 * 1024

# safetensors dtype -> (bytes per element, canonical torch-style name)
ST_DTYPES: dict[str, tuple[int, str]] = {
    "F64": (8, "float64"), "F32": (4, "float32"), "F16": (2, "float16"), "BF16": (2, "bfloat16"),
    "F8_E4M3": (1, "float8_e4m3fn"), "F8_E5M2": (1, "float8_e5m2"),
    "I64": (8, "int64"), "I32": (4, "int32"), "I16": (2, "int16"), "I8": (1, "int8"),
    "U64": (8, "uint64"), "U32": (4, "uint32"), "U16": (2, "uint16"), "U8": (1, "uint8"),
    "BOOL": (1, "bool"), "C64": (8, "complex64"),
}
# canonical float name -> (unsigned width in bytes, exponent mask, mantissa mask, sign mask); IEEE-like layouts
FLOAT_BITS: dict[str, tuple[int, int, int, int]] = {
    "float64": (8, 0x7FF0000000000000, 0x000FFFFFFFFFFFFF, 0x8000000000000000),
    "float32": (4, 0x7F800000, 0x007FFFFF, 0x80000000),
    "float16": (2, 0x7C00, 0x03FF, 0x8000),
    "bfloat16": (2, 0x7F80, 0x007F, 0x8000),
    "float8_e5m2": (1, 0x7C, 0x03, 0x80),
}


class WorkerError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------ safetensors header (no torch)


def read_safetensors_header(path: str | Path) -> tuple[dict[str, Any], int]:
    """The header dict (without __metadata__) and the offset where tensor data starts."""
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise WorkerError("not_safetensors", f"{path} is shorter than a safetensors header")
        (length,) = struct.unpack("<Q", raw)
        size = Path(path).stat().st_size
        if length < 2 or length > min(size - 8, 100 * 1024 * 1024):
            raise WorkerError("not_safetensors", f"{path}: header length {length} does not fit the file")
        blob = fh.read(length)
    try:
        header = json.loads(blob)
    except ValueError as exc:
        raise WorkerError("not_safetensors", f"{path}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise WorkerError("not_safetensors", f"{path}: header is not a JSON object")
    header.pop("__metadata__", None)
    return header, 8 + length


def looks_like_safetensors(path: str | Path) -> bool:
    try:
        read_safetensors_header(path)
        return True
    except (WorkerError, OSError):
        return False


# ------------------------------------------------------------------ value scanning


def _count_bits(words: Any, dtype: str) -> tuple[int, int, int]:
    """NaN, +Inf, -Inf counts of a numpy array of unsigned words holding `dtype` bit patterns."""
    import numpy as np

    if dtype == "float8_e4m3fn":  # no infinities; NaN is S.1111.111
        return int(np.count_nonzero((words & 0x7F) == 0x7F)), 0, 0
    _, exp_mask, mant_mask, sign_mask = FLOAT_BITS[dtype]
    exp_all = (words & words.dtype.type(exp_mask)) == words.dtype.type(exp_mask)
    if not exp_all.any():  # the common case: all finite, no further temporaries
        return 0, 0, 0
    mant_zero = (words & words.dtype.type(mant_mask)) == 0
    nan = int(np.count_nonzero(exp_all & ~mant_zero))
    inf = exp_all & mant_zero
    neg = int(np.count_nonzero(inf & ((words & words.dtype.type(sign_mask)) != 0)))
    return nan, int(np.count_nonzero(inf)) - neg, neg


_UNSIGNED = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def scan_bytes(chunks: Iterator[Any], dtype: str, want_hash: bool) -> dict[str, Any]:
    """Count non-finite values and hash raw bytes, chunk by chunk (each chunk a uint8 numpy array)."""
    import numpy as np

    counts = [0, 0, 0]
    digest = hashlib.blake2b(digest_size=16) if want_hash else None
    width = FLOAT_BITS.get(dtype, (1,))[0] if dtype != "float8_e4m3fn" else 1
    floating = dtype in FLOAT_BITS or dtype == "float8_e4m3fn"
    for chunk in chunks:
        if digest is not None:
            digest.update(memoryview(chunk))
        if floating:
            words = chunk.view(np.dtype(_UNSIGNED[width]).newbyteorder("<"))
            for i, n in enumerate(_count_bits(words, dtype)):
                counts[i] += n
    return {"nan": counts[0], "posinf": counts[1], "neginf": counts[2],
            "hash": digest.hexdigest() if digest is not None else None}


def _file_chunks(path: str, offset: int, nbytes: int) -> Iterator[Any]:
    """Memory-map one window at a time: resident memory stays at one chunk, not one tensor."""
    import numpy as np

    done = 0
    chunk = CHUNK_BYTES - CHUNK_BYTES % 8
    while done < nbytes:
        size = min(chunk, nbytes - done)
        window = np.memmap(path, dtype=np.uint8, mode="r", offset=offset + done, shape=(size,))
        yield window
        del window
        done += size


def _has_torch_safetensors() -> bool:
    try:
        import safetensors  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------ formats


def scan_safetensors(path: str, values: bool, want_hash: bool) -> Iterator[dict[str, Any]]:
    header, data_start = read_safetensors_header(path)
    can_scan = values and _has_numpy()
    torch_fallback = values and not can_scan and _has_torch_safetensors()
    if values and not can_scan and not torch_fallback:
        yield {"kind": "note", "text": f"values not read: neither numpy nor torch+safetensors in {sys.executable}"}
    for name, info in header.items():
        st_dtype = info.get("dtype", "?")
        dtype = ST_DTYPES.get(st_dtype, (0, st_dtype.lower()))[1]
        shape = list(info.get("shape", []))
        begin, end = info.get("data_offsets", [0, 0])
        record = {"name": name, "path": [name], "dtype": dtype, "shape": shape, "numel": _numel(shape),
                  "nbytes": end - begin}
        if can_scan:
            record.update(scan_bytes(_file_chunks(path, data_start + begin, end - begin), dtype, want_hash))
        elif torch_fallback:
            record.update(_scan_torch_tensor(_safetensors_torch_tensor(path, name), want_hash))
        yield record


def _safetensors_torch_tensor(path: str, name: str) -> Any:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as fh:
        return fh.get_tensor(name)


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _torch_dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _scan_torch_tensor(t: Any, want_hash: bool) -> dict[str, Any]:
    """Counts and hash of a torch tensor: through numpy views when numpy exists, else torch ops."""
    import torch

    dtype = _torch_dtype_name(t)
    flat = t.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
        dtype = _torch_dtype_name(flat)
    width = flat.element_size()
    if _has_numpy():
        as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]
        step = max(1, CHUNK_BYTES // max(width, 1))

        def chunks() -> Iterator[Any]:
            for start in range(0, flat.numel(), step):
                part = flat[start:start + step].contiguous()
                yield part.view(as_int).numpy().view("uint8")

        known = dtype if (dtype in FLOAT_BITS or dtype == "float8_e4m3fn") else "int"
        return scan_bytes(chunks(), known, want_hash)
    counts = [0, 0, 0]
    if flat.is_floating_point():
        step = max(1, CHUNK_BYTES // max(width, 1))
        for start in range(0, flat.numel(), step):
            part = flat[start:start + step]
            if part.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                part = part.float()
            counts[0] += int(torch.isnan(part).sum())
            counts[1] += int(torch.isposinf(part).sum())
            counts[2] += int(torch.isneginf(part).sum())
    return {"nan": counts[0], "posinf": counts[1], "neginf": counts[2], "hash": None}


def _holds_state(value: Any) -> bool:
    """A list or tuple is walked into when it holds a tensor or a container (DCP's rule for lists)."""
    import torch

    return any(isinstance(v, (torch.Tensor, dict)) or (isinstance(v, (list, tuple)) and _holds_state(v))
               for v in value)


def _flatten(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every leaf of a nested checkpoint (dicts / lists of state dicts): tensors and the other values, by path."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _flatten(value, (*path, str(key)))
    elif isinstance(obj, (list, tuple)) and _holds_state(obj):
        for i, value in enumerate(obj):
            yield from _flatten(value, (*path, i))
    elif path:
        yield path, obj


def _name(path: tuple[Any, ...]) -> str:
    return ".".join(map(str, path))


def _tensor_record(path: tuple[Any, ...], tensor: Any) -> dict[str, Any]:
    shape = [int(d) for d in tensor.shape]  # a DTensor's global shape
    numel = _numel(shape)
    return {"name": _name(path), "path": list(path), "dtype": _torch_dtype_name(tensor), "shape": shape,
            "numel": numel, "nbytes": numel * tensor.element_size()}


def _entry_record(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A non-tensor leaf (a step count, an lr, a config): its type, and its length when it has one."""
    record: dict[str, Any] = {"kind": "entry", "name": _name(path), "path": list(path), "type": type(value).__name__}
    if isinstance(value, (list, tuple, dict, str, bytes)):
        record["len"] = len(value)
    return record


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise WorkerError("no_torch", f"torch is not importable in {sys.executable}: {exc}") from None
    return torch


def _refusal_reason(text: str) -> str:
    """The line naming what the weights-only unpickler refused (e.g. `Unsupported global: ... argparse.Namespace`)."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    for line in text.splitlines():
        if "Unsupported" in line or "WeightsUnpickler error" in line:
            return line.strip().removeprefix("WeightsUnpickler error:").strip().split(". Please use")[0][:400]
    return " ".join(text.split())[:400]


def scan_torch_save(path: str, values: bool, want_hash: bool, allow_pickle: bool) -> Iterator[dict[str, Any]]:
    torch = _import_torch()
    import pickle
    import zipfile

    mmap = zipfile.is_zipfile(path)  # mmap keeps memory bounded; only the zip format supports it
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not allow_pickle, mmap=mmap)
    except pickle.UnpicklingError as exc:
        if not allow_pickle:
            raise WorkerError("weights_only_refused", _refusal_reason(str(exc))) from None
        raise WorkerError("load_failed", f"{type(exc).__name__}: {exc}"[:800]) from None
    except Exception as exc:
        raise WorkerError("load_failed", f"{type(exc).__name__}: {exc}"[:800]) from None
    if hasattr(obj, "state_dict") and not isinstance(obj, dict):
        obj = obj.state_dict()  # a pickled nn.Module, only reachable with allow_pickle
    for path, value in _flatten(obj):
        if not isinstance(value, torch.Tensor):
            yield _entry_record(path, value)
            continue
        record = _tensor_record(path, value)
        if values:
            record.update(_scan_torch_tensor(value, want_hash))
        yield record


def scan_dcp(path: str, values: bool, want_hash: bool) -> Iterator[dict[str, Any]]:
    torch = _import_torch()
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        metadata = dcp.FileSystemReader(path).read_metadata()
    except Exception as exc:
        raise WorkerError("load_failed", f"cannot read DCP metadata: {type(exc).__name__}: {exc}"[:800]) from None
    # planner_data is the flattening's {name: path} (dcp.save's default planner): the nesting before the dots
    paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
    entries = []
    for name, meta in metadata.state_dict_metadata.items():
        if isinstance(meta, TensorStorageMetadata):
            entries.append((name, meta.properties.dtype, list(meta.size)))
        else:
            record: dict[str, Any] = {"kind": "entry", "name": name, "type": "bytes"}
            if isinstance(paths.get(name), tuple):
                record["path"] = list(paths[name])
            yield record

    def describe(name: str, dtype: Any, shape: list[int]) -> dict[str, Any]:
        numel = _numel(shape)
        size = numel * torch.empty((), dtype=dtype).element_size()
        record = {"name": name, "dtype": str(dtype).removeprefix("torch."), "shape": shape, "numel": numel,
                  "nbytes": size}
        if isinstance(paths.get(name), tuple):
            record["path"] = list(paths[name])
        return record

    if not values:
        for entry in entries:
            yield describe(*entry)
        return
    batch: list[tuple[str, Any, list[int]]] = []
    batch_bytes = 0

    def flush() -> Iterator[dict[str, Any]]:
        state = {name: torch.empty(shape, dtype=dtype) for name, dtype, shape in batch}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dcp.load(state, storage_reader=dcp.FileSystemReader(path))
        except Exception as exc:
            for name, dtype, shape in batch:
                yield {**describe(name, dtype, shape), "values_error": f"{type(exc).__name__}: {exc}"[:300]}
            return
        for name, dtype, shape in batch:
            yield {**describe(name, dtype, shape), **_scan_torch_tensor(state.pop(name), want_hash)}

    for name, dtype, shape in entries:
        record = describe(name, dtype, shape)
        if batch and batch_bytes + record["nbytes"] > DCP_BATCH_BYTES:
            yield from flush()
            batch, batch_bytes = [], 0
        batch.append((name, dtype, shape))
        batch_bytes += record["nbytes"]
    if batch:
        yield from flush()


# ------------------------------------------------------------------ the target a checkpoint is loaded into


def _describe_exception(exc: BaseException, root: str) -> str:
    """`Type: message (at file:line in function)`, the innermost frame of the project's own code."""
    import traceback

    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    here = Path(__file__).resolve()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).is_file()
              and Path(f.filename).resolve() != here and Path(f.filename).resolve().is_relative_to(Path(root))]
    if frames:
        frame = frames[-1]
        text += f" (at {Path(frame.filename).resolve().relative_to(Path(root))}:{frame.lineno} in {frame.name})"
    return text


def call_target(spec: str, root: str) -> Any:
    """Import `module:callable` with the project's root first on sys.path and call it without arguments."""
    import importlib

    here = Path(__file__).resolve().parent
    # The script's own folder (rootcause's numerics) must not shadow the project's modules.
    sys.path[:] = [root] + [p for p in sys.path if p and Path(p).resolve() != here]
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit or any error of the project's import-time code
        raise WorkerError("target_import", _describe_exception(exc, root)) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            where = getattr(module, "__file__", None) or module_name
            raise WorkerError("target_missing", f"{module_name} ({where}) has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise WorkerError("target_not_callable", f"{spec} is a {type(obj).__name__}, not something to call")
    try:
        return obj()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise WorkerError("target_raised", _describe_exception(exc, root)) from None


def _is_stateful(value: Any) -> bool:
    """torch.distributed.checkpoint's Stateful: an object with state_dict() and load_state_dict()."""
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def _object_info(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"kind": "object", "path": list(path), "class": type(value).__name__}
    if isinstance(value, torch.nn.Module):
        info["type"] = "module"
    elif isinstance(value, torch.optim.Optimizer):
        info["type"] = "optimizer"
        info["group_sizes"] = [len(group["params"]) for group in value.param_groups]
    else:
        info["type"] = "stateful"
    return info


_KIND_WORDS = {"module": "nn.Module", "optimizer": "optimizer", "stateful": "Stateful"}


def _state_of(value: Any, label: str, bare_module_for_dcp: bool, root: str) -> Any:
    try:
        if bare_module_for_dcp:
            from torch.distributed.checkpoint.state_dict import get_model_state_dict

            return get_model_state_dict(value)
        return value.state_dict()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise WorkerError("target_raised", f"{label}.state_dict() raised {_describe_exception(exc, root)}") from None


def _flatten_for_dcp(state: Any) -> list[tuple[tuple[Any, ...], Any]]:
    """Leaves as dcp.load names them: torch's own flattening when this torch has it."""
    try:
        from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    except ImportError:
        return list(_flatten(state))
    flat, mapping = flatten_state_dict(state)
    return [(tuple(mapping[name]), value) for name, value in flat.items()]


def scan_target(spec: str, root: str, checkpoint_format: str) -> Iterator[dict[str, Any]]:
    """What the project's code would load into, as the load sees it.

    dcp.load calls state_dict() on every Stateful value of the dict it gets (an nn.Module, an optimizer, an
    AppState); load_state_dict reads the module's own state_dict(); a bare nn.Module audited against a DCP
    checkpoint is read through get_model_state_dict, torch's state dict for distributed checkpoints.
    """
    torch = _import_torch()
    target = call_target(spec, root)
    dcp = checkpoint_format == "dcp"
    objects: list[dict[str, Any]] = []
    if isinstance(target, dict):
        state: Any = {}
        for key, value in target.items():
            if _is_stateful(value) and not isinstance(value, torch.Tensor):
                objects.append(_object_info((str(key),), value))
                state[key] = _state_of(value, f"{key} ({type(value).__name__})", False, root)
            else:
                state[key] = value
    elif _is_stateful(target):
        objects.append(_object_info((), target))
        state = _state_of(target, type(target).__name__, dcp and isinstance(target, torch.nn.Module), root)
    else:
        raise WorkerError("target_unloadable", f"returned {type(target).__module__}.{type(target).__qualname__}"
                                               f"{'' if target is None else ' ' + repr(target)[:80]}")
    leaves = _flatten_for_dcp(state) if dcp else list(_flatten(state))
    if not leaves and not objects:
        raise WorkerError("target_unloadable", f"returned an empty {type(target).__name__}")
    tensors = 0
    for path, value in leaves:
        if isinstance(value, torch.Tensor):
            tensors += 1
            yield _tensor_record(path, value)
        else:
            yield _entry_record(path, value)
    single = not isinstance(target, dict) or (not objects and tensors == len(leaves)
                                              and all(len(path) == 1 for path, _ in leaves))
    if isinstance(target, dict) and objects:
        parts = [f"{o['path'][0]} {o['class']} ({_KIND_WORDS[o['type']]})" for o in objects[:6]]
        plain = len(target) - len(objects)
        description = f"dict of {len(target)}: {', '.join(parts)}" + (f" and {plain} more" if plain else "")
    elif isinstance(target, dict):
        description = f"dict of {len(target)} keys ({tensors} tensors)"
    else:
        description = f"{type(target).__name__} ({_KIND_WORDS[objects[0]['type']]})"
    yield from objects
    yield {"kind": "target", "description": description, "single": single}


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--format", required=True, choices=["safetensors", "torch", "dcp"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--allow-pickle", action="store_true")
    parser.add_argument("--hash", action="store_true")
    parser.add_argument("--no-values", action="store_true")
    parser.add_argument("--target", help="module:callable returning what the project loads the checkpoint into")
    parser.add_argument("--root", help="the project's root, first on sys.path for --target")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args(argv)
    values = not args.no_values
    with open(args.out, "w", encoding="utf-8") as out:

        def emit(obj: dict[str, Any]) -> None:
            out.write(json.dumps(obj, allow_nan=False) + "\n")

        try:
            for path in [args.root] if args.target else args.files:
                if args.target:
                    records = scan_target(args.target, args.root, args.format)
                elif args.format == "safetensors":
                    records = scan_safetensors(path, values, args.hash)
                elif args.format == "torch":
                    records = scan_torch_save(path, values, args.hash, args.allow_pickle)
                else:
                    records = scan_dcp(path, values, args.hash)
                count = 0
                for record in records:
                    if record.get("kind") in ("note", "target", "object"):
                        emit(record)
                        continue
                    if record.get("kind") == "entry":
                        emit({"file": path, **record})
                        continue
                    count += 1
                    emit({"kind": "tensor", "file": path, **record})
                    if count % 50 == 0:
                        print(f"scanned {count} tensors of {Path(path).name}", file=sys.stderr, flush=True)
                print(f"scanned {count} tensors of {Path(path).name}", file=sys.stderr, flush=True)
        except WorkerError as exc:
            emit({"kind": "error", "error": exc.code, "message": str(exc)})
            return 3
        except MemoryError as exc:
            emit({"kind": "error", "error": "memory", "message": f"MemoryError: {exc}"})
            return 3
        emit({"kind": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
