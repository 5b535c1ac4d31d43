"""What the distributed backends' own watchdogs say about a hang, read per rank.

ProcessGroupNCCL's watchdog (`[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..,
OpType=..)`, `last enqueued NCCL work: N, last completed NCCL work: M`, the dump signal it raises and the
ranks that only observe it), its desync report (`[3] didn't join collective #5`), the flight-recorder
analyzer's text (`Not all ranks joining collective ... missing ranks: {3, 4}`), gloo's monitored barrier
(`Ranks 2, 3 failed to pass monitoredBarrier`), the debug wrapper's collective fingerprints and
Horovod's stall inspector (`[missing ranks: 1]`, `[ready ranks: 0, 2]`).

A rank whose last enqueued work equals its last completed one, below the collective another rank of its
group is stuck in, never entered that collective: it is the culprit (NeMo's rule); a rank whose
watchdog fired waits in the collective; a rank that only received another rank's dump signal waits too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rootcause.tools.observe.diagnosis.models import CollectiveMismatch, Frame, RankInfo
from rootcause.tools.observe.diagnosis.text import Line

_RANK_TAG = (r"\[(?:PG (?:ID )?(?P<pgid>\d+)\s*(?:PG GUID (?P<guid>\d+))?\s*(?:\((?P<pgname>[^)]*)\))?\s*)?"
             r"Rank (?P<tag>\d+)\]")
# Older releases print no SeqNum: `WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000)`.
_CAUGHT = re.compile(_RANK_TAG + r"\s*Watchdog caught collective operation timeout:\s*WorkNCCL\("
                     r"(?:SeqNum=(?P<seq>\d+),)?\s*OpType=(?P<op>\w+)(?:,\s*NumelIn=(?P<numel>\d+))?")
_DETECTED = re.compile(_RANK_TAG + r"\s*(?:failure detected by watchdog at work sequence id: (?P<seq>\d+)\s*PG status: "
                       r"last enqueued work: (?P<enq>-?\d+), last completed work: (?P<done>-?\d+)|"
                       r"Exception \(either an error or timeout\) detected\s*by watchdog at work: (?P<seq2>\d+), "
                       r"last enqueued NCCL work: (?P<enq2>-?\d+), last completed NCCL work: (?P<done2>-?\d+))")
_SIGNAL = re.compile(_RANK_TAG + r"\s*Received a dump signal due to a collective timeout from\s+(?:(?P<self>this local "
                     r"rank)|rank (?P<origin>\d+))\b.*?Last enqueued NCCL work: (?P<enq>-?\d+), last completed NCCL "
                     r"work: (?P<done>-?\d+)")
# The rank's own heartbeat monitor: its watchdog thread itself stopped making progress (then it dumps, by itself).
_HEARTBEAT = re.compile(_RANK_TAG + r"\s*(?:Heartbeat monitor timed out|(?:\[PG[^\]]*\]\s*)?ProcessGroupNCCL's "
                        r"watchdog got stuck)")
_OBSERVED = re.compile(_RANK_TAG + r"\s*(?:Observed flight recorder dump signal from another rank|ProcessGroupNCCL "
                       r"preparing to dump debug info)")
_DESYNC_TIMEOUT = re.compile(r"\[(?P<rank>\d+)\] Timeout at collective: (?P<op>\w+), #(?P<seq>\d+)")
_DESYNC_RANKS = re.compile(r"(?P<ranks>\[[\d,\s]*\]) (?P<what>joined but didn't finish|didn't join|did not join) "
                           r"(?:the )?collective #(?P<seq>\d+)")
_FR_MISSING = re.compile(r"Not all ranks joining collective:?\s*sequence number:?\s*(?P<seq>\d+)")
_FR_FRAME = re.compile(r"^\s*(?P<func>[\w<>.]+) at (?P<file>\S+\.py):(?P<line>\d+)\s*$")
_FR_FIELD = re.compile(r"^\s*(?P<key>group info|collective|missing ranks|input sizes|world size):\s*(?P<value>.+?)\s*$")
_BARRIER_FAILED = re.compile(r"(?:\[Rank (?P<by>\d+)\]:?\s*)?Ranks? (?P<ranks>\d+(?:\s*,\s*\d+)*) failed to pass "
                             r"monitoredBarrier")
_BARRIER_WAITING = re.compile(r"Rank (?P<rank>\d+) successfully reached monitoredBarrier, but received errors while "
                              r"waiting for send/recv from rank (?P<from>\d+)")
_FINGERPRINTS = re.compile(r"Rank (?P<a>\d+) is running collective: CollectiveFingerPrint\((?P<fa>.*?)\),?\s*but "
                           r"Rank (?P<b>\d+) is running collective: CollectiveFingerPrint\((?P<fb>.*?)\)\.?"
                           r"(?:Collectives differ|$)")
_FINGERPRINT = re.compile(r"SequenceNumber=(?P<seq>\d+),?\s*OpType=(?P<op>\w+)")
_HOROVOD = re.compile(r"(?P<tensor>[\w./\-]+) \[(?P<kind>missing|ready) ranks: (?P<ranks>\d+(?:\s*,\s*\d+)*)\]")
_HOROVOD_OP = re.compile(r"^(?:Horovod)?(?P<op>allreduce|allgather|broadcast|alltoall|reducescatter)[._]?",
                         re.IGNORECASE)


@dataclass
class RankState:
    """One rank's place as the watchdog lines tell it."""
    rank: int
    group: str = "?"
    role: str = "waiting"
    """fired (its watchdog caught the timeout) | signalled (it only saw another rank's dump signal) | waiting
    (it reached a barrier, waits on another rank) | culprit (never entered, failed to pass, missing)."""
    seq: int | None = None
    op: str | None = None
    numel: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    signal_from: int | None = None


@dataclass
class Collectives:
    ranks: dict[int, RankState] = field(default_factory=dict)
    culprits: set[int] = field(default_factory=set)
    mismatch: CollectiveMismatch | None = None
    facts: list[str] = field(default_factory=list)
    """One line per fact, for the diagnosis' message."""
    kinds: list[str] = field(default_factory=list)
    """Which reports the log holds (nccl-watchdog, dump-signal, desync-report, fr-trace, monitored-barrier,
    fingerprint-mismatch, horovod-stall), in order of appearance."""
    frames: list[Frame] = field(default_factory=list)
    """A report's own stack of the stuck collective (fr_trace's `collective stack trace:`), outermost first."""
    blamed: set[int] = field(default_factory=set)
    """Peers whose send/recv failed at gloo's monitored barrier: the culprits unless a rank is named as failing
    to pass it (rank 0 then answers every other rank with an error: `from rank 0` is collateral)."""
    deferring: set[int] = field(default_factory=set)
    """Ranks whose own error only reports another rank's failure (gloo's "received errors while waiting for
    send/recv from rank 0"): they wait on that rank, whatever they raised."""
    where: list[str] = field(default_factory=list)
    """What the stuck collectives were, machine-independent (`ALLREDUCE(304640)` with the watchdog's NumelIn,
    Horovod's first stalled tensor)."""

    @property
    def found(self) -> bool:
        return bool(self.kinds)

    def state(self, rank: int) -> RankState:
        return self.ranks.setdefault(rank, RankState(rank))

    def saw(self, kind: str) -> None:
        if kind not in self.kinds:
            self.kinds.append(kind)


def _ints(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text)]


def _group(m: re.Match[str]) -> str:
    name, pgid, guid = m.group("pgname"), m.group("pgid"), m.group("guid")
    if name:
        return name
    if pgid is not None:
        return f"pg {pgid}" + (f" (guid {guid})" if guid and guid != pgid else "")
    return "?"


def _candidates(lines: list[Line], pos: int, more: int = 3) -> list[str]:
    """A line alone, then joined with the next ones (a paste that hard-wrapped the message, mid-word or not)."""
    text = lines[pos].text
    found = [text]
    following = [ln.text.strip() for ln in lines[pos + 1:pos + 1 + more]]
    for k in range(1, len(following) + 1):
        if not following[k - 1]:
            break
        found += ["".join([text, *following[:k]]), " ".join([text.rstrip(), *following[:k]])]
    return found


def _search(pattern: re.Pattern[str], lines: list[Line], pos: int) -> re.Match[str] | None:
    first = len(lines[pos].text)
    for candidate in _candidates(lines, pos):
        m = pattern.search(candidate)
        if m and m.start() < first:
            return m
    return None


_LAUNCHER_TAG = re.compile(r"\[rank(?P<rank>\d+)\]:")


def _rank_of(line: Line, m: re.Match[str]) -> int:
    # The launcher's tag is the global rank (also when a prefix before it was left on the line); the message's
    # `[Rank N]` is the rank within its process group.
    if line.rank is not None:
        return line.rank
    tag = _LAUNCHER_TAG.search(m.string, 0, m.start() + 1)
    return int(tag.group("rank")) if tag else int(m.group("tag"))


def read_collectives(lines: list[Line]) -> Collectives:
    found = Collectives()
    fingerprints: list[tuple[int, str, int, str]] = []
    horovod: dict[str, tuple[str, set[int]]] = {}
    for pos, line in enumerate(lines):
        text = line.text
        near = f"{text} {lines[pos + 1].text}" if pos + 1 < len(lines) else text  # a message wrapped after a tag
        if "Watchdog caught" in near:
            m = _search(_CAUGHT, lines, pos)
            if m:
                state = found.state(_rank_of(line, m))
                state.role, state.op = "fired", m.group("op").upper()
                state.seq = int(m.group("seq")) if m.group("seq") else state.seq
                state.numel = int(m.group("numel")) if m.group("numel") else state.numel
                state.group = _group(m) if _group(m) != "?" else state.group
                found.saw("nccl-watchdog")
        if "detected" in near and "watchdog" in near:
            m = _search(_DETECTED, lines, pos)
            if m:
                state = found.state(_rank_of(line, m))
                state.role = "fired"
                state.seq = int(m.group("seq") or m.group("seq2"))
                state.last_enqueued = int(m.group("enq") or m.group("enq2"))
                state.last_completed = int(m.group("done") or m.group("done2"))
                state.group = _group(m) if _group(m) != "?" else state.group
                found.saw("nccl-watchdog")
        if "Received a dump signal" in near:
            m = _search(_SIGNAL, lines, pos)
            if m:
                state = found.state(_rank_of(line, m))
                state.last_enqueued, state.last_completed = int(m.group("enq")), int(m.group("done"))
                state.group = _group(m) if _group(m) != "?" else state.group
                if m.group("self"):
                    state.role = "fired"
                elif state.role != "fired":
                    state.role, state.signal_from = "signalled", int(m.group("origin"))
                    origin = found.state(int(m.group("origin")))
                    origin.role, origin.group = "fired", state.group if origin.group == "?" else origin.group
                found.saw("dump-signal")
        if "Heartbeat monitor timed out" in text or "watchdog got stuck" in text:
            m = _HEARTBEAT.search(text)
            if m:
                state = found.state(_rank_of(line, m))
                state.role = "fired"
                state.group = _group(m) if _group(m) != "?" else state.group
                found.saw("nccl-heartbeat")
        if "Observed flight recorder dump signal" in text or "preparing to dump debug info" in text:
            m = _OBSERVED.search(text)
            if m:
                state = found.state(_rank_of(line, m))
                if state.role == "waiting":
                    state.role, state.group = "signalled", _group(m) if _group(m) != "?" else state.group
                found.saw("dump-signal")
        _desync(found, lines, pos)
        _fr_trace(found, lines, pos)
        _barrier(found, line)
        m = _FINGERPRINTS.search(text) if "CollectiveFingerPrint" in text else None
        if m:
            fa, fb = _FINGERPRINT.search(m.group("fa")), _FINGERPRINT.search(m.group("fb"))
            if fa and fb:
                fingerprints.append((int(m.group("a")), f"{fa.group('op')} #{fa.group('seq')}",
                                     int(m.group("b")), f"{fb.group('op')} #{fb.group('seq')}"))
                found.saw("fingerprint-mismatch")
        for h in _HOROVOD.finditer(text) if " ranks: " in text else ():
            _, ranks = horovod.setdefault(h.group("tensor"), (h.group("kind"), set()))
            ranks.update(_ints(h.group("ranks")))
            found.saw("horovod-stall")
    named = {s.group for s in found.ranks.values()} - {"?"}
    if len(named) == 1:  # a line that names no group (the caught line) is of the one group the others name
        for state in found.ranks.values():
            state.group = state.group if state.group != "?" else next(iter(named))
    if found.blamed and not found.culprits:
        found.culprits.update(found.blamed)
    _horovod(found, horovod)
    _fingerprint_culprits(found, fingerprints)
    _never_entered(found)
    _describe(found)
    return found


def _desync(found: Collectives, lines: list[Line], pos: int) -> None:
    text = lines[pos].text
    m = _DESYNC_TIMEOUT.search(text) if "Timeout at collective" in text else None
    if m:
        state = found.state(int(m.group("rank")))
        state.role, state.op, state.seq = "fired", m.group("op").upper(), int(m.group("seq"))
        found.saw("desync-report")
    m = _DESYNC_RANKS.search(text) if " collective #" in text else None
    if not m:
        return
    ranks = _ints(m.group("ranks"))
    found.saw("desync-report")
    if m.group("what") != "joined but didn't finish":
        found.culprits.update(ranks)
        fired = [st for st in found.ranks.values() if st.role == "fired" and st.seq == int(m.group("seq"))]
        if found.mismatch is None:
            found.mismatch = CollectiveMismatch(group=fired[0].group if fired else "?", seq=int(m.group("seq")),
                                                ops={str(st.rank): st.op or "?" for st in fired},
                                                missing_ranks=ranks, culprit_ranks=ranks, kind="missing")
        found.facts.append(f"{_who(ranks)} never joined collective #{m.group('seq')} (desync report)")
        return
    started = set()
    for ln in lines[pos + 1:pos + 8]:
        if "started" in ln.text and "[" in ln.text:
            started.update(_ints(ln.text.split("started", 1)[0]))
    if started and set(ranks) >= started:
        found.facts.append(f"every rank ({len(ranks)}) joined collective #{m.group('seq')} and none finished "
                           "(desync report): no rank lags, the collective itself stalled")
    else:
        found.culprits.update(ranks)
        found.facts.append(f"{_who(ranks)} joined but never finished collective #{m.group('seq')}")


def _fr_trace(found: Collectives, lines: list[Line], pos: int) -> None:
    m = _FR_MISSING.search(lines[pos].text)
    if not m:
        return
    fields: dict[str, str] = {}
    stack: list[Frame] = []
    for ln in lines[pos + 1:pos + 40]:
        f = _FR_FIELD.match(ln.text)
        if f:
            fields.setdefault(f.group("key"), f.group("value"))
        frame = _FR_FRAME.match(ln.text)
        if frame:
            stack.append(Frame(file=frame.group("file"), line=int(frame.group("line")), function=frame.group("func")))
        elif _FR_MISSING.search(ln.text):
            break
    found.frames = found.frames or list(reversed(stack))
    missing = _ints(fields.get("missing ranks", ""))
    group = fields.get("group info", "?").split(":", 1)[-1] or "?"
    op = fields.get("collective", "?").split(":", 1)[-1]
    sizes = fields.get("input sizes", "")
    found.saw("fr-trace")
    found.where.append(op)
    found.culprits.update(missing)
    found.mismatch = CollectiveMismatch(group=group, seq=int(m.group("seq")), ops={"others": f"{op}{sizes}"},
                                        missing_ranks=missing, culprit_ranks=missing, kind="missing")
    found.facts.append(f"{_who(missing)} never joined {op} #{m.group('seq')} of {group} (flight recorder)")


def _barrier(found: Collectives, line: Line) -> None:
    text = line.text
    if "monitoredBarrier" not in text:
        return
    m = _BARRIER_FAILED.search(text)
    if m:
        ranks = _ints(m.group("ranks"))
        found.culprits.update(ranks)
        by = m.group("by") or (str(line.rank) if line.rank is not None else None)
        if by is not None:
            found.state(int(by)).role = "waiting"
        found.saw("monitored-barrier")
        fact = f"{_who(ranks)} failed to pass the monitored barrier"
        fact += f" (reported by rank {by})" if by else ""
        if fact not in found.facts:
            found.facts.append(fact)
    m = _BARRIER_WAITING.search(text)
    if m:
        # The rank that reached the barrier names the peer whose send/recv failed: that peer is the one to look at.
        waiting, peer = int(m.group("rank")), int(m.group("from"))
        found.state(waiting).role = "waiting"
        found.blamed.add(peer)
        found.deferring.add(waiting)
        found.saw("barrier-peer-error")
        fact = f"rank {waiting} reached the monitored barrier, but its send/recv with rank {peer} failed"
        if fact not in found.facts:
            found.facts.append(fact)


def _horovod(found: Collectives, stalls: dict[str, tuple[str, set[int]]]) -> None:
    if not stalls:
        return
    missing: set[int] = set()
    for kind, ranks in stalls.values():
        if kind == "missing":
            missing |= ranks
        elif ranks:
            # The stall inspector lists who is ready: the ranks below the highest one it names that it does not.
            missing |= set(range(max(ranks) + 1)) - ranks
    first = next(iter(stalls))
    op = _HOROVOD_OP.match(first)
    tensor = re.sub(r"_?\d+$", "", first)
    found.where.append(f"{op.group('op').lower() if op else 'collective'} {tensor}")
    if missing:
        found.culprits.update(missing)
        found.facts.append(f"{_who(sorted(missing))} never submitted {len(stalls)} stalled tensor(s), first "
                           f"{first} (Horovod stall inspector)")


def _fingerprint_culprits(found: Collectives, reports: list[tuple[int, str, int, str]]) -> None:
    """The rank the others disagree with: the one most reports name against a different op; one report alone
    names the other rank (a reporter is one of many ranks that agree)."""
    if not reports:
        return
    votes: dict[int, int] = {}
    ops: dict[str, str] = {}
    for a, op_a, b, op_b in reports:
        votes[b] = votes.get(b, 0) + 1
        ops.setdefault(str(a), op_a)
        ops.setdefault(str(b), op_b)
    top = max(votes.values())
    culprits = sorted(r for r, v in votes.items() if v == top)
    found.culprits.update(culprits)
    seq = min(int(op.rsplit("#", 1)[-1]) for op in ops.values())
    found.mismatch = CollectiveMismatch(group="?", seq=seq, ops=ops, culprit_ranks=culprits, kind="op")
    found.facts.append("ranks disagree on the collective: " + " — ".join(f"rank {r} {op}" for r, op in ops.items()))


def _never_entered(found: Collectives) -> None:
    """NeMo's rule, per process group: the stuck collective is the lowest one a rank's watchdog caught; a rank
    of that group with nothing pending (last enqueued == last completed) below it never entered it."""
    groups: dict[str, list[RankState]] = {}
    for state in found.ranks.values():
        groups.setdefault(state.group, []).append(state)
    for group, states in groups.items():
        stuck = [s.seq if s.seq is not None else (s.last_completed + 1 if s.last_completed is not None and
                                                  s.last_enqueued != s.last_completed else None)
                 for s in states if s.role == "fired"]
        stuck = [s for s in stuck if s is not None]
        if not stuck:
            continue
        seq = min(stuck)
        idle = [s for s in states if s.last_enqueued is not None and s.last_enqueued == s.last_completed
                and s.last_completed < seq]
        for s in idle:
            s.role = "culprit"
            found.culprits.add(s.rank)
        ops = {str(s.rank): s.op or "?" for s in states if s.role == "fired" and s.op}
        seqs = {s.seq for s in states if s.role == "fired" and s.seq is not None}
        if idle:
            found.mismatch = CollectiveMismatch(group=group, seq=seq, ops=ops, missing_ranks=[s.rank for s in idle],
                                                culprit_ranks=[s.rank for s in idle], kind="missing")
            found.facts.append(f"{_who([s.rank for s in idle])} never entered collective #{seq} of "
                               f"{_name(group)}: nothing pending (last enqueued = last completed = "
                               f"{idle[0].last_completed}) while other ranks wait in it")
        elif len(seqs) > 1 and found.mismatch is None:
            found.mismatch = CollectiveMismatch(group=group, seq=min(seqs), ops={
                str(s.rank): f"{s.op or '?'} #{s.seq}" for s in states if s.role == "fired" and s.seq is not None})
            found.facts.append(f"ranks of {_name(group)} time out at different collectives: " + ", ".join(
                f"rank {s.rank} {s.op or '?'} #{s.seq}" for s in sorted(states, key=lambda s: s.rank)
                if s.role == "fired" and s.seq is not None))


def _describe(found: Collectives) -> None:
    fired = sorted((s for s in found.ranks.values() if s.role == "fired"), key=lambda s: s.rank)
    # The element count tells two timeouts of one op apart (a gradient bucket from a loss scalar) and is the
    # same wherever the job ran: a frameless watchdog log's place.
    for op in sorted({f"{s.op}({s.numel})" if s.numel is not None else s.op for s in fired if s.op}):
        if op not in found.where:
            found.where.append(op)
    if "nccl-heartbeat" in found.kinds and not any(s.op for s in fired):
        # No collective named: which process group's monitor gave up is all a heartbeat log tells of its place.
        for group in sorted({s.group for s in fired} - {"?"}):
            found.where.append(f"heartbeat of {group}")
    by_group: dict[str, list[RankState]] = {}
    for state in fired:
        by_group.setdefault(state.group, []).append(state)
    lines = []
    for group, states in by_group.items():
        op = next((s.op for s in states if s.op), None)
        seqs = sorted({s.seq for s in states if s.seq is not None})
        what = (op or "a collective") + (f" #{seqs[0]}" if len(seqs) == 1 else "")
        counted = next((s for s in states if s.last_enqueued is not None), None)
        numbers = (f" (last enqueued {counted.last_enqueued}, last completed {counted.last_completed})"
                   if counted is not None and len(states) == 1 else "")
        lines.append(f"{_who([s.rank for s in states])}: watchdog timed out on {what} of {_name(group)}{numbers}")
    found.facts.extend(lines)  # after the facts that name culprits: the rank to look at comes first
    signalled = sorted(s.rank for s in found.ranks.values() if s.role == "signalled")
    if signalled:
        origins = sorted({s.signal_from for s in found.ranks.values() if s.signal_from is not None})
        source = f"rank {_list(origins)}'s" if origins else "another rank's"
        found.facts.append(f"{_who(signalled)} only saw {source} dump signal")
    idle = sorted(s.rank for s in found.ranks.values() if s.role == "signalled" and s.last_enqueued is not None
                  and s.last_enqueued == s.last_completed)
    if idle:
        found.facts.append(f"{_who(idle)} had nothing pending (last enqueued = last completed): in no collective")


def shape(found: Collectives) -> str:
    """The hang's shape in words without numbers: who fired, who only saw the signal, who had nothing pending,
    who is missing. Two hangs of one shape and one place are one hang."""
    roles = {s.role for s in found.ranks.values()}
    words = []
    if "fired" in roles:
        here = any(s.role == "fired" and (s.op or s.last_enqueued is not None) for s in found.ranks.values())
        words.append("a watchdog fired" if here else "a heartbeat monitor fired" if "nccl-heartbeat" in found.kinds
                     else "a watchdog fired elsewhere")
    if "signalled" in roles:
        words.append("others saw its dump signal")
    if any(s.last_enqueued is not None and s.last_enqueued == s.last_completed for s in found.ranks.values()):
        words.append("a rank had nothing pending")
    elif any(s.last_enqueued is not None and s.last_enqueued > s.last_completed + 1 for s in found.ranks.values()):
        words.append("work queued behind it")
    if found.culprits:
        words.append("ranks never arrived")
    if found.mismatch is not None and len(set(found.mismatch.ops.values())) > 1:
        words.append("ranks disagree on the collective")
    return ", ".join(words)


def rank_infos(found: Collectives) -> dict[int, RankInfo]:
    """Each rank's outcome: culprit, hang (its watchdog fired), waiting (saw a dump signal, waits at a barrier)."""
    infos: dict[int, RankInfo] = {}
    for rank in found.culprits:
        state = found.ranks.get(rank)
        why = (f"never entered collective #{found.mismatch.seq}" if found.mismatch and rank in
               found.mismatch.culprit_ranks else "named by the others as the rank that never arrived")
        if state is not None and state.last_enqueued is not None:
            why += f" (last enqueued {state.last_enqueued}, last completed {state.last_completed})"
        infos[rank] = RankInfo(outcome="culprit", first_error=why)
    for rank, state in found.ranks.items():
        if rank in infos:
            continue
        numbers = (f" (last enqueued {state.last_enqueued}, last completed {state.last_completed})"
                   if state.last_enqueued is not None else "")
        if state.role == "fired":
            what = f"{state.op or 'collective'}" + (f" #{state.seq}" if state.seq is not None else "")
            infos[rank] = RankInfo(outcome="hang", first_error=f"its watchdog timed out on {what}{numbers}")
        elif state.role == "signalled":
            origin = f"rank {state.signal_from}'s" if state.signal_from is not None else "another rank's"
            infos[rank] = RankInfo(outcome="waiting", first_error=f"only saw {origin} dump signal{numbers}")
        else:
            infos[rank] = RankInfo(outcome="waiting", first_error="waits on another rank")
    return infos


def _name(group: str) -> str:
    return "its process group" if group == "?" else group


def _who(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_list(ranks)}"


def _list(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)
