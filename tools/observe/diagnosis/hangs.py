"""When a log is a hang, and what identifies one: the backends' watchdog reports, stack dumps, call sites.

A log is a hang when it holds a watchdog's report of a stuck collective (tools/observe/diagnosis/watchdog.py)
and nothing more specific than a generic error, a communication error or the abort the watchdog itself
caused; when a stack dump (py-spy, faulthandler) stands in it without any error; or when a fatal abort came
from a watchdog's thread. A hang's signature is its group (the hang error's, else `hang` with the reports
it holds and its shape) and its call site: where each process stands (stacks.dump_sites), the stuck
collectives and the call site of the error, sorted, so that two runs of one hang agree.
"""

from __future__ import annotations

import re
from pathlib import Path

from rootcause.tools.observe.diagnosis import signature as sig
from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.models import StackSummary
from rootcause.tools.observe.diagnosis.rules import GENERIC
from rootcause.tools.observe.diagnosis.stacks import (
    Thread,
    call_site,
    dump_sites,
    has_dump,
    is_observer_function,
    site_name,
)
from rootcause.tools.observe.diagnosis.watchdog import Collectives, shape

_ABORTS = ("fatal-python-error Aborted", "signal SIGABRT")
# A launcher's or test harness's exception saying its child failed: the child's failure is the evidence.
_CHILD_FAILED = re.compile(r"\b(?:failed|died|exited) with (?:return ?code|exit ?code|exit status|code)\s*-?\d+|"
                           r"returned non-zero exit status", re.IGNORECASE)
MAX_SITES = 6


def _abort(error: FoundError) -> bool:
    return bool(error.template and error.template.startswith(_ABORTS)) or "terminate called" in error.message


def aborts_a_hang(error: FoundError) -> bool:
    """An abort (SIGABRT, `Fatal Python error: Aborted`, C++ terminate) or a watchdog's exception: in a hang, what
    the watchdog did to the rank it saw stuck."""
    return _abort(error) or "Watchdog caught collective operation timeout" in error.message


def hang_category(category: str, error: FoundError | None, collectives: Collectives, text: str) -> str:
    """The category once the watchdogs' reports and the dumps are read (module docstring)."""
    if category == "hang":
        return category
    # A debug wrapper's fingerprints and a peer's broken send/recv at a barrier say who differs or failed, not that
    # anything stalled.
    reports = [k for k in collectives.kinds if k not in ("fingerprint-mismatch", "barrier-peer-error")]
    if not reports and collectives.kinds:
        return "distributed_error" if category in GENERIC else category
    # An exception a rank raised is the root (the others time out waiting for it), unless it only wraps a child's
    # failure or lost its traceback; a communication error is the hang's own symptom.
    weak = error is None or category == "distributed_error" or (category in GENERIC and (
        error.source != "traceback" or error.type == "IncompleteTraceback" or bool(_CHILD_FAILED.search(
            error.message))))
    if reports and (weak or (category == "crash" and (error is None or _abort(error)))):
        return "hang"
    if error is not None and _abort(error) and error.frames and is_observer_function(error.frames[-1].function):
        return "hang"  # the watchdog's thread aborted the process: what it watched made no progress
    if error is None and category in GENERIC and has_dump(text):
        return "hang"
    return category


def _site(frames: list, root: Path) -> str:
    """A stack's call site as stacks reads a dump's: user frames, else library frames outside stdlib and torch
    (torch's collective frames are in every hang and tell none apart)."""
    found = call_site([Thread("error", frames)], root) if frames else []
    return ">".join(site_name(f, root) for f in found)


def hang_identity(group: sig.Identity | None, error: FoundError | None, stacks: list[StackSummary],
                  texts: list[str], collectives: Collectives, root: Path,
                  others: list[FoundError] | None = None) -> sig.Identity:
    """group: the hang error's identity (None: the log has no hang error of its own); others: the log's other
    errors, whose tracebacks show where the processes stood."""
    sites: list[str] = []
    for text in texts:
        sites.extend(dump_sites(text, root))
    dumped = bool(sites)
    waits = sorted({s.collective for s in stacks if s.collective})
    # What the processes wait in is where the hang shows, not what it is: one stall dumped twice may show two.
    where = [*collectives.where, *(f"waits in {w}" for w in waits)]
    own = _site(error.frames, root) if error is not None else ""
    parts = [own] if own else []
    sites.extend(site for e in others or [] if e is not error and (site := _site(e.frames, root)))
    if collectives.frames:
        sites.append(_site(collectives.frames, root))
    parts += sorted(set(where) - set(parts))[:MAX_SITES]
    parts += sorted(set(sites) - set(parts))[:MAX_SITES]
    words = shape(collectives)
    if words:
        parts.append(sig.parameterise(words))
    if group is not None:
        return sig.Identity(group.group, f"{group.group}|{' + '.join(parts)}")
    kinds = " ".join(k for k in collectives.kinds if k != "fingerprint-mismatch")
    summary = "stack dump" if dumped or stacks else "report" if kinds else "no evidence"
    return sig.identity(f"hang {kinds}".strip(), summary, [" + ".join(parts)] if parts else [])
