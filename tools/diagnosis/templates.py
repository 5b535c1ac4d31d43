"""Errors that arrive without a Python traceback, as a table of line templates.

NCCL watchdog and heartbeat timeouts, gloo timeouts, the OOM killer, fatal signals, C++
`terminate called ... what():`, NaN lines of a training log. Each template names its
category and an identity used in the signature in place of an exception type, e.g.
`nccl-watchdog-timeout ALLREDUCE`: the same collective timing out on another rank,
machine or sequence number gives the same identity.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import re2

from tools.diagnosis.errors import FoundError
from tools.diagnosis.models import Frame
from tools.diagnosis.text import Line
from tools.diagnosis.tracebacks import exception_line, message_lines, unmarked


@dataclass(frozen=True)
class Template:
    name: str
    pattern: re.Pattern[str]
    category: str | None
    identity: Callable[[re.Match[str]], str]
    """The signature identity of a match (None: let the rules decide)."""
    typed: bool = False
    """When the line is an exception line (`Type: message`), identify it as that exception: the same
    error pasted without its traceback then keeps the signature it has with one."""
    precursor: bool = False
    """A C++ log line that a Python exception usually repeats (with frames) right after: that one wins ties."""
    canonical: bool = False
    """Its identity is the signature of any exception whose message it matches: the Python type wrapping that
    C++ error changes between versions (RuntimeError, then DistBackendError) and a garbled paste loses it."""


def _t(name: str, pattern: str, category: str | None, identity: Callable[[re.Match[str]], str] | None = None,
       flags: int = 0, typed: bool = False, precursor: bool = False, canonical: bool = False) -> Template:
    return Template(name, re.compile(pattern, flags), category, identity or (lambda m, n=name: n), typed, precursor,
                    canonical)


_RANK_IN_TEXT = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|\brank[: ]\s?(\d+)\b", re.IGNORECASE)

TEMPLATES: tuple[Template, ...] = (
    _t("NCCLWatchdogTimeout", r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+, OpType=(\w+)",
       "hang", lambda m: f"nccl-watchdog-timeout {m.group(1).upper()}"),
    _t("NCCLHeartbeatTimeout", r"Heartbeat monitor timed out|watchdog got stuck for \d+ seconds|"
       r"ProcessGroupNCCL's watchdog got stuck", "hang", lambda m: "nccl-heartbeat-timeout"),
    _t("CollectiveTimeout", r"Timed out waiting \d+ms for (send|recv) operation to complete", "hang",
       lambda m: f"gloo-timeout {m.group(1)}"),
    _t("BarrierTimeout", r"monitoredBarrier.*(timed out|Timed out)|Timed out initializing process group in store "
       r"based barrier", "hang", lambda m: "barrier-timeout"),
    _t("FaulthandlerTimeout", r"^Timeout \(\d+:\d\d:\d\d\)!", "hang", lambda m: "faulthandler-timeout"),
    # Slurm: `slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2024-03-04T07:21:10 DUE TO TIME LIMIT ***`.
    _t("SlurmTimeLimit", r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT", "hang",
       lambda m: "slurm-time-limit"),
    _t("SlurmCancelled", r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+", None, lambda m: "slurm-cancelled"),
    _t("SrunTaskExit", r"^srun: error: \S+: tasks? [\d,\-]+: (Exited with exit code \d+|Killed|\w[\w ]*)", None,
       lambda m: "srun-task-" + re.sub(r"\d+", "<n>", m.group(1)).lower().replace(" ", "-")),
    _t("OOMKiller", r"^\s*Killed\s*$|Out of memory: Kill(ed)? process|oom-kill|invoked oom-killer", "host_oom",
       lambda m: "oom-killer"),
    _t("SignalSIGKILL", r"Signal 9 \(SIGKILL\) received by PID|died with <Signals\.SIGKILL: 9>|"
       r"killed by signal:? Killed|"
       r"exit(?:ed with)? code[: ]\s*137\b|(?:exitcode|return code|exit status|exit code)\s*[:=]?\s*-9\b",
       "host_oom", lambda m: "signal SIGKILL"),
    _t("FatalPythonError", r"^Fatal Python error: (\w[\w ]*)", "crash", lambda m: f"fatal-python-error {m.group(1)}"),
    _t("SegmentationFault", r"Segmentation fault|SIGSEGV|Signal 11 \(SIGSEGV\)|"
       r"(?:exitcode|return code|exit status|exit code)\s*[:=]?\s*-11\b", "crash", lambda m: "signal SIGSEGV"),
    # glibc's heap checks abort the process: the corruption is the failure, the SIGABRT its consequence.
    _t("GlibcHeapCorruption", r"double free or corruption|free\(\): invalid (?:pointer|size|next size)|"
       r"malloc\(\): (?:corrupted|memory corruption|unaligned)|corrupted size vs\.? prev_size|"
       r"munmap_chunk\(\): invalid pointer|malloc_consolidate\(\): invalid", "crash",
       lambda m: "glibc-heap-corruption"),
    _t("Aborted", r"^Aborted( \(core dumped\))?\s*$|Signal 6 \(SIGABRT\)|killed by signal:? Aborted|"
       r"died with <Signals\.SIGABRT: 6>|"
       r"(?:exitcode|return code|exit status|exit code)\s*[:=]?\s*-6\b", "crash", lambda m: "signal SIGABRT"),
    _t("BusError", r"^Bus error( \(core dumped\))?\s*$|SIGBUS|Signal 7 \(SIGBUS\)|"
       r"(?:exitcode|return code|exit status|exit code)\s*[:=]?\s*-7\b", "crash", lambda m: "signal SIGBUS"),
    _t("IllegalInstruction", r"^Illegal instruction( \(core dumped\))?\s*$|SIGILL\b", "crash",
       lambda m: "signal SIGILL"),
    _t("CppTerminate", r"terminate called after throwing an instance of '([^']+)'", None,
       lambda m: f"terminate {m.group(1)}"),
    _t("NCCLError", r"NCCL error:? (?:in: \S+ )?(unhandled system error|unhandled cuda error|internal error|"
       r"invalid usage|invalid argument|remote process exited or there was a network error)", None,
       lambda m: f"nccl-error {m.group(1)}", typed=True, precursor=True, canonical=True),
    _t("NCCLErrorCode", r"^\W*(nccl(?:System|Internal|Remote|InvalidUsage|InvalidArgument|UnhandledCuda)Error)\b",
       None, lambda m: f"nccl-error {m.group(1)}", precursor=True),
    _t("C10dConnectTimeout", r"The client socket has timed out after \d+\s?m?s while trying to connect to|"
       r"The server socket has failed to (?:listen|bind)", "distributed_error", lambda m: "c10d-socket-failure",
       typed=True, precursor=True),
    _t("CUDADeviceAssert", r"\.cuh?:\d+: .*block: \[[\d, ]+\], thread: \[[\d, ]+\] Assertion `(.+?)` failed",
       "cuda_error", lambda m: f"cuda-device-assert {m.group(1)}", precursor=True),
    _t("StateDictLoad", r"Error\(s\) in loading state_dict for", "checkpoint_mismatch", typed=True),
    _t("StateDictMismatch", r"^\W*(size mismatch for \S+: copying a param|Missing key\(s\) in state_dict:|"
       r"Unexpected key\(s\) in state_dict:)", "checkpoint_mismatch",
       lambda m: "state-dict " + re.sub(r" for \S+: copying a param|\(s\) in state_dict:", "", m.group(1)).lower()),
    # A running average in parentheses counts too: "grad_norm: 0.39 (nan)".
    _t("NonFiniteLoss",
       r"\b(loss|grad[_ ]?norm|total[_ ]norm|gradnorm)\b['\"]?\s*[:=]?\s*(?:tensor\()?(?:[-+]?\d[\d.e+-]*\s*\()?"
       r"[-+]?(nan|inf)\b", "nonfinite",
       lambda m: f"nonfinite {m.group(1).lower().replace(' ', '_')}", re.IGNORECASE),
    # Words around the value: "nan loss detected", "Loss is NaN, stopping training", "NaN or Inf found in loss".
    _t("NonFiniteLossWords",
       r"\b(?:nan|inf|non-?finite)\s+(loss|grad[_ ]?norm|gradients?)\b|"
       r"\b(loss|grad[_ ]?norm)\s+(?:is|became|becomes|was|has become)\s+(?:nan|inf|non-?finite)\b|"
       r"\b(?:nan|inf)\s+(?:or\s+inf\s+)?(?:found|detected|encountered)\s+in\s+(?:the\s+)?"
       r"(loss|grad[_ ]?norm|gradients?)",
       "nonfinite", lambda m: "nonfinite " + ("loss" if next(g for g in m.groups() if g).lower() == "loss"
                                               else "grad_norm"), re.IGNORECASE),
    _t("LossScaleOverflow",
       r"loss scale already at minimum|Gradient overflow\. Skipping step|OVERFLOW! Rank \d+ Skipping", "nonfinite",
       lambda m: "fp16-overflow"),
    _t("CUDAOOMLine", r"CUDA out of memory|CUDA error: out of memory", "cuda_oom", lambda m: "cuda-oom", typed=True),
)


PRECURSORS = frozenset(t.name for t in TEMPLATES if t.precursor)
_CANONICAL = tuple(t for t in TEMPLATES if t.canonical)


def canonical_identity(message: str) -> str | None:
    for template in _CANONICAL:
        m = template.pattern.search(message)
        if m:
            return template.identity(m)
    return None
# One search per line tells whether any template can match it (most lines of a big log match none): an RE2
# automaton (one pass per line) unless a template needs what RE2 lacks (lookaround).
_ANY_PATTERN = "|".join(f"(?{'i' if t.pattern.flags & re.IGNORECASE else ''}:{t.pattern.pattern})" for t in TEMPLATES)
try:
    _ANY = re2.compile(_ANY_PATTERN)
except re2.error:
    _ANY = re.compile(_ANY_PATTERN)


def rank_in(text: str) -> int | None:
    m = _RANK_IN_TEXT.search(text)
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def _dump_frames(following: list[Line]) -> list[Frame]:
    """The current thread's frames of the faulthandler dump that follows a fatal error line."""
    from tools.diagnosis.stacks import threads

    found = threads("\n".join(ln.text for ln in following))
    current = next((fr for label, fr in found if label.startswith("Current thread")), None)
    return current or (found[0][1] if found else [])


def find_templates(lines: list[Line], consumed: set[int]) -> Iterator[FoundError]:
    """Template errors on lines no traceback already accounted for; one per (template, rank, identity)."""
    seen: set[tuple[str, int | None, str]] = set()
    for pos, line in enumerate(lines):
        if line.index in consumed or not _ANY.search(line.text):
            continue
        for template in TEMPLATES:
            m = template.pattern.search(line.text)
            if not m:
                continue
            rank = line.rank if line.rank is not None else rank_in(line.text)
            identity = template.identity(m)
            key = (template.name, rank, identity)
            if key in seen:
                break
            seen.add(key)
            message = line.text[m.start():].strip() if template.name != "OOMKiller" else line.text.strip()
            if template.name == "CppTerminate":
                what = next((ln.text.split("what():", 1)[1].strip() for ln in lines[pos + 1:pos + 4]
                             if "what():" in ln.text), "")
                message = what or message
                yield FoundError(type=m.group(1), message=message, line=line.index, rank=rank, source="template",
                                 template=None, category=None, start=line.index, end=line.index + 2)
                break
            typed = exception_line(unmarked(line.text)) if template.typed else None
            if typed:
                same_rank = [ln for ln in lines[pos:pos + 40] if ln.rank == line.rank]
                message, end, _ = message_lines(same_rank, 1, typed[1])
                yield FoundError(type=typed[0], message=message[:2000], line=line.index, rank=rank, source="bare",
                                 category=template.category, start=line.index, end=same_rank[end - 1].index)
                break
            frames = _dump_frames(lines[pos + 1:pos + 200]) if template.name == "FatalPythonError" else []
            yield FoundError(type=template.name, message=message[:2000], line=line.index, rank=rank,
                             frames=frames, source="template", template=identity, category=template.category,
                             start=max(0, line.index - 2), end=line.index + 3)
            break
