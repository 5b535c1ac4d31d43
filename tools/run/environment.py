"""Facts about the interpreter a command runs under, and the environment variables that matter.

The facts (Python version, key package versions, torch's CUDA view) come from running the
target interpreter itself through the runner: the server never imports torch. They are
cached per interpreter path, its mtime and its site-packages' mtime (an install changes
the latter), in memory and under `.rootcause/cache/`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pydantic import BaseModel, Field
from rootcause.tools.core.workspace import Workspace

PACKAGES = ("torch", "transformers", "accelerate", "deepspeed", "flash-attn", "triton", "numpy", "datasets",
            "peft", "safetensors", "tokenizers", "megatron-core", "xformers", "bitsandbytes", "nvidia-nccl-cu12",
            "vllm", "pytest")
ENV_PREFIXES = ("NCCL_", "TORCH_", "TORCHELASTIC_", "CUDA_", "PYTORCH_", "OMP_", "MASTER_", "NVIDIA_", "GLOO_",
                "CUBLAS_", "CUDNN_", "HF_", "TRANSFORMERS_", "ACCELERATE_", "DEEPSPEED_", "MKL_", "KMP_", "UCX_",
                "FI_", "TP_", "PJRT_", "XLA_")
ENV_NAMES = frozenset({"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                       "ROLE_RANK", "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME"})
SECRET_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
MARKER = "ROOTCAUSE_ENV_JSON="
_PROBE = f"""
import json, platform, sys
from importlib import metadata
out = {{"python_version": platform.python_version(), "implementation": platform.python_implementation(),
        "packages": {{}}}}
for name in {PACKAGES!r}:
    try:
        out["packages"][name] = metadata.version(name)
    except Exception:
        pass
if "torch" in out["packages"]:
    try:
        import torch
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["cuda_device_count"] = int(torch.cuda.device_count())
        out["cuda_version"] = torch.version.cuda
    except Exception as exc:
        out["error"] = "import torch failed: " + repr(exc)[:300]
print({MARKER!r} + json.dumps(out), flush=True)
"""


class EnvironmentFacts(BaseModel):
    python: str = Field(description="The interpreter the command's `python` resolves to.")
    python_version: str | None = None
    packages: dict[str, str] = Field(default_factory=dict, description="Installed versions of key packages.")
    cuda_available: bool | None = Field(None, description="torch.cuda.is_available(); null without torch.")
    cuda_device_count: int | None = None
    cuda_version: str | None = None
    env: dict[str, str] = Field(default_factory=dict,
                                description="Relevant environment variables of the run; secrets redacted.")
    error: str | None = Field(None, description="Why the interpreter facts could not be gathered.")

    def one_line(self) -> str:
        pkgs = ", ".join(f"{k} {v}" for k, v in self.packages.items() if k in ("torch", "transformers"))
        cuda = "" if self.cuda_available is None else \
            f", CUDA {'yes' if self.cuda_available else 'no'} ({self.cuda_device_count} devices)"
        return f"Python {self.python_version or '?'}{', ' + pkgs if pkgs else ''}{cuda}"


def relevant_env(env: dict[str, str]) -> dict[str, str]:
    """The variables that shape a distributed / CUDA run, with secret-looking ones redacted."""
    picked: dict[str, str] = {}
    for name in sorted(env):
        if not (name in ENV_NAMES or name.startswith(ENV_PREFIXES)):
            continue
        upper = name.upper()
        picked[name] = "<redacted>" if any(part in upper for part in SECRET_PARTS) else env[name][:500]
    return picked


def _site_packages_mtime(python: Path) -> float:
    root = python.parent.parent
    newest = 0.0
    for candidate in (*root.glob("lib/python*/site-packages"), *root.glob("lib64/python*/site-packages")):
        try:
            newest = max(newest, candidate.stat().st_mtime)
        except OSError:
            continue
    return newest


def _cache_key(python: Path) -> str:
    try:
        mtime = python.stat().st_mtime
    except OSError:
        mtime = 0.0
    raw = f"{python}|{mtime}|{_site_packages_mtime(python)}"
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


_MEMORY: dict[str, dict] = {}


async def interpreter_facts(workspace: Workspace, python: Path) -> dict:
    """Python version, package versions and CUDA facts of an interpreter (cached)."""
    from rootcause.tools.run import run_captured

    key = _cache_key(python)
    if key in _MEMORY:
        return _MEMORY[key]
    cache = workspace.state_dir("cache") / f"interpreter-{key}.json"
    if cache.is_file():
        try:
            facts = json.loads(cache.read_text(encoding="utf-8"))
            _MEMORY[key] = facts
            return facts
        except (OSError, ValueError):
            pass
    record, output = await run_captured([str(python), "-c", _PROBE], workspace, timeout_s=120,
                                        label="environment probe", env={"PYTHONWARNINGS": "ignore"})
    line = next((ln for ln in output.splitlines() if ln.startswith(MARKER)), None)
    if record.outcome != "pass" or line is None:
        return {"error": f"probing {python} failed ({record.outcome}): {output.strip()[-300:]}"}
    facts = json.loads(line[len(MARKER):])
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(facts), encoding="utf-8")
    os.replace(tmp, cache)
    _MEMORY[key] = facts
    return facts


async def gather(workspace: Workspace, python: Path, run_env: dict[str, str]) -> EnvironmentFacts:
    facts = await interpreter_facts(workspace, python)
    return EnvironmentFacts(
        python=str(python), python_version=facts.get("python_version"), packages=facts.get("packages") or {},
        cuda_available=facts.get("cuda_available"), cuda_device_count=facts.get("cuda_device_count"),
        cuda_version=facts.get("cuda_version"), env=relevant_env(run_env), error=facts.get("error"),
    )
