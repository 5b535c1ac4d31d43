"""The analysis in words, one line per fact, each culprit joined with its call site.

`ranks disagree at collective #4 of the default group: rank 0 all_reduce(4) — rank 1 barrier; rank 1 is in
end_of_epoch at train.py:60`. A call site comes from the rank's stack when one was dumped (where it stands
now), else from the recorder's own frames of the rank's last collective (where it last called one).
"""

from __future__ import annotations

from pathlib import Path

from rootcause.tools.observe.collectives.analysis import Finding, Report
from rootcause.tools.observe.collectives.dumps import Entry

_LIBRARY = ("site-packages", "dist-packages", "/torch/", "/lib/python", "<frozen", "threading.py")
MAX_LINES = 8


def _rel(file: str, root: Path | None) -> str:
    """Relative to the root; a path from another machine (`/home/u/proj/train.py`) by its tail when the root
    holds that tail (`train.py`)."""
    if root is None:
        return file
    try:
        return Path(file).resolve().relative_to(Path(root).resolve()).as_posix()
    except (ValueError, OSError):
        pass
    parts = Path(file).parts
    for start in range(max(1, len(parts) - 4), len(parts)):
        tail = Path(*parts[start:])
        if (Path(root) / tail).is_file():
            return tail.as_posix()
    return file


def user_frame(entry: Entry, root: Path | None) -> str | None:
    """`end_of_epoch at train.py:60`: the innermost frame outside torch and the standard library."""
    for function, file, line in entry.frames:
        if not any(mark in file for mark in _LIBRARY):
            return f"{function} at {_rel(file, root)}:{line}"
    return None


def recorded_sites(report: Report, root: Path | None) -> dict[int, str]:
    """rank -> the call site of its newest recorded collective (from the dump's frames)."""
    sites = {}
    for rank, dump in report.dumps.items():
        for entry in sorted(dump.entries, key=lambda e: e.record_id, reverse=True):
            if (site := user_frame(entry, root)) is not None:
                sites[rank] = site
                break
    return sites


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:12]) + (f" (+{len(ranks) - 12})" if len(ranks) > 12 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def _who_does_what(ops: dict[str, str]) -> str:
    """`rank 0 all_reduce(4) — rank 1 barrier`, ranks doing the same grouped."""
    by_op: dict[str, list[int]] = {}
    for rank, op in ops.items():
        by_op.setdefault(op, []).append(int(rank))
    return " — ".join(f"{_ranks(r)} {op}" for op, r in by_op.items())


def finding_line(finding: Finding, sites: dict[int, str], stack_sites: dict[int, str]) -> str:
    m = finding.mismatch
    culprits = m.culprit_ranks
    if m.kind == "missing":
        present = {r: op for r, op in m.ops.items() if int(r) not in m.missing_ranks}
        head = (f"{_ranks(m.missing_ranks)} never entered collective #{m.seq} of {m.group} "
                f"({_who_does_what(present)})")
        first = finding.group.standing[m.missing_ranks[0]]
        last = first.call(first.entered) if first.known else None
        if last is not None and last.state == "completed":
            whose = "its" if len(m.missing_ranks) == 1 else "their"
            head += f"; {whose} last, #{last.seq} {last.describe()}, completed"
    elif m.kind == "stalled":
        done = sorted(r for r, st in finding.group.standing.items() if st.completed >= m.seq)
        whose = "its" if len(finding.stalled) == 1 else "their"
        head = (f"{_ranks(finding.stalled)} entered collective #{m.seq} of {m.group}, which {_ranks(done)} "
                f"completed, and never completed it ({whose} own work stopped: a stuck device or kernel)")
        if finding.later_missing:
            later = max(st.entered for st in finding.group.standing.values())
            head += f"; {_ranks(finding.later_missing)} never entered #{later}"
    elif m.kind == "no_dump":
        waiting = sorted(r for r, st in finding.group.standing.items() if st.known and st.entered >= m.seq)
        head = (f"{_ranks(waiting)} wait in collective #{m.seq} of {m.group}, all alike; "
                f"{_ranks(culprits)} left no dump: the one(s) not seen there")
    else:
        head = f"ranks disagree at collective #{m.seq} of {m.group}: {_who_does_what(m.ops)}"
    places = []
    for rank in culprits[:4]:
        if rank in stack_sites:
            places.append(f"rank {rank} is in {stack_sites[rank]}")
        elif rank in sites:
            places.append(f"rank {rank} last called a collective in {sites[rank]}")
    return "; ".join([head, *places])


def _cover(report: Report) -> tuple[list[Finding], set[int]]:
    """The reported group first, then each group that names a culprit not named yet (at most MAX_LINES - 4)."""
    chosen = sorted((f for f in report.findings if f.explained_by is None),
                    key=lambda f: f.mismatch.group != report.mismatch.group)
    shown: list[Finding] = []
    named: set[int] = set()
    for finding in chosen:
        new = set(finding.mismatch.culprit_ranks) - named
        if (new or not shown) and len(shown) < MAX_LINES - 4:
            shown.append(finding)
            named |= set(finding.mismatch.culprit_ranks)
    return shown, named


def lines(report: Report, root: Path | None = None, stack_sites: dict[int, str] | None = None) -> list[str]:
    """The facts, most telling first: the reported mismatch, the other unexplained groups, the explained ones
    (one line), the culprits, what was left out."""
    stack_sites = stack_sites or {}
    sites = recorded_sites(report, root)
    if report.mismatch is None:
        if not report.dumps:
            return ["no flight-recorder dump was read"]
        if report.waiting:
            verb = "waits" if len(report.waiting) == 1 else "wait"
            return [f"flight recorder: {_ranks(report.waiting)} {verb} in a collective every rank entered "
                    "with the same op and sizes (no rank behind in the dumps)"]
        return [f"flight recorder: {len(report.dumps)} ranks agree on every collective recorded"]
    shown, named = _cover(report)
    out = [finding_line(f, sites, stack_sites) for f in shown]
    explained = [f for f in report.findings if f.explained_by is not None]
    same = [f for f in report.findings if f.explained_by is None and f not in shown]
    if same:
        names = ", ".join(f.mismatch.group for f in same[:6]) + (" …" if len(same) > 6 else "")
        out.append(f"{len(same)} more group(s) show the same {_ranks(sorted(named))}: {names}")
    if explained:
        names = ", ".join(f.mismatch.group for f in explained[:6]) + (" …" if len(explained) > 6 else "")
        out.append(f"{len(explained)} more group(s) disagree only because ranks wait in the groups above: {names}")
    out.append(f"culprit {_ranks(report.mismatch.culprit_ranks)}")
    missing = sorted({r for g in report.groups.values() for r in g.no_dump})
    if missing:
        out.append(f"no dump from {_ranks(missing)} (listed as group members)")
    if report.notes:
        out.append("left out: " + "; ".join(report.notes[:3]) + (" …" if len(report.notes) > 3 else ""))
    return out
