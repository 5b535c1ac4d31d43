"""Per process group and rank: where each rank stands, the first collective the ranks disagree on, the culprits.

The reading follows torch's flight-recorder analyzer (`torch.distributed.flight_recorder.components`: a group's
collectives are matched across ranks by `collective_seq_id`) and NVIDIA's CollectiveAnalyzer (group by process
group and sequence id, find where the ranks diverge and who is missing there), without their habit of naming
every collective after the first mismatch: only the first disagreement of each group counts.

Where a rank stands in a group: the last collective it entered (the highest `collective_seq_id` among its
entries, or pg_status' `last_enqueued_collective`) and the last it completed (state `completed`, a retired
entry - gloo marks nothing completed - or pg_status' `last_completed_collective`).

The first disagreement of a group is the lowest sequence id where
  - the ranks that entered it called another op, or other sizes (ops whose sizes must agree: all_reduce,
    broadcast, all_gather, reduce_scatter...; all_to_all and point-to-point sizes legitimately differ);
  - ranks never entered it (kind `missing`: NeMo's rule, a rank whose last enqueued collective is below it);
  - ranks entered it but never completed it while peers did (kind `stalled`: a collective completes on a peer
    only once every rank took part, so the rank's own device stopped after its part).
At one sequence id an op or size disagreement comes first, then missing ranks, then stalled ones.

Culprit rule:
  - ranks missing at that sequence id are the culprits;
  - among ranks that entered it, the minority op/sizes are the culprits; a tie (two ranks) goes to the rank
    whose op breaks its own run of preceding ops in that group (the rank continuing its pattern is the
    expected one); if neither or both break, every rank there is named;
  - stalled ranks are the culprits of a stall;
  - when every rank with a dump waits in a collective they all entered alike, the members without a dump
    (at most half the group, by pg_config's ranks) are (kind `no_dump`), but only when no group names a
    culprit otherwise (in a hung job every rank waits somewhere, so a missing dump alone proves little).
Across groups: a group whose culprits are only missing ranks that stand inside an unfinished collective of
another disagreeing group is explained by that group (its ranks wait there). The culprits are those of the
unexplained groups; the group reported is the earliest of them (by the time its first disagreeing entry was
created). When every group is explained by another (a deadlock across groups: each waits for the other),
the ranks whose own sequence of calls across groups breaks its pattern are the culprits.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rootcause.tools.observe.collectives.dumps import DumpSet, Entry, RankDump
from rootcause.tools.observe.collectives.models import CollectiveCall, CollectiveMismatch, RankCollectives
from rootcause.tools.vocabulary.collectives import sized_ops

SIZED_OPS = sized_ops()
MAX_PERIOD = 8
KIND_ORDER = {"op": 0, "sizes": 0, "missing": 1, "stalled": 2, "no_dump": 3}


@dataclass
class Standing:
    """A rank in one group."""
    rank: int
    entries: dict[int, Entry]
    entered: int
    completed: int
    known: bool = True
    peers: dict[int, Entry] = field(default_factory=dict)
    """seq -> a peer's entry: what a collective this rank took part in was, when its own dump dropped it
    (dumps of unfinished work only)."""
    """False for a member with a dump but no entry of the group: where it stands there is unknown, and since
    dumps keep unfinished work, it has none pending there."""

    def call(self, seq: int) -> CollectiveCall | None:
        if seq <= 0:
            return None
        entry = self.entries.get(seq) or (self.peers.get(seq) if seq <= self.entered else None)
        state = "completed" if seq <= self.completed else "entered"
        if entry is None:
            return CollectiveCall(seq=seq, op="collective", state=state)
        return CollectiveCall(seq=seq, op=entry.op, sizes=entry.sizes, state=state)


@dataclass
class Group:
    name: str
    desc: str
    ranks: list[int]
    standing: dict[int, Standing]
    """Ranks with a dump; members without one are in `no_dump`."""
    no_dump: list[int] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.desc in ("default_pg", "") and self.name in ("0", ""):
            return "the default group"
        span = _span(self.ranks)
        return f"{self.desc or 'group'} (group {self.name}, ranks {span})" if span else f"{self.desc} ({self.name})"


@dataclass
class Finding:
    group: Group
    mismatch: CollectiveMismatch
    created_ns: int
    stalled: list[int] = field(default_factory=list)
    """Ranks that entered a collective peers completed and never completed it themselves."""
    later_missing: list[int] = field(default_factory=list)
    """Ranks behind the others in entering the group's collectives (at this sequence id or after it)."""
    explained_by: str | None = None


@dataclass
class Report:
    """What the dumps say: every rank's place per group, the mismatch reported, all groups' findings."""
    collectives: list[RankCollectives]
    mismatch: CollectiveMismatch | None
    findings: list[Finding]
    groups: dict[str, Group]
    dumps: dict[int, RankDump]
    notes: list[str]
    waiting: list[int]
    """Ranks inside a collective they never completed (a hang, when not empty)."""

    @property
    def category(self) -> str | None:
        """hang when ranks wait in a collective (DESIGN: no progress); a disagreement with nobody waiting is
        distributed_error (DESIGN: collective mismatch); None when the dumps show neither."""
        if self.waiting:
            return "hang"
        return "distributed_error" if self.mismatch else None


def _span(ranks: list[int]) -> str:
    if not ranks:
        return ""
    ranks = sorted(set(ranks))
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(str(r) for r in ranks[:16]) + ("…" if len(ranks) > 16 else "")


def _groups(dumps: dict[int, RankDump]) -> dict[str, Group]:
    members: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    per_rank: dict[str, dict[int, list[Entry]]] = {}
    for rank, dump in dumps.items():
        for entry in dump.entries:
            if entry.is_p2p or entry.seq <= 0:
                continue
            per_rank.setdefault(entry.group, {}).setdefault(rank, []).append(entry)
            members.setdefault(entry.group, set()).add(rank)
            descs.setdefault(entry.group, entry.desc)
    default = next((g for g in members if descs.get(g) == "default_pg"), "0" if "0" in members else None)
    for dump in dumps.values():  # pg_config lists every member (NCCL's by name; gloo's default group unnamed)
        for name, config in dump.groups.items():
            name = name or (default if not config.name else name)
            if name in members and config.ranks:
                members[name].update(config.ranks)
            if name in descs and config.desc and not descs[name]:
                descs[name] = config.desc
    groups = {}
    for name, ranks in members.items():
        standing = {}
        for rank in sorted(ranks):
            if rank not in dumps:
                continue
            entries = {e.seq: e for e in per_rank.get(name, {}).get(rank, [])}
            standing[rank] = _standing(dumps[rank], name, rank, entries)
        peers: dict[int, Entry] = {}
        for st in standing.values():
            for seq, entry in st.entries.items():
                peers.setdefault(seq, entry)
        for st in standing.values():
            st.peers = peers
        groups[name] = Group(name, descs.get(name, ""), sorted(ranks), standing,
                             no_dump=sorted(r for r in ranks if r not in dumps))
    return groups


def _standing(dump: RankDump, group: str, rank: int, entries: dict[int, Entry]) -> Standing:
    entered = max(entries, default=0)
    completed = max((s for s, e in entries.items() if e.state == "completed" or e.retired), default=0)
    pg_ids = {e.pg_id for e in entries.values() if e.pg_id is not None and e.pg_id >= 0}
    for pg_id in pg_ids:
        last_enqueued, last_completed = dump.status.get(str(pg_id), (-1, -1))
        entered = max(entered, last_enqueued)
        completed = max(completed, last_completed)
    return Standing(rank, entries, entered, max(completed, 0), known=bool(entries))


def _continues(history: list[tuple]) -> bool | None:
    """True if the last item repeats a period of the items before it (at least two periods of them), False if
    the history is long enough to show a pattern and the last item breaks it, None if too short to tell."""
    n = len(history)
    if n < 3:
        return None
    for period in range(1, min(MAX_PERIOD, (n - 1) // 2) + 1):
        run, i = 0, n - 1
        while i - period >= 0 and history[i] == history[i - period]:
            run, i = run + 1, i - 1
        if run >= max(2, 2 * period):
            return True
    return False


def _key(entry: Entry) -> tuple:
    sizes = tuple(tuple(s) for s in entry.sizes) if entry.op in SIZED_OPS else ()
    return entry.op, sizes


def _op_disagreement(group: Group) -> tuple[int, dict[int, tuple]] | None:
    seqs = sorted({s for st in group.standing.values() for s in st.entries})
    for seq in seqs:
        present = {r: _key(st.entries[seq]) for r, st in group.standing.items() if seq in st.entries}
        if len(present) >= 2 and len(set(present.values())) > 1:
            return seq, present
    return None


def _op_culprits(group: Group, seq: int, present: dict[int, tuple]) -> list[int]:
    counts = Counter(present.values())
    top = counts.most_common()
    if len(top) > 1 and top[0][1] > top[1][1]:
        return sorted(r for r, k in present.items() if k != top[0][0])
    breaks = {}
    for rank in present:
        entries = group.standing[rank].entries
        history = [_key(entries[s]) for s in sorted(entries) if s <= seq]
        breaks[rank] = _continues(history)
    breakers = sorted(r for r, b in breaks.items() if b is False)
    if breakers and any(b is True for b in breaks.values()):
        return breakers
    return sorted(present)


def _finding(group: Group) -> Finding | None:
    standing = group.standing
    if len(standing) < 1:
        return None
    candidates: list[tuple[int, int, str, list[int]]] = []  # (seq, order, kind, culprits)
    op = _op_disagreement(group)
    if op:
        seq, present = op
        kinds = {k[0] for k in present.values()}
        candidates.append((seq, 0, "op" if len(kinds) > 1 else "sizes", _op_culprits(group, seq, present)))
    known = {r: st for r, st in standing.items() if st.known}
    if not known:
        return None
    entered = {r: st.entered for r, st in known.items()}
    low, high = min(entered.values()), max(entered.values())
    missing: list[int] = []
    if low < high:
        missing = sorted(r for r, e in entered.items() if e == low)
        candidates.append((low + 1, 1, "missing", missing))
    unknown = sorted(r for r in standing if r not in known)
    if unknown:  # nothing pending in the group while the peers wait there: never entered what they wait in
        waits = min((st.completed + 1 for st in known.values() if st.entered > st.completed), default=None)
        if waits is not None:
            missing = sorted({*unknown, *(r for r in missing if entered[r] < waits)})
            candidates.append((waits, 1, "missing", missing))
    done = max(st.completed for st in known.values())
    stalled = sorted(r for r, st in known.items() if st.completed < done and st.entered > st.completed)
    if stalled:
        candidates.append((min(standing[r].completed for r in stalled) + 1, 2, "stalled", stalled))
    waits = [st.completed + 1 for st in known.values() if st.entered > st.completed]
    if not candidates and waits and group.no_dump and len(group.no_dump) <= len(group.ranks) / 2:
        # Every rank with a dump entered the collective they wait in, with the same op and sizes: the few
        # members that left no dump are the ones not seen there.
        candidates.append((min(waits), 3, "no_dump", list(group.no_dump)))
    if not candidates:
        return None
    seq, _, kind, culprits = min(candidates)
    ops = {}
    for rank, st in sorted(standing.items()):
        call = st.call(seq) if st.known and seq <= st.entered else None
        ops[str(rank)] = call.describe() if call else "(not entered)"
    created = [st.entries[seq].created_ns for st in standing.values() if seq in st.entries]
    never = [] if kind == "no_dump" else sorted(r for r, st in standing.items() if not st.known or st.entered < seq)
    mismatch = CollectiveMismatch(group=group.label, seq=seq, ops=ops, missing_ranks=never,
                                  culprit_ranks=culprits, kind=kind)
    return Finding(group, mismatch, min(created, default=0) or 0, stalled, later_missing=missing)


def _blocked_in(dump: RankDump, groups: dict[str, Group]) -> str | None:
    """The group of the unfinished collective a rank stands in: its newest entry, when not completed."""
    entries = [e for e in dump.entries if not e.is_p2p and e.seq > 0]
    if not entries:
        return None
    last = max(entries, key=lambda e: (e.record_id, e.created_ns))
    group = groups.get(last.group)
    standing = group.standing.get(dump.rank) if group else None
    if standing is None or last.seq <= standing.completed:
        return None
    return last.group


def _global_breakers(dumps: dict[int, RankDump], ranks: set[int]) -> list[int]:
    breakers = []
    for rank in sorted(ranks):
        entries = sorted((e for e in dumps[rank].entries if not e.is_p2p and e.seq > 0),
                         key=lambda e: (e.record_id, e.created_ns))
        if _continues([(e.group, *_key(e)) for e in entries]) is False:
            breakers.append(rank)
    return breakers


def _rank_places(groups: dict[str, Group]) -> list[RankCollectives]:
    out = []
    for group in groups.values():
        for rank, st in sorted(group.standing.items()):
            out.append(RankCollectives(rank=rank, group=group.label, last_completed=st.call(st.completed),
                                       last_entered=st.call(st.entered)))
    return out


def analyse(found: DumpSet) -> Report:
    dumps = dict(sorted(found.dumps.items()))  # by rank: the result never depends on a folder's or an archive's order
    groups = _groups(dumps)
    findings = [f for f in (_finding(g) for g in groups.values()) if f is not None]
    if any(f.mismatch.kind != "no_dump" for f in findings):
        # In a hung job every rank waits somewhere: a rank without a dump is named only when the dumps name no one.
        findings = [f for f in findings if f.mismatch.kind != "no_dump"]
    by_name = {f.group.name: f for f in findings}
    for finding in findings:
        culprits = finding.mismatch.culprit_ranks
        if finding.mismatch.kind != "missing" or not culprits:
            continue
        places = [_blocked_in(dumps[r], groups) for r in culprits]
        if all(p is not None and p != finding.group.name and p in by_name for p in places):
            finding.explained_by = ", ".join(sorted({by_name[p].group.label for p in places if p}))
    chosen = [f for f in findings if f.explained_by is None]
    culprits: set[int] = set()
    if findings and not chosen:  # a deadlock across groups
        suspects = {r for f in findings for r in f.mismatch.culprit_ranks}
        breakers = set(_global_breakers(dumps, suspects))
        chosen = [f for f in findings if breakers & set(f.mismatch.culprit_ranks)] or findings
        culprits = breakers or suspects
        for finding in chosen:
            finding.explained_by = None
    mismatch = None
    if chosen:
        first = min(chosen, key=lambda f: (f.created_ns or 2**63, KIND_ORDER[f.mismatch.kind], f.mismatch.seq,
                                           f.group.name))
        culprits = culprits or {r for f in chosen for r in f.mismatch.culprit_ranks}
        mismatch = first.mismatch.model_copy(update={"culprit_ranks": sorted(culprits)})
    waiting = sorted({r for g in groups.values() for r, st in g.standing.items() if st.entered > st.completed})
    places = _rank_places(groups)
    for place in places:
        place.node = found.hosts.get(place.rank)
    return Report(collectives=places, mismatch=mismatch, findings=findings, groups=groups,
                  dumps=dumps, notes=list(found.notes), waiting=waiting)
