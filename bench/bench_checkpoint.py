"""Peak memory of inspect_checkpoint on a >= 1 GB safetensors file (goal: under 2x the largest tensor).

Writes the file with numpy in a temp dir (no torch), runs the tool in-process (its worker is a
child process), samples the children's RSS with psutil, and prints the peak against the
largest tensor. Baselines from the same run: the worker on a tiny file (interpreter + numpy)
and a naive read of the whole file into memory. The file is deleted afterwards.

    .venv/bin/python bench/bench_checkpoint.py
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MB = 1 << 20
LARGEST_ELEMENTS = 64 * MB  # float32: 256 MB
SMALL = [("F32", 16 * MB)] * 6 + [("BF16", 32 * MB)] * 6  # 12 x 64 MB


class PeakSampler:
    """Max RSS over the descendants of this process, sampled every 10 ms."""

    def __init__(self, pid: int | None = None) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for child in self.proc.children(recursive=True):
                try:
                    self.peak = max(self.peak, child.memory_info().rss)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            time.sleep(0.01)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def write_safetensors(path: Path, tensors: list[tuple[str, str, int]]) -> int:
    """Stream tensors (name, dtype, elements) of random values into a safetensors file; returns its size."""
    rng = np.random.default_rng(0)
    width = {"F32": 4, "BF16": 2}
    header, offset = {}, 0
    for name, dtype, n in tensors:
        header[name] = {"dtype": dtype, "shape": [n], "data_offsets": [offset, offset + n * width[dtype]]}
        offset += n * width[dtype]
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        for name, dtype, n in tensors:
            for start in range(0, n, 8 * MB):
                values = rng.standard_normal(min(8 * MB, n - start), dtype=np.float32)
                if start == 0 and name == "layers.3.weight":
                    values[:3] = [np.nan, np.inf, -np.inf]
                if dtype == "BF16":
                    values = (values.view(np.uint32) >> 16).astype(np.uint16)  # truncate float32 to bf16 bits
                fh.write(values.tobytes())
    return path.stat().st_size


def inspect(root: Path, name: str) -> tuple[dict, int, float]:
    import anyio
    from rootcause.tools.core.context import ToolContext
    from rootcause.tools.engines.inspect_checkpoint import InspectCheckpointInput, inspect_checkpoint

    started = time.perf_counter()
    with PeakSampler() as sampler:
        result = anyio.run(inspect_checkpoint, InspectCheckpointInput(path=name), ToolContext.for_root(root))
    return result.model_dump(mode="json"), sampler.peak, time.perf_counter() - started


def naive_load_peak(path: Path) -> int:
    # numpy has no bfloat16, so safetensors.numpy.load_file refuses the file: read all bytes at once instead.
    code = f"data = open({str(path)!r}, 'rb').read(); print(len(data))"
    with PeakSampler() as sampler:
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return sampler.peak


def main() -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp:
        root = Path(tmp)
        tensors = [("layers.0.weight", "F32", LARGEST_ELEMENTS)]
        tensors += [(f"layers.{i + 1}.weight", dtype, n) for i, (dtype, n) in enumerate(SMALL)]
        size = write_safetensors(root / "big.safetensors", tensors)
        write_safetensors(root / "tiny.safetensors", [("w", "F32", 1024)])
        largest = LARGEST_ELEMENTS * 4
        _, baseline_peak, _ = inspect(root, "tiny.safetensors")
        result, peak, seconds = inspect(root, "big.safetensors")
        naive = naive_load_peak(root / "big.safetensors")
    nonfinite = {n["name"]: (n["nan"], n["posinf"], n["neginf"]) for n in result["nonfinite"]}
    assert nonfinite == {"layers.3.weight": (1, 1, 1)}, nonfinite
    figures = {
        "file_mb": round(size / MB, 1),
        "largest_tensor_mb": round(largest / MB, 1),
        "worker_peak_rss_mb": round(peak / MB, 1),
        "peak_over_largest_tensor": round(peak / largest, 3),
        "goal_under_2x_largest": peak < 2 * largest,
        "baseline_worker_tiny_file_mb": round(baseline_peak / MB, 1),
        "naive_whole_file_read_peak_mb": round(naive / MB, 1),
        "naive_over_tool_peak": round(naive / peak, 2),
        "seconds": round(seconds, 2),
        "throughput_mb_s": round(size / MB / seconds, 1),
    }
    return figures


if __name__ == "__main__":
    figures = main()
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
