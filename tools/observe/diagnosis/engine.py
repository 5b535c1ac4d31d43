"""Entry points of the diagnosis engine: raw output (a run's log or a pasted log) to a Diagnosis.

Pipeline: lines with rank prefixes split off -> every error found (tracebacks per rank,
pytest sections, torchrun reports, template lines) -> the root error chosen by tiers
(a real error beats a distributed symptom, beats a consequence such as SIGTERM, beats a
wrapper such as ChildFailedError; ties go to the first observed, on torchrun's root-cause
rank when it names one) -> category by the rule table, signature, ranks, stacks, excerpt.
"""

from __future__ import annotations

import re
from pathlib import Path

from rootcause.tools.core.results import bounded
from rootcause.tools.observe.collectives import DumpError, Report, analyse, read_dumps
from rootcause.tools.observe.collectives import lines as collective_lines
from rootcause.tools.observe.collectives.text import recorded_sites
from rootcause.tools.observe.diagnosis import frames as frame_names
from rootcause.tools.observe.diagnosis import signature as sig
from rootcause.tools.observe.diagnosis.elastic import ElasticReport, expand_error_files, parse_elastic
from rootcause.tools.observe.diagnosis.errors import FoundError
from rootcause.tools.observe.diagnosis.hangs import aborts_a_hang, hang_category, hang_identity
from rootcause.tools.observe.diagnosis.models import Diagnosis, RankInfo, StackSummary
from rootcause.tools.observe.diagnosis.placement import Placement, placement
from rootcause.tools.observe.diagnosis.pytest_output import parse_pytest
from rootcause.tools.observe.diagnosis.rules import GENERIC, categorise
from rootcause.tools.observe.diagnosis.series import find_series_failure
from rootcause.tools.observe.diagnosis.stacks import has_dump, stacks_in_log, summarise
from rootcause.tools.observe.diagnosis.streaming import condensed_text
from rootcause.tools.observe.diagnosis.templates import (
    PRECURSORS,
    canonical_identity,
    find_templates,
    kept_words,
    rank_in,
)
from rootcause.tools.observe.diagnosis.text import Line, split_lines, streams
from rootcause.tools.observe.diagnosis.tracebacks import frames_after, message_lines, parse_tracebacks, unmarked
from rootcause.tools.observe.diagnosis.watchdog import Collectives, rank_infos, read_collectives
from rootcause.tools.observe.keywords import extract_keywords
from rootcause.tools.observe.logs.traceback_lines import FRAME, exception_line, is_exception_type, is_warning
from rootcause.tools.run import ProcessStack, RunRecord
from rootcause.tools.run.flight_recorder import DUMP_FOLDER
from rootcause.tools.vocabulary.negation import prose_rule

# Tiers of candidate root errors, lowest wins.
_WRAPPERS = re.compile(r"(ChildFailedError|ProcessRaisedException|ProcessExitedException|CalledProcessError|"
                       r"CheckpointException|ExceptionGroup|BrokenProcessPool|WorkerError|IncompleteTraceback|"
                       r"RayActorError|RayTaskError|ActorDiedError|SrunTaskExit)$")
# A wrapper that says the cause was logged before it (vLLM's engine core, launchers).
# A runner relaying that its child exited (`'accelerate-launch ...' failed with returncode 1`), as CalledProcessError.
_WRAPPER_MESSAGES = re.compile(r"\b(?:see|check)\b[^.\n]{0,50}\b(?:above|root cause)\b|"
                               r"look up to see its traceback\)?:?\s*$|\bsee (?:the )?inner exception\b|"
                               r"\bfailed with (?:return ?code|exit (?:code|status))\s*:?\s*-?\d+\s*$|"
                               r"\breturned non-zero exit status -?\d+\.?\s*$",
                               re.IGNORECASE | re.MULTILINE)
_CONSEQUENCE_TEMPLATES = frozenset({"slurm-cancelled", "fatal-python-error Aborted"})
# A cause written into a wrapper's message: "... because of the following error (look up to see its
# traceback):\nNo module named 'x'", "... exception: KeyError: 'w'", "Caused by: ValueError: ...".
_EMBEDDED_CAUSE = re.compile(r"(?:because of the following (?:error|exception)(?: \(look up to see its traceback\))?|"
                             r"\bexception|Caused by|the following error)\s*:\s*(?P<cause>\S.*)", re.DOTALL)
# vLLM's "Worker failed with error '<the worker's error>', please check the stack trace above for the root cause".
_QUOTED_CAUSE = re.compile(r"\bfailed with (?:error|exception)\s*:?\s*'(?P<cause>\S.*?)'(?=,\s|\s*$)", re.DOTALL)


def _embedded_cause(message: str) -> re.Match[str] | None:
    return _EMBEDDED_CAUSE.search(message) or _QUOTED_CAUSE.search(message)


_CONSEQUENCES = re.compile(r"(KeyboardInterrupt|SignalException|SystemExit|BrokenPipeError|CancelledError)$")
_CONSEQUENCE_MESSAGES = re.compile(r"got signal: 15|SIGTERM|Signal 15\b|Signal 2\b|closing signal", re.IGNORECASE)
_SECONDARY_CATEGORIES = {"hang", "distributed_error"}
_SIGNAL_NAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
_TEST_FILE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")
_PYTEST_E = re.compile(r"^\s*E\s\s")


def _bare_line(text: str) -> tuple[str, str] | None:
    """A lone error line, also as pasted: behind pytest's "E   ", a quote, or Markdown (`...`, **...**).

    Its type is named as an exception's (`RuntimeError`, `torch._dynamo.exc.Unsupported`), not a warning."""
    if _PYTEST_E.match(text):
        text = text.lstrip()[1:]
    text = text.lstrip(" \t>`*")
    if text.startswith("_*"):
        text = text[1:].lstrip("*")
    found = exception_line(text, lone=True)
    if not found or not is_exception_type(found[0], by_suffix=True) or is_warning(found[0]):
        return None
    return found


# An error report's labelled fields (a UI's error dialog, a bug-report template): `**Exception Type:** RuntimeError`
# with `**Exception Message:** ...` on one of the next lines.
_FORM_TYPE = re.compile(r"^[\W_]*(?:Exception|Error)[ _]?Type[*_`]*\s*:[*_`\s]*"
                        r"(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)[*_`]*\s*$", re.IGNORECASE)
_FORM_MESSAGE = re.compile(r"^[\W_]*(?:Exception|Error)[ _]?(?:Message|Value)[*_`]*\s*:[*_`\s]*(?P<msg>\S.*)$",
                           re.IGNORECASE)


# VS Code's Python debugger: "Exception has occurred: RuntimeError", the message, then the frames innermost first.
_DEBUGGER = re.compile(r"^\W*Exception has occurred:\s*(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\s*$")


def _report_form(lines: list[Line], index: int) -> tuple[str, str, int] | None:
    """(type, message, last line) of a labelled error report starting at that line."""
    m = _FORM_TYPE.match(lines[index].text)
    if not m:
        m = _DEBUGGER.match(lines[index].text)
        following = lines[index + 1:index + 6]
        if not m or not following or not following[0].text.strip() or FRAME.match(following[0].text):
            return None
        # A debugger's report: the message on the lines after the type, up to the frames.
        message = []
        for ln in following:
            if not ln.text.strip() or FRAME.match(ln.text):
                break
            message.append(ln)
        return m.group("type"), "\n".join(ln.text.strip() for ln in message), message[-1].index
    for ln in lines[index + 1:index + 4]:
        found = _FORM_MESSAGE.match(ln.text)
        if found:
            return m.group("type"), found.group("msg").strip(), ln.index
    return None


_ENTRY_SCRIPT = re.compile(r"([\w.\-]+)\.py FAILED\s*$|'-u', '(?:\S*/)?([\w.\-]+)\.py'|"
                           r"of binary: .*?([\w.\-]+)\.py", re.MULTILINE)
_NOISE_KEYWORD = re.compile(r"\.(py|cpp|cc|cu|h|hpp|yaml|json|so)\b|third_party|^[\d.e+-]+$|^\w?-\d+$|"
                            r"^(local_rank|return|exitcode|signal|input|invalid|encountered|Detected|Rank)$|"
                            r"^slurmstepd|^StepId")
MAX_FRAMES = 40
MAX_RANKS = 64
MAX_COLLECTIVES = 256
"""Ranks x groups in Diagnosis.collectives (a 16-rank Megatron job has ~130)."""


def _tier(error: FoundError, category: str) -> int:
    if error.source == "bare" and is_warning(error.type):
        # A printed warning (`UserWarning: ... CUDA out of memory`) is the root only when nothing raised; one raised
        # as an error (its traceback) is an error.
        return 4
    if _WRAPPERS.search(error.type) or (error.source != "template" and _WRAPPER_MESSAGES.search(error.message)
                                        and not _embedded_cause(error.message)):
        return 3
    if error.ignored or error.template in _CONSEQUENCE_TEMPLATES:
        return 2
    if error.template == "signal SIGABRT" or error.type == "ShellKilled":
        return 2  # NCCL and c10 abort the process after the error that matters; a supervisor kills what is left
    if _CONSEQUENCES.search(error.type) or (error.source == "template" and error.category is None
                                              and _CONSEQUENCE_MESSAGES.search(error.message)):
        return 2
    if error.type == "SignalException" or (_CONSEQUENCE_MESSAGES.search(error.headline()[:200])
                                           and category == "python_exception"):
        return 2
    return 1 if category in _SECONDARY_CATEGORIES else 0


def _collect(lines: list[Line], text: str, root: Path) -> tuple[list[FoundError], list[str], bool, ElasticReport]:
    errors: list[FoundError] = []
    chain_base = 0
    for stream in streams(lines).values():
        found = list(parse_tracebacks(stream, chain_base))
        errors.extend(found)
        chain_base = max([chain_base, *[e.chain + 1 for e in found]])
    unranked = [ln for ln in lines if ln.rank is None]
    # A test session run under a launcher carries its rank tag on every line: read it as it is.
    pytest = parse_pytest(unranked if any(ln.text.strip() for ln in unranked) else lines, text, chain_base + 1000)
    errors.extend(pytest.errors)
    consumed: set[int] = set()
    for error in errors:
        if error.start is not None and error.end is not None:
            consumed.update(range(error.start, error.end + 1))
    chain = chain_base + 5000
    if all(e.type == "IncompleteTraceback" or _WRAPPERS.search(e.type) for e in errors):
        # No complete traceback but a launcher's wrapper: lone error lines (a paste that lost the traceback's head,
        # ranks' last lines after torchrun's report) are the evidence, read before the templates so that
        # `RuntimeError: DataLoader worker ... killed by signal` keeps its type.
        by_stream = streams(lines)
        for ln in lines:
            form = _report_form(lines, ln.index) if ln.index not in consumed else None
            if form:
                kind, message, last = form
                errors.append(FoundError(type=kind, message=message, line=ln.index, rank=ln.rank, chain=chain,
                                         source="bare", start=ln.index, end=last,
                                         frames=frames_after(lines, last + 1)))
                consumed.update(range(ln.index, last + 1))
                chain += 1
                continue
            bare = _bare_line(ln.text)
            if bare and ln.index not in consumed:
                first = unmarked(bare[1]) if ln.text.rstrip()[-1:] in "*_`" else bare[1]
                stream = by_stream[ln.stream]
                pos = next(i for i, s in enumerate(stream) if s.index == ln.index)
                message, end, _ = message_lines(stream[pos:pos + 40], 1, first)
                last = stream[pos + max(end - 1, 0)].index
                errors.append(FoundError(type=bare[0], message=message, line=ln.index,
                                         rank=ln.rank, chain=chain, source="bare", start=ln.index, end=last))
                consumed.update(range(ln.index, last + 1))
                chain += 1
    raised = [f"{e.short_type}: {sig.first_sentence(e.message)[:80]}" for e in errors
              if e.source == "traceback" and e.message.strip()]
    texts = {ln.index: ln.text for ln in lines} if raised else {}
    for error in find_templates(lines, consumed):
        error.chain = chain
        chain += 1
        if raised and any(said in texts.get(error.line, "") for said in raised):
            # A logger restating an exception a traceback raises (`CRITICAL ... Uncaught ValueError: nan loss
            # encountered`): the traceback, with its frames, is that failure.
            error.ignored = True
        errors.append(error)
    report = parse_elastic(lines)
    for failure in report.failures:
        if failure.exitcode is None or failure.exitcode >= 0:
            continue
        name = _SIGNAL_NAMES.get(-failure.exitcode, f"signal {-failure.exitcode}")
        # The report's "Signal N received" line names it, unless a traceback's message swallowed that line.
        if "Signal" not in failure.traceback or not any(e.template == f"signal {name}" for e in errors):
            category = "host_oom" if failure.exitcode == -9 else "crash"
            errors.append(FoundError(type=f"Signal{name}", message=f"worker exited with {name}", line=failure.line,
                                     rank=failure.rank, chain=chain, source="report", template=f"signal {name}",
                                     category=category, start=failure.line, end=failure.line + 8))
            chain += 1
    # Logged ERROR lines are evidence when nothing raised says more than a wrapper, an uncategorised template or
    # a communication failure (a CUDA error logged by the NCCL watchdog before its terminate is the cause).
    if all(_says_little(e) for e in errors):
        for error in _logged_errors(lines, consumed, errors):
            error.chain = chain
            chain += 1
            errors.append(error)
    if not errors:
        from_series = find_series_failure(lines)
        if from_series is not None:
            from_series.chain = chain
            errors.append(from_series)
    errors.extend(_embedded_causes(errors))
    _mark_ignored(errors, lines)
    in_test = pytest.detected
    for error in errors:
        frame_names.mark(error.frames, root)
    return errors, pytest.failed, in_test, report


_IGNORED = re.compile(r"^\s*Exception ignored in\b")


def _says_little(error: FoundError) -> bool:
    if error.type == "IncompleteTraceback" or _WRAPPERS.search(error.type):
        return True
    if error.source == "template" and not error.category:
        return True
    return categorise(error, False) in _SECONDARY_CATEGORIES - {"hang"}


def _words_category(text: str, in_test: bool) -> str | None:
    """The specific category a line's words name to the rules (None: only a generic one)."""
    category = categorise(FoundError(type="", message=text, line=-1), in_test)
    return None if category in GENERIC else category


_LOG_TAGS = re.compile(r"^(?:\[[^\]]{1,60}\]\s*)+")


def _logged_errors(lines: list[Line], consumed: set[int], raised: list[FoundError]) -> list[FoundError]:
    """A logger's ERROR lines whose words name a specific failure, when nothing but a wrapper was raised
    (`ERROR:megatron.core...:Unexpected result nan ...` above torchrun's report): one per category. A line the
    exception raised after it repeats (c10d logs `[c10d] The server socket has failed ...`, then raises it) is
    that exception's, not another failure."""
    found: dict[str, FoundError] = {}
    messages = [e.message for e in raised if e.message]
    for ln in lines:
        if ln.level not in ("ERROR", "FATAL", "CRITICAL") or ln.index in consumed or not ln.text.strip():
            continue
        said = _LOG_TAGS.sub("", ln.text.strip())[:120].rstrip(".")
        if len(said) >= 20 and any(said in message for message in messages):
            continue
        rank = ln.rank if ln.rank is not None else rank_in(ln.text)  # c10d's own `[Rank 7]` in the message
        error = FoundError(type="LoggedError", message=ln.text.strip()[:2000], line=ln.index, rank=rank,
                           source="bare", start=ln.index, end=ln.index, evidence="keywords")
        category = _words_category(error.message, False)
        if category and category not in found:
            error.category = category
            found[category] = error
    return list(found.values())


def _mark_ignored(errors: list[FoundError], lines: list[Line]) -> None:
    for error in errors:
        if error.start is not None and any(_IGNORED.match(ln.text) for ln in lines[max(0, error.start - 2):
                                                                                  error.start + 1]):
            error.ignored = True


def _embedded_causes(errors: list[FoundError]) -> list[FoundError]:
    """The cause a wrapper's message carries in its text, as the first link of the wrapper's chain."""
    causes = []
    for error in errors:
        if error.source == "template" or not error.message:
            continue
        m = _embedded_cause(error.message)
        if not m:
            continue
        cause = m.group("cause").strip()
        first, _, rest = cause.partition("\n")
        typed = exception_line(unmarked(first))
        if typed:
            kind, message = typed[0], "\n".join([typed[1], rest]).strip()
        else:
            kind, message = error.type, cause
        if kind == error.type and message == error.message:
            continue
        cause_error = FoundError(type=kind, message=message, line=error.line, rank=error.rank, frames=error.frames,
                                 chain=error.chain, link=error.link - 1, source="embedded", start=error.start,
                                 end=error.end)
        # A wrapper that knows better ("Rank 2 failed to pass monitoredBarrier ... Original exception: <a
        # closed connection>" is a hang) keeps the root; a generic one hands it to its cause.
        wrapper_category = categorise(error, False)
        if wrapper_category in GENERIC or wrapper_category == categorise(cause_error, False):
            causes.append(cause_error)
    return causes


def _chain_category(chain: list[FoundError], in_test: bool) -> str:
    """The root's category, unless it is generic and a wrapper in its chain says more."""
    first = categorise(chain[0], in_test or _in_test_frames(chain[0]))
    if first not in GENERIC:
        return first
    for wrapper in chain[1:]:
        category = categorise(wrapper, in_test or _in_test_frames(wrapper))
        if category not in GENERIC and not _WRAPPERS.search(wrapper.type):
            return category
    return first


def _in_test_frames(error: FoundError) -> bool:
    return any(_TEST_FILE.search(f.file.replace("\\", "/")) for f in error.frames)


def _choose(errors: list[FoundError], in_test: bool, report: ElasticReport) -> tuple[FoundError, str] | None:
    chains: dict[int, list[FoundError]] = {}
    for error in errors:
        chains.setdefault(error.chain, []).append(error)
    root_rank = report.root.rank if report.root else None
    best: tuple[tuple[int, int, int, int], FoundError, str] | None = None
    for chain in chains.values():
        chain.sort(key=lambda e: e.link)
        category = _chain_category(chain, in_test)
        # The root of a chain is its first exception, unless that is a bare consequence of the wrapper's cause.
        head = chain[0]
        precursor = int(head.source == "template" and head.type in PRECURSORS)
        key = (_tier(head, category), 0 if root_rank is None or head.rank in (None, root_rank) else 1, precursor,
               head.line)
        if best is None or key < best[0]:
            best = (key, head, category)
    return (best[1], best[2]) if best else None


def _excerpt(lines: list[Line], error: FoundError | None, text: str, limit: int = 4_000) -> str:
    if error is None or error.start is None:
        return bounded(text.strip()[-limit:], limit)
    start = max(0, error.start - (3 if error.source != "traceback" else 0))
    end = min(len(lines), (error.end or error.line) + 1)
    block = [ln for ln in lines[start:end] if error.rank is None or ln.rank in (None, error.rank)]
    prefix = f"[rank {error.rank}] " if error.rank is not None else ""
    return bounded(prefix + "\n".join(ln.text for ln in block).strip(), limit)


_SRUN_TASK = re.compile(r"^srun: error: (?P<node>[\w.\-]+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+)$")
_SLURMSTEPD_NODE = re.compile(r"^slurmstepd-(?P<node>[\w.\-]+): ")
_LOCAL_RANK_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)")


def _task_ids(spec: str) -> list[int]:
    ids: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            ids.extend(range(int(low), int(high) + 1 if high.isdigit() else int(low) + 1))
    return ids[:MAX_RANKS * 64]


def _ranks(lines: list[Line], errors: list[FoundError], report: ElasticReport, stacks: list[StackSummary],
           in_test: bool, root_error: FoundError | None, collectives: Collectives | None = None,
           text: str = "", diagnosed: str | None = None) -> dict[str, RankInfo]:
    ranks: dict[int, RankInfo] = {}
    placed = placement(text) if text else Placement()
    raised: set[int] = set()  # ranks whose outcome is an error they raised themselves
    hung = diagnosed == "hang"
    nodes: dict[int, str] = dict(placed.nodes)
    for line in lines:
        if line.rank is not None and line.rank not in ranks and len(ranks) < 4096:
            ranks[line.rank] = RankInfo(outcome="ok")
        m = _SLURMSTEPD_NODE.match(line.text)
        if m and line.rank is not None:
            nodes.setdefault(line.rank, m.group("node"))
    for error in sorted(errors, key=lambda e: e.line):
        if error.rank is None or error.ignored or (error.type == "LoggedError" and collectives and collectives.found):
            continue  # a logged line the watchdog reader read better (a rank dumping its debug info)
        category = categorise(error, in_test)
        # Killed from outside (a signal, the OOM killer, Slurm's cancellation) is a crash, not a failure it raised.
        killed = error.type.startswith("Signal") or error.template == "slurm-cancelled" or (
            error.source == "template" and category in ("crash", "host_oom"))
        outcome = "hang" if category == "hang" else "crash" if killed else "fail"
        if hung and aborts_a_hang(error):
            outcome = "hang"  # the watchdog aborted the rank it saw stuck: not a crash of its own
        info = ranks.setdefault(error.rank, RankInfo(outcome="ok"))
        if info.first_error is None:
            ranks[error.rank] = RankInfo(outcome=outcome, first_error=error.headline()[:300])
            raised.add(error.rank)
    for failure in report.failures:
        if failure.rank is None:
            continue
        info = ranks.get(failure.rank)
        if info is None or info.first_error is None:
            outcome = "crash" if (failure.exitcode or 0) < 0 else "fail"
            first = failure.traceback.splitlines()[0] if failure.traceback else f"exitcode {failure.exitcode}"
            ranks[failure.rank] = RankInfo(outcome=outcome, first_error=first[:300])
    # The launcher's own lines name failed ranks whose output carried no rank prefix.
    unranked = root_error.headline()[:300] if root_error is not None and root_error.rank is None else None
    for line in lines:
        srun = _SRUN_TASK.match(line.text)
        local = _LOCAL_RANK_FAILED.search(line.text) if not srun else None
        if srun:
            what = srun.group("what").strip()
            outcome = "fail" if what.startswith("Exited with exit code") else "crash"
            for task in _task_ids(srun.group("tasks")):
                # torchrun under srun: a task is a node's launcher and its ranks; else the task is the rank.
                for rank in placed.task_ranks.get(task, []) if placed.task_ranks else [task]:
                    nodes[rank] = srun.group("node")
                    info = ranks.get(rank)
                    if info is None or info.outcome == "ok":
                        ranks[rank] = RankInfo(outcome=outcome, first_error=f"{what} (srun task {task})")
        elif local:
            rank, code = int(local.group("rank")), int(local.group("code"))
            info = ranks.get(rank)
            if info is None or info.outcome == "ok":
                ranks[rank] = RankInfo(outcome="crash" if code < 0 else "fail",
                                       first_error=unranked or f"exitcode {code}")
    ranked = sorted((s for s in stacks if s.rank is not None), key=lambda s: s.collective is None)
    waiting = sorted({s.collective for s in ranked if s.collective})
    for stack in ranked:  # a rank's process waiting in a collective first: its other processes say no more
        info = ranks.get(stack.rank)
        if info is None or info.outcome == "ok":
            where = stack.collective or (stack.frames[-1] if stack.frames else "?")
            place = stack.user_frame or stack.call_site
            at = f" at {place}" if place else ""
            if stack.collective or not waiting:
                # Waiting behind a rank that stands outside every collective, as the recorder and watchdogs say it.
                behind = stack.collective and any(s.collective is None for s in ranked)
                ranks[stack.rank] = RankInfo(outcome="waiting" if behind else "hang",
                                             first_error=f"waiting in {where}{at}")
            else:
                # The others wait in a collective this rank never reached: it holds them up.
                ranks[stack.rank] = RankInfo(outcome="culprit", first_error=f"stands{at}, in no collective while "
                                             f"the others wait in {', '.join(waiting)} (innermost: {where})")
    for rank, said in rank_infos(collectives).items() if collectives else ():
        info = ranks.get(rank)
        # A rank the watchdogs name as the culprit is one, unless it raised an error of its own (an OOM).
        weaker = info is None or info.outcome == "ok" or (said.outcome == "culprit" and not (
            rank in raised and info.outcome in ("fail", "crash"))) or rank in collectives.deferring
        if weaker and (len(ranks) < 4096 or rank in ranks):
            ranks[rank] = said
    for rank, node in nodes.items():
        if rank in ranks:
            ranks[rank].node = node
    ordered = sorted(ranks.items())
    shown = dict((str(k), v) for k, v in ordered[:MAX_RANKS])
    if len(ordered) > MAX_RANKS:
        rest = ordered[MAX_RANKS:]
        failing = sum(1 for _, v in rest if v.outcome != "ok")
        shown["…"] = RankInfo(outcome="summary", first_error=f"{len(rest)} more ranks, {failing} not ok")
    return shown


def _hang_signature(stacks: list[StackSummary], texts: list[str], error: FoundError | None,
                    root: Path, collectives: Collectives | None = None,
                    errors: list[FoundError] | None = None) -> sig.Identity:
    """A hang is identified by its hang error (else `hang` and the watchdogs' reports), the collectives processes
    wait in and where each process stands (tools/observe/diagnosis/hangs.py)."""
    own = _error_signature(error, root) if error is not None and categorise(error, False) == "hang" else None
    return hang_identity(own, error, stacks, texts, collectives or Collectives(), root, errors)


_KEY_LIST = re.compile(r"(Missing|Unexpected) key\(s\) in state_dict: ((?:\"[^\"]*\"(?:, )?)+)")


def _wrapper_prefix_mismatch(message: str) -> str | None:
    """The wrapper's prefix (DataParallel's `module`, torch.compile's `_orig_mod`) when the missing and the
    unexpected keys are one set up to it: the checkpoint was saved from, or is loaded into, a wrapped model."""
    lists: dict[str, set[str]] = {}
    prefixes: dict[str, int] = {}
    for kind, keys in _KEY_LIST.findall(message[:20_000]):
        names = set()
        for key in re.findall(r'"([^"]*)"', keys)[:200]:
            m = sig.WRAPPER_PREFIX.match(key)
            if m:
                prefixes[m.group(0)[:-1]] = prefixes.get(m.group(0)[:-1], 0) + 1
            names.add(key[m.end():] if m else key)
        lists[kind] = names
    missing, unexpected = lists.get("Missing"), lists.get("Unexpected")
    if not missing or not unexpected or not prefixes:
        return None
    if len(missing & unexpected) < 0.8 * min(len(missing), len(unexpected)):
        return None
    return max(prefixes, key=prefixes.__getitem__)


def _error_signature(error: FoundError, root: Path) -> sig.Identity:
    site = frame_names.call_site(error.frames, root) or ([error.site] if error.site else [])
    prefix = _wrapper_prefix_mismatch(error.message)
    if prefix:
        return sig.identity(f"state-dict wrapper-prefix {prefix}", "", site)
    if error.template:
        template = error.template
        if template.startswith("fatal-python-error") and error.frames and error.frames[-1].function:
            # A crash says nothing but its signal: the function it died in (a library's, the same on every
            # machine) is what tells two crashes apart.
            template += f" in {error.frames[-1].function}"
        return sig.identity(template, kept_words(error.type, error.message), site)
    canonical = canonical_identity(sig.first_sentence(error.message), error.message)
    if canonical:
        # The error names a C++ failure whose Python wrapper varies by version (RuntimeError, DistBackendError).
        return sig.identity(canonical[0], canonical[1], site)
    return sig.identity(error.short_type, error.message, site)


def _evidence(error: FoundError | None, category: str, stacks: list[StackSummary], said_line: str) -> list[str]:
    """What the diagnosis rests on (Diagnosis.evidence)."""
    found: list[str] = []
    if error is not None:
        found.append(error.evidence or ("template" if error.source in ("template", "report") else "exception"))
    if stacks and category == "hang":
        found.append("stack_dump")
    if said_line:
        found.append("keywords")
    return found


def _keywords(error: FoundError | None, category: str, stacks: list[StackSummary]) -> list[str]:
    if error is None:
        text = category.replace("_", " ")
    elif error.source == "template":
        # A template's name is ours, not a term anyone searches for: use its identity and message.
        text = f"{(error.template or '').replace('-', ' ')} {sig.first_sentence(error.message)}"
    else:
        text = sig.first_sentence(error.headline()) or error.headline()
    words = [w for w in extract_keywords(text, limit=6) if not _NOISE_KEYWORD.search(w)]
    words = [w for w in words if not ("." in w and w.rsplit(".", 1)[-1] in words)][:3]
    extra = [s.collective for s in stacks if s.collective] + ([category.replace("_", " ")] if len(words) < 2 else [])
    for word in extra:
        if word and word not in words and len(words) < 3:
            words.append(word)
    return words[:3]


_ERRORISH = re.compile(r"\b(error|errors|failed|failure|fatal|exception|abort(ed)?|killed|timed? ?out|"
                       r"cancelled|segmentation fault|core dumped|exit(ed)? with (exit )?(code|status) [1-9]\d*)\b",
                       re.IGNORECASE)


# A cause chain (uv's and Rust's anyhow `cause:`, Java's and many CLIs' `Caused by:`): each line is one error, the
# innermost (last) the most specific, whatever its words.
_CAUSE_LINE = re.compile(r"(?:cause|caused by)\s*:\s*\S", re.IGNORECASE)


def _last_error_lines(lines: list[Line], count: int = 8) -> list[str]:
    """Without an exception message: the last lines that look like errors (a logger's ERROR, or their words), the
    last first, distinct ones only."""
    found: list[str] = []
    for line in reversed(lines):
        text = line.text.strip()
        errorish = line.level in ("ERROR", "FATAL", "CRITICAL") or _ERRORISH.search(text) or _CAUSE_LINE.match(text)
        if text and errorish and not FRAME.match(text):
            if text[:500] not in found:
                found.append(text[:500])
            if len(found) == count:
                break
    return found


def _last_error_line(lines: list[Line]) -> str:
    """Without an exception message: the last line that looks like an error (a logger's ERROR, or its words)."""
    return next(iter(_last_error_lines(lines, 1)), "")


def diagnose_text(text: str, root: Path, *, timed_out: str | None = None, stacks: list[ProcessStack] | None = None,
                  exit_code: int | None = None, signal: int | None = None) -> Diagnosis:
    root = Path(root)
    frame_names.forget()  # the root's files may have changed since the last diagnosis
    text = expand_error_files(text)
    lines = split_lines(text)
    errors, failed_tests, in_test, report = _collect(lines, text, root)
    collectives = read_collectives(lines)
    summaries = [s.model_copy(update={"node": p.node}) for p, s in
                 ((p, summarise(p.text, root, pid=p.pid, rank=p.rank)) for p in stacks or []) if s]
    if not summaries and timed_out:
        summaries = stacks_in_log(text, root)
    if timed_out:
        # The faulthandler dumps rootcause triggered itself are not the failure.
        errors = [e for e in errors if not (e.source == "template" and e.type == "FatalPythonError")]
    chosen = _choose(errors, in_test, report)
    error, category = chosen if chosen else (None, "python_exception")
    said_line = ""
    if error is None and not timed_out and not signal:
        # No exception parsed (a report form, a paste without the traceback): the words of the last error lines
        # (a launcher's abort banner often follows the line that names the failure), or those of a message pasted
        # alone (3 lines or fewer), still name a specific failure when the rules know them.
        said = [ln.text.strip() for ln in lines if ln.text.strip()]
        candidates = [*_last_error_lines(lines), *(reversed(said) if len(said) <= 3 else ())]
        said_line, line_category = next(((t, c) for t in candidates if t and (c := _words_category(t, in_test))),
                                        ("", None))
        category = line_category or category
    prose = None
    if error is None and not said_line and not timed_out and not signal and exit_code is None \
            and not collectives.found and not has_dump(text):
        # A pasted report with nothing raised, no stack and no failing series: its own words ("mAP 0.519, 1 point
        # below the published 52.9", "stuck after initializing ddp") are the only evidence, read by the triage
        # vocabulary for the only failures that raise nothing: numbers worse than a reference, or a stop.
        prose = prose_rule(text, among=("metric_regression", "hang"))
        category = prose.category if prose is not None else category
    if error is None and signal:
        category = "host_oom" if signal == 9 else "crash"
    elif error is None and exit_code in (137, 139, 134):
        category = "host_oom" if exit_code == 137 else "crash"
    if timed_out:
        if error is not None and category != "hang":
            error = None  # a hang with an unrelated earlier error: the stacks are the evidence
        category = "hang"
    elif not signal:
        category = hang_category(category, error, collectives, text)  # watchdogs' reports, dumps without an error
    if error is not None and error.template and error.template.startswith("signal") and not error.frames:
        # A bare signal says little: which program received it is its call site (v3: the script's stem, the same
        # on any machine), so two projects' SIGKILLs share the group and differ in signature.
        entry = _ENTRY_SCRIPT.search("\n".join(ln.text for ln in lines))  # as read: no colours, escapes, records
        stem = next((g for g in entry.groups() if g), None) if entry else None
        if stem:
            error.site = error.site or stem
    frames = (error.frames if error else [])[-MAX_FRAMES:]
    if not summaries and category == "hang":
        summaries = stacks_in_log(text, root)  # a hung job's log with the dumps its processes wrote
    if category == "hang":
        found = _hang_signature(summaries, [p.text for p in stacks or []] or [text], error, root, collectives,
                                errors)
    elif error is not None:
        found = _error_signature(error, root)
    elif signal:
        found = sig.identity(f"signal {_SIGNAL_NAMES.get(signal, signal)}", "", [])
    else:
        # Nothing raised: a failed exit is told by the last line that reads as an error, if any; a passing or
        # error-free log has one stable signature (its last line is whatever the program printed last).
        said = said_line or (_last_error_line(lines) if exit_code else "")
        found = sig.identity(f"exit {exit_code}" if exit_code is not None else f"report {category}" if prose else
                             ("error-line" if said_line else "no-error"), said, [])
    location = None
    for frame in reversed(frames):
        if frame.in_project:
            rel = frame_names.resolve_in_root(frame.file, str(root)) or frame.file
            location = f"{rel}:{frame.line}" if frame.line else rel
            break
    if location is None:
        # A hang's (or a crash's faulthandler dump's) first stuck process: the project's line it stands on.
        dumps = summaries or (stacks_in_log(text, root) if category in ("hang", "crash") else [])
        # A process waiting in a collective first (mp.spawn's parent only joins its children), then the lowest rank.
        dumps = sorted(dumps, key=lambda s: (s.collective is None, s.rank is None, s.rank or 0))
        location = next((s.user_frame for s in dumps if s.user_frame), None)
    message = error.message if error else ""
    if error is None and category == "hang":
        waits = sorted({s.collective for s in summaries if s.collective})
        sites = sorted({s.call_site for s in summaries if s.call_site})
        message = (f"no progress ({timed_out} timeout)" if timed_out else "no progress: stack dumps and no error"
                   if summaries else "no progress") + (
            f"; waiting in {', '.join(waits)}" if waits else "") + (f"; standing at {', '.join(sites[:4])}"
                                                                    if sites and not timed_out else "")
    if collectives.facts and category in ("hang", "distributed_error"):
        # One line per fact the watchdogs' reports give (who fired, who never arrived), after the error's own words.
        own = error is not None and categorise(error, in_test) == category  # the error says it; the facts follow
        parts = [message, *collectives.facts] if own and not collectives.culprits else [*collectives.facts, message]
        message = "\n".join(p for p in parts if p.strip())
    if not message.strip() and error is not None and error.source != "template" and error.type != "IncompleteTraceback":
        message = "(raised without a message)"  # `raise RendezvousTimeoutError`: the type is all it says
    if not message.strip() and prose is not None:
        message = f"no error line; the report's words: {prose.why}"
    if not message.strip():
        message = said_line or _last_error_line(lines) or (f"exit code {exit_code}" if exit_code
                                                           else "no error line in the output")
    excerpt = _excerpt(lines, error, text)
    return Diagnosis(
        category=category,
        exception_type=error.type if error and error.source != "template" else (error.type if error else None),
        message=bounded(message, 2_000),
        keywords=_keywords(error, category, summaries),
        signature=found.signature,
        group=found.group,
        evidence=_evidence(error, category, summaries, said_line or (prose.why if prose else "")),
        location=location,
        frames=frames,
        ranks=_ranks(lines, errors, report, summaries, in_test, error, collectives, text, category),
        mismatch=collectives.mismatch,
        stacks=summaries[:16],
        failed_tests=failed_tests[:100],
        excerpt=excerpt,
    )


def diagnose_run(record: RunRecord, root: Path) -> Diagnosis:
    path = Path(root) / record.log_path
    # After a timeout the log goes on with what rootcause caused (stack dumps, SIGTERM tracebacks).
    text = condensed_text(path, record.timeout_at_byte) if path.is_file() else record.output
    diagnosis = diagnose_text(text, root, timed_out=record.timed_out, stacks=record.stacks,
                              exit_code=record.exit_code, signal=record.signal)
    # A Slurm run knows every rank and its node (tools/runner/slurm.py), also ranks whose lines the log
    # does not label: those showed no error.
    ran: dict[str, str] = getattr(record, "rank_nodes", {})
    known = {**ran, **{str(s.rank): s.node for s in diagnosis.stacks if s.rank is not None and s.node}}
    for rank, info in diagnosis.ranks.items():
        if info.node is None and rank in known:
            info.node = known[rank]
    if ran and len(ran) <= MAX_RANKS and "…" not in diagnosis.ranks:
        ranks = {rank: diagnosis.ranks.get(rank) or RankInfo(outcome="ok", node=node) for rank, node in ran.items()}
        diagnosis.ranks = dict(sorted({**ranks, **diagnosis.ranks}.items(),
                                      key=lambda kv: int(kv[0])))
    dumps = path.parent / DUMP_FOLDER  # every rank's flight recorder, dumped before the kill of a hang
    if dumps.is_dir():
        try:
            attach_collectives(diagnosis, analyse(read_dumps(dumps)), Path(root))
        except DumpError as exc:
            diagnosis.excerpt = f"Flight recorder: {exc}\n{diagnosis.excerpt}"
    return diagnosis


def _named_site(stack: StackSummary) -> str:
    """`end_of_epoch at train.py:9`: the stack's user frame with the function the frame is in."""
    site = stack.user_frame or stack.call_site or ""
    tail = site.rsplit("/", 1)[-1]
    for frame in reversed(stack.frames):  # `module:function (file:line)`
        if frame.endswith(f"{tail})") and " (" in frame:
            return f"{frame.split(' (', 1)[0].rsplit(':', 1)[-1]} at {site}"
    return site


def mismatch_identity(report: Report, root: Path, sites: dict[int, str] | None = None,
                      fallback: str = "") -> sig.Identity | None:
    """A collective mismatch's identities: the group from what the ranks disagree on (the kind, the process group's
    role, never its run-dependent name, the ops), the call site from the culprits' places (their stacks' when
    known, else the places the dumps recorded) as `stem:function`. A reproduction and the dumps a user brings of
    the same hang share the group, whatever else each holds."""
    m = report.mismatch
    if m is None:
        return None
    ops = sorted(set(m.ops.values()) - {"(not entered)", "collective"})
    desc = next((f.group.desc for f in report.findings if f.mismatch.group == m.group), "") or "default_pg"
    what = f"collective {m.kind} in {desc}: {' — '.join(ops)}"
    places = {**recorded_sites(report, root), **(sites or {})}
    named = [places[r] for r in m.culprit_ranks if r in places]  # `step at train.py:54`
    call_site = sorted({f"{Path(s.split(' at ', 1)[-1].rsplit(':', 1)[0]).stem}:{s.split(' at ', 1)[0]}"
                        for s in named if " at " in s})
    # No culprit's place known (mp.spawn's processes carry no RANK): where the stacks stand, else the group's role.
    return sig.identity(report.category or "hang", what, call_site[:4] or [fallback or desc])


def attach_collectives(diagnosis: Diagnosis, report: Report, root: Path) -> Diagnosis:
    """The flight-recorder analysis on a diagnosis: each rank's place per group, the mismatch, its lines
    first in the message of a hang said in no better words (no exception read), and atop the excerpt."""
    if not report.dumps:
        return diagnosis
    stacks = {s.rank: s for s in diagnosis.stacks if s.rank is not None}
    sites = {rank: _named_site(s) for rank, s in stacks.items() if s.user_frame or s.call_site}
    facts = collective_lines(report, root, sites)
    recorded = recorded_sites(report, root)
    for place in report.collectives:
        said = diagnosis.ranks.get(str(place.rank))  # a Slurm run's rank -> node, before the dump's hostname
        place.node = (stacks[place.rank].node if place.rank in stacks else None) or (
            said.node if said else None) or place.node
        place.call_site = sites.get(place.rank) or recorded.get(place.rank)
    diagnosis.collectives = report.collectives[:MAX_COLLECTIVES]
    diagnosis.mismatch = report.mismatch or diagnosis.mismatch
    if report.mismatch and len(report.dumps) <= MAX_RANKS:
        m = report.mismatch
        for rank in sorted({*m.culprit_ranks, *report.waiting}):
            before = diagnosis.ranks.get(str(rank))
            culprit = rank in m.culprit_ranks
            if culprit or before is None or before.outcome in ("ok", "hang"):
                kind = {"op": "another op", "sizes": "other sizes"}.get(m.kind, m.kind)
                why = (f"{kind} at collective #{m.seq} of {m.group} (flight recorder)" if culprit
                       else "waits in a collective (flight recorder)")
                diagnosis.ranks[str(rank)] = RankInfo(outcome="culprit" if culprit else "waiting", first_error=why,
                                                      node=before.node if before else None)
        diagnosis.ranks = dict(sorted(diagnosis.ranks.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0])
                                                                              if kv[0].isdigit() else 0, kv[0])))
    if report.category and diagnosis.exception_type is None and diagnosis.category not in ("hang",
                                                                                            "distributed_error"):
        diagnosis.category = report.category
    ident = mismatch_identity(report, root, sites, diagnosis.signature.removeprefix(diagnosis.group).lstrip("|"))
    if ident and diagnosis.exception_type is None and diagnosis.category in ("hang", "distributed_error"):
        diagnosis.group, diagnosis.signature = ident.group, ident.signature
    if report.mismatch and diagnosis.exception_type is None:
        diagnosis.message = bounded("\n".join([facts[0], diagnosis.message] if diagnosis.message else facts[:1]),
                                    2_000)
    diagnosis.excerpt = "\n".join([f"Flight recorder ({len(report.dumps)} ranks):", *facts, diagnosis.excerpt])
    diagnosis.evidence = [*diagnosis.evidence, "flight_recorder"]
    return diagnosis


def diagnose_file(path: Path, root: Path) -> Diagnosis:
    """A log of any size, read streaming (head, tail, and windows around error markers)."""
    return diagnose_text(condensed_text(Path(path)), root)
