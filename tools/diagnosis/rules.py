"""Categorisation of a root error, as a table of rules tried in order (first match wins).

Each rule looks at the exception type, the message, or the function names on the
error's frames. Order is precedence: a specific root cause (GPU memory, a missing
module, a checkpoint that does not load) wins over the generic symptoms that often
surround it (NCCL errors, test failures). The categories are DESIGN.md's taxonomy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.diagnosis.errors import FoundError

_I = re.IGNORECASE


@dataclass(frozen=True)
class DiagRule:
    category: str
    type: re.Pattern[str] | None = None
    message: re.Pattern[str] | None = None
    function: re.Pattern[str] | None = None
    """Matches a function or file on the error's frames (e.g. a state-dict loader)."""
    type_and_function: bool = False
    """Both type and function must match (otherwise any one given field matching is enough)."""


def _rule(category: str, type_: str | None = None, message: str | None = None, function: str | None = None,
          flags: int = _I, both: bool = False) -> DiagRule:
    return DiagRule(category, re.compile(type_) if type_ else None,
                    re.compile(message, flags) if message else None,
                    re.compile(function) if function else None, both)


RULES: tuple[DiagRule, ...] = (
    _rule("cuda_oom", r"OutOfMemoryError$",
          r"CUDA out of memory|CUDA error: out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|"
          r"Cuda failure '?out of memory|(HIP|XPU|MPS backend|NPU) out of memory|"
          r"Failed to allocate \S+ (bytes )?(of|on) (device|GPU)|out of (GPU|device) memory|"
          r"cudaMalloc\w* .*out of memory|ncclUnhandledCudaError.*out of memory"),
    _rule("host_oom", r"MemoryError$",
          r"killed by signal: Killed|DefaultCPUAllocator: (can't allocate memory|not enough memory)|"
          r"std::bad_alloc|Cannot allocate memory|"
          r"Killed process \d+|oom-kill|Out of memory: Kill|SIGKILL|Signal 9\b|exitcode\s*:\s*-9\b|"
          r"exit (code|status) (137|-9)\b|out of (host|cpu|system) memory|\bOOM[- ]killer"),
    _rule("import_error", r"(ModuleNotFoundError|ImportError)$",
          r"cannot import name|No module named|cannot open shared object file|undefined symbol:|"
          r"DLL load failed|requires the \S+ library but it was not found|partially initialized module|"
          r"Failed to import \S+ because of the following error"),
    _rule("checkpoint_mismatch", r"(CheckpointException|UnpicklingError|SafetensorError|HeaderTooLarge)$",
          r"Error\(s\) in loading state_dict|Missing key\(s\) in state_dict|Unexpected key\(s\) in state_dict|"
          r"size mismatch for \S+: copying a param|Missing key in checkpoint|Weights only load failed|"
          r"PytorchStreamReader failed|invalid load key|failed finding central directory|"
          r"Unable to load weights from|is not a valid checkpoint|checkpoint (file|dir\w*) .*(not found|"
          r"does not exist|corrupt)|\.distcp|load_state_dict|state_dict\b.*(missing|unexpected|mismatch)|"
          r"(missing|unexpected) keys?\b.*(state_dict|checkpoint)|Could not find .* in (checkpoint|state_dict)|"
          r"no file named \S*(pytorch_model|model\.safetensors|\.bin|\.pt)"),
    _rule("checkpoint_mismatch", r"^(KeyError|RuntimeError|ValueError|AssertionError|IncompleteTraceback)$",
          function=r"^(load_state_dict|_load_from_state_dict|set_model_state_dict|set_optimizer_state_dict|"
                   r"set_state_dict|load_checkpoint|_load_checkpoint|load_sharded_checkpoint|"
                   r"_load_state_dict_from_keys)$|torch/distributed/checkpoint", both=True),
    _rule("nonfinite", None,
          r"\bnan\b|\binf\b|non-?finite|NaN or Inf|returned nan values|is not finite|isfinite|"
          r"Gradient overflow|found_inf|contains (NaN|Inf)"),
    _rule("gradient_explosion", None,
          r"grad(ient)?[_ ]?norm\b.*(too (large|big|high)|exceed|explod|spike|blew up)|gradient explosion|"
          r"exploding gradient|loss (spike|exploded|diverged|blew up)|diverg(ed|ence) (detected|at step)"),
    _rule("hang", r"(WatchdogTimeout|HeartbeatTimeout|CollectiveTimeout|BarrierTimeout)$",
          r"Watchdog caught collective operation timeout|Timed out waiting \d+ms for (recv|send)|"
          r"monitoredBarrier|store based barrier|Heartbeat monitor timed out|watchdog got stuck|"
          r"collective operation timeout|barrier.*tim(ed|e)\s*out|timed out.*barrier|"
          r"(all_reduce|allreduce|all_gather|allgather|broadcast|reduce_scatter).*timed? ?out"),
    # A store timeout raised inside a collective or barrier: a peer never arrived (no progress), not a comms error.
    _rule("hang", r"(DistStoreError|DistNetworkError|TimeoutError)$",
          function=r"^(barrier|monitored_barrier|_store_based_barrier|broadcast\w*|all_reduce\w*|all_gather\w*|"
                   r"reduce_scatter\w*|all_to_all\w*|gather\w*|scatter\w*)$", both=True),
    _rule("cuda_error", r"(CudaError|AcceleratorError|CUDAError)$",
          r"CUDA error:|device-side assert|illegal memory access|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|"
          r"cuDNN error|cudaError\w+|misaligned address|no kernel image is available|"
          r"CUDA kernel errors might be asynchronously|unspecified launch failure|CUDA driver (version|error)|"
          r"Torch not compiled with CUDA enabled|No CUDA GPUs are available|"
          r"Found no NVIDIA driver|Triton Error \[CUDA\]|HIP error:|NVML_SUCCESS|CUDA initialization|"
          r"unhandled cuda error|ncclUnhandledCudaError|Cuda failure '",
          flags=0),
    _rule("device_mismatch", None,
          r"Expected all tensors to be on the same device|on different devices|found at least two devices|"
          r"Input type \(torch\.cuda\.\w+\) and weight type \(torch\.(?!cuda)\w+\)|"
          r"Input type \(torch\.(?!cuda)\w+\) and weight type \(torch\.cuda|"
          r"Expected (a )?'?(cuda|cpu)'? device type|must be on the same device|device mismatch|"
          r"is on (CPU|cpu|cuda:\d+|meta).*(expected|but)|Expected tensor for argument .* to have the same device|"
          r"indices should be either on cpu or on the same device|tensors? (is|are) on (the )?meta device|"
          r"Tensors must be CUDA|not at the same device|must be on the same device|same device as|"
          r"Inconsistent compute device|compute device and `?device_id"),
    _rule("dtype_mismatch", None,
          r"expected scalar type \w+ but found \w+|expected (m1|mat1) and (m2|mat2) to have the same dtype|"
          r"must have the same dtype|dtype mismatch|found dtype \w+ but expected|"
          r"Input type \(.*\) and (weight|bias) type \(.*\) should be the same|can't be cast to the desired output|"
          r"not implemented for '(Half|BFloat16|Float|Long|Int|Bool|Char|Byte|Double|ComplexFloat|Float8\w*)'|"
          r"should be the same dtype|expected dtype|dtypes? (do not|don't) match|Got unsupported ScalarType|"
          r"to have the same dtype|Expected object of scalar type|promot\w+ .*dtype|"
          r"dtype \w+ (is )?not supported|unsupported dtype|mixed dtype|Attempting to unscale FP16 gradients|"
          r"to have one of the following scalar types|uniform dtype"),
    _rule("shape_mismatch", None,
          r"shape mismatch|shapes cannot be multiplied|The size of tensor a \(\d+\) must match the size of tensor b|"
          r"Sizes of tensors must match|size mismatch|shape '\[.*\]' is invalid for input of size|"
          r"Dimension out of range|dimension mismatch|mismatch in shape|cannot reshape|"
          r"Given groups=\d+, weight of size|expected input\[.*\] to have \d+ channels|"
          r"Expected input batch_size|Target size .* must be the same as input size|not broadcastable|"
          r"operands could not be broadcast|must have the same shape|wrong shape|shapes? .*(do not|don't) match|"
          r"view size is not compatible|Expected \d+D .*input|expected \d+D|invalid shape|"
          r"the number of sizes provided|shape .* is invalid|must be divisible by|"
          r"size of dimension|incompatible shapes?|expected shape|got shape|Expected size|"
          r"shapes \(.*\) and \(.*\) not aligned|mismatch in its core dimension|could not broadcast"),
    _rule("distributed_error",
          r"(DistBackendError|DistNetworkError|DistStoreError|DistError|RendezvousError|RendezvousTimeoutError|"
          r"RendezvousClosedError|RendezvousConnectionError|RendezvousStateError|NCCLError|ProcessGroupError)$",
          r"\bNCCL (error|WARN)|ncclSystemError|ncclInternalError|ncclRemoteError|ncclInvalidUsage|"
          r"ncclUnhandledCudaError|unhandled system error|\bgloo\b|\bc10d\b|ProcessGroup\w*|rendezvous|"
          r"Connection (reset|closed) by peer|collective mismatch|mismatched collective|"
          r"Socket Timeout|The server socket has failed|address already in use|EADDRINUSE|"
          r"Default process group has not been initialized|init_process_group|communicator was aborted|"
          r"clients joined|Detected mismatch between collectives|NCCL communicator|"
          r"Expected to have finished reduction in the prior iteration"),
    _rule("crash", r"(SegmentationFault|Aborted|BusError|IllegalInstruction|FatalPythonError|SignalSIGSEGV)$",
          r"Segmentation fault|SIGSEGV|SIGABRT|SIGBUS|core dumped|Fatal Python error"),
    _rule("test_failure", r"^(AssertionError|Failed|AssertError)$"),
)

GENERIC = frozenset({"python_exception", "test_failure"})


def _matches(rule: DiagRule, error: FoundError) -> bool:
    type_hit = bool(rule.type and rule.type.search(error.type))
    func_hit = bool(rule.function and any(
        rule.function.search(f.function or "") or rule.function.search(f.file) for f in error.frames))
    if rule.type_and_function:
        return type_hit and func_hit
    if type_hit or func_hit:
        return True
    return bool(rule.message and rule.message.search(error.message[:4000]))


def categorise(error: FoundError, in_test: bool) -> str:
    """The category of one error; AssertionError only counts as test_failure inside a test."""
    if error.category:
        return error.category
    for rule in RULES:
        if _matches(rule, error):
            if rule.category == "test_failure" and not in_test:
                return "python_exception"
            return rule.category
    return "python_exception"
