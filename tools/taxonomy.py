"""The error taxonomy as data: categories and the text patterns that identify them.

Rules are tried in order; the first whose pattern matches wins. Order encodes
precedence: specific root causes (OOM, import errors) come before generic wrappers
(distributed errors, test failures). The diagnosis engine applies the same table to the
root error of a log; start_session applies it to the symptom text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Category = Literal[
    "cuda_oom",
    "host_oom",
    "nonfinite",
    "gradient_explosion",
    "hang",
    "distributed_error",
    "checkpoint_mismatch",
    "shape_mismatch",
    "dtype_mismatch",
    "device_mismatch",
    "cuda_error",
    "import_error",
    "crash",
    "test_failure",
    "python_exception",
]

CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Rule:
    category: str
    pattern: re.Pattern[str]
    why: str


def _r(category: str, pattern: str, why: str) -> Rule:
    return Rule(category, re.compile(pattern, re.IGNORECASE), why)


RULES: tuple[Rule, ...] = (
    _r("cuda_oom", r"OutOfMemoryError|CUDA out of memory|cudaMalloc.*out of memory|"
       r"NCCL.*out of memory|CUBLAS_STATUS_ALLOC_FAILED|\bCUDA OOM\b|\bGPU OOM\b|"
       r"out of (gpu|device) memory|\bOOM\b.*\b(gpu|cuda|device)\b|\b(gpu|cuda|device)\b.*\bOOM\b",
       "GPU memory exhausted"),
    _r("host_oom", r"\bMemoryError\b|Killed\b|signal 9\b|SIGKILL|exit(ed)? (code|status)? ?(-9|137)\b|"
       r"oom[- ]killer|out of (host |cpu )?memory|\bhost OOM\b|\bOOM\b|std::bad_alloc",
       "host memory exhausted or OOM-killed"),
    _r("import_error", r"ModuleNotFoundError|ImportError|cannot import name|No module named",
       "a module or name could not be imported"),
    _r("checkpoint_mismatch", r"Missing key\(s\) in state_dict|Unexpected key\(s\) in state_dict|"
       r"size mismatch for|Error\(s\) in loading state_dict|load_state_dict|state[_ ]dict|"
       r"torch\.distributed\.checkpoint|\bDCP\b|CheckpointException|weights_only|"
       r"Weights only load failed|checkpoint.*(load|missing|mismatch|fail)|(load|loading).*checkpoint",
       "a checkpoint or state dict did not load"),
    _r("hang", r"Watchdog caught collective operation timeout|watchdog.*timeout|heartbeat.*timeout|"
       r"collective.*tim(ed|e)\s*out|Timed out waiting|timed out after|barrier.*tim(e|ed)\s*out|"
       r"gloo.*timeout|Connection timed out.*recv|\bhangs?\b|\bhung\b|\bstuck\b|deadlock|"
       r"no progress|idle timeout|NCCL timeout|freez",
       "no progress: a collective, barrier or process stopped advancing"),
    _r("nonfinite", r"\bnan\b|\binf\b|non-?finite|isfinite|inf(inite)? (loss|grad)|loss is nan|"
       r"Function '\w+' returned nan", "NaN or Inf values"),
    _r("gradient_explosion", r"grad(ient)?[_ ]norm.*(explod|blow|spike|huge|large)|"
       r"(explod|blow)\w*.*grad|loss spike|spik\w* (in )?loss|gradient explosion|diverg",
       "gradient norm or loss blowing up with finite values"),
    _r("cuda_error", r"device-side assert|illegal memory access|CUBLAS_STATUS|CUDNN_STATUS|cuDNN error|"
       r"CUDA error|CUDA kernel errors|misaligned address|cudaError", "a CUDA runtime error"),
    _r("device_mismatch", r"Expected all tensors to be on the same device|on different devices|"
       r"device mismatch|expected device|Input type \(.*cuda.*\) and weight type",
       "tensors on different devices"),
    _r("dtype_mismatch", r"expected (scalar type|dtype) \w+ but found|dtype mismatch|"
       r"mat1 and mat2 must have the same dtype|Input type .* and bias type|"
       r"expected both vectors to have same dtype|result type \w+ can't be cast|"
       r"should be the same dtype|found dtype \w+ but expected", "incompatible dtypes"),
    _r("shape_mismatch", r"shape mismatch|shapes? .* cannot be multiplied|size of tensor a .* must match|"
       r"mat1 and mat2 shapes|sizes of tensors must match|invalid shape|expected (input|shape).*shape|"
       r"is invalid for input of size|must match the size|Dimension out of range|"
       r"dimension mismatch|shape '\[", "tensor shapes do not fit"),
    _r("distributed_error", r"\bNCCL\b|ncclSystemError|ncclInternalError|ncclUnhandled|\bgloo\b|\bc10d\b|"
       r"ProcessGroup|rendezvous|RendezvousError|Connection reset by peer|ChildFailedError|"
       r"DistBackendError|DistNetworkError|collective mismatch|torch\.distributed|all_reduce|allreduce",
       "a communication failure between ranks"),
    _r("crash", r"SIGSEGV|Segmentation fault|SIGABRT|core dumped|Fatal Python error|SIGBUS|SIGILL|"
       r"Aborted|crash", "the process crashed"),
    _r("test_failure", r"AssertionError|assert .* (==|!=|<|>)|FAILED tests?/|test.*fail|fails? (the )?test",
       "a test assertion failed"),
)


def classify_text(text: str) -> tuple[str, str]:
    """(category, why) for free text, by the first matching rule; python_exception otherwise."""
    for rule in RULES:
        if rule.pattern.search(text):
            return rule.category, rule.why
    return "python_exception", "no more specific pattern matched"
