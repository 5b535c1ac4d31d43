"""Flight-recorder dumps read safely: one file, a folder, or a .tar / .tar.gz / .zip archive of them.

Our own reader rather than torch's (`torch.distributed.flight_recorder.components.loader`): the server never
imports torch, a user's folder is read where torch may be absent, and torch's loader `pickle.load`s the file.
Pickles go through safe_pickle (plain containers only); JSON (`_dump_fr_trace_json`) is read as JSON.
Everything is bounded: bytes per dump and in all, dumps, entries per dump, archive members. Archive members are
read in memory, never extracted; a member whose name leaves the archive (`../x`, `/etc/x`) is refused.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from rootcause.tools.observe.collectives.safe_pickle import RefusedPickle, loads_plain

MAX_DUMP_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_DUMPS = 4096
MAX_ENTRIES = 20_000
"""Per dump: the newest ones are kept (the flight recorder's own default buffer holds 2,000)."""
MAX_MEMBERS = 20_000
MAX_FRAMES = 24
MAX_DEPTH = 6
HEAD_BYTES = 8192
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")
NOT_LOGS = (".py", ".md", ".yaml", ".yml", ".toml", ".json", ".cfg", ".ini", ".sh")
_READY = re.compile(r"^ready\.(\d+)\.(.+)\.(\d+)$")
_RANK = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json|bin|dump))?$", re.IGNORECASE)


class DumpError(ValueError):
    """A file or archive that cannot be read as dumps, said in our words."""

    def __init__(self, message: str, hint: str, *, whole: bool = False) -> None:
        super().__init__(message)
        self.hint = hint
        self.whole = whole
        """About the whole set (too many bytes or dumps), not one file: it stops the reading."""


@dataclass
class Entry:
    record_id: int
    group: str
    desc: str
    pg_id: int | None
    seq: int
    p2p_seq: int
    op: str
    sizes: list[list[int]]
    state: str
    retired: bool
    created_ns: int
    frames: list[tuple[str, str, int]]
    """(function, file, line), innermost first as the recorder writes them."""
    is_p2p: bool


@dataclass
class GroupConfig:
    name: str
    desc: str
    ranks: list[int]


@dataclass
class RankDump:
    rank: int
    source: str
    version: str
    groups: dict[str, GroupConfig]
    status: dict[str, tuple[int, int]]
    """pg_id -> (last enqueued, last completed collective)."""
    entries: list[Entry]
    form: str  # pickle | json


@dataclass
class DumpSet:
    dumps: dict[int, RankDump] = field(default_factory=dict)
    logs: list[tuple[str, bytes]] = field(default_factory=list)
    """Text files found beside the dumps (name, bytes), for the log's own diagnosis; a folder's file keeps its
    first bytes only (it is read from disk, streaming)."""
    log_sizes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What was left out and why (a refused member, a duplicate rank, a file that is no dump)."""
    hosts: dict[int, str] = field(default_factory=dict)
    """rank -> host, from the `ready.<rank>.<host>.<pid>` files rootcause's dump hook writes."""


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return default
    return default


def _sizes(value: Any) -> list[list[int]]:
    if not isinstance(value, list):
        return []
    return [[_int(n) for n in size[:8]] for size in value[:16] if isinstance(size, list)]


def _frames(value: Any) -> list[tuple[str, str, int]]:
    if not isinstance(value, list):
        return []
    return [(str(f.get("name", "?"))[:200], str(f.get("filename", "?"))[:500], _int(f.get("line")))
            for f in value[:MAX_FRAMES] if isinstance(f, dict)]


def _ranks(value: Any) -> list[int]:
    """pg_config's ranks: a string '[0, 1]' (never eval'd) or a list."""
    if isinstance(value, str):
        return [int(n) for n in re.findall(r"\d+", value)[:100_000]]
    if isinstance(value, list):
        return [_int(n) for n in value[:100_000]]
    return []


def _shared_frames(value: Any, seen: dict[int, list[tuple[str, str, int]]]) -> list[tuple[str, str, int]]:
    """A pickle shares one stack among the entries that have it: read each once (64 ranks x 2,000 entries:
    4.5 -> 1.5 s CPU)."""
    key = id(value)
    if key not in seen:
        seen[key] = _frames(value)
    return seen[key]


def _entry(raw: dict[str, Any], seen: dict[int, list[tuple[str, str, int]]]) -> Entry | None:
    group = raw.get("process_group")
    if not isinstance(group, (list, tuple)) or not group:
        return None
    name = str(raw.get("profiling_name") or "")
    op = name.split(":", 1)[-1] or "?"
    return Entry(record_id=_int(raw.get("record_id"), -1), group=str(group[0]),
                 desc=str(group[1]) if len(group) > 1 else "", pg_id=_int(raw.get("pg_id"), -1),
                 seq=_int(raw.get("collective_seq_id", raw.get("seq_id"))),  # seq_id: older versions of the format
                 p2p_seq=_int(raw.get("p2p_seq_id")), op=op[:100],
                 sizes=_sizes(raw.get("input_sizes")), state=str(raw.get("state") or ""),
                 retired=raw.get("retired") is True, created_ns=_int(raw.get("time_created_ns")),
                 frames=_shared_frames(raw.get("frames"), seen), is_p2p=raw.get("is_p2p") is True or " " in op
                 or op.startswith(("send", "recv")))


def parse_dump(data: Any, rank: int, source: str, form: str) -> RankDump:
    """A dump's dict (as torch writes it: version, pg_config, pg_status, entries) in our shape."""
    if not isinstance(data, dict) or not isinstance(data.get("entries", []), list) or not (
            "entries" in data or "pg_status" in data):
        raise DumpError(f"{source} is not a flight-recorder dump (no `entries` / `pg_status`).",
                        "give the files torch writes: _dump_fr_trace(), or TORCH_NCCL_DEBUG_INFO_TEMP_FILE's")
    groups: dict[str, GroupConfig] = {}
    config = data.get("pg_config")
    if isinstance(config, dict):
        for key, value in list(config.items())[:10_000]:
            if isinstance(value, dict):
                name = str(value.get("name") or key)
                groups[name] = GroupConfig(name, str(value.get("desc") or ""), _ranks(value.get("ranks")))
    status: dict[str, tuple[int, int]] = {}
    pg_status = data.get("pg_status")
    if isinstance(pg_status, dict):
        for key, value in list(pg_status.items())[:10_000]:
            if isinstance(value, dict):
                status[str(key)] = (_int(value.get("last_enqueued_collective"), -1),
                                    _int(value.get("last_completed_collective"), -1))
    raw = data.get("entries") or []
    seen: dict[int, list[tuple[str, str, int]]] = {}  # ids stay valid: `data` holds every frames list
    entries = [e for e in (_entry(r, seen) for r in raw[-MAX_ENTRIES:] if isinstance(r, dict)) if e is not None]
    return RankDump(rank=rank, source=source, version=str(data.get("version", "")), groups=groups,
                    status=status, entries=entries, form=form)


def rank_of(name: str) -> int | None:
    """The rank a dump's file name ends with: `rank3.pkl`, `nccl_trace_rank_3`, `_dump_12`."""
    match = _RANK.search(PurePosixPath(name).name)
    return int(match.group(1)) if match else None


def decode(data: bytes, source: str) -> tuple[Any, str] | None:
    """(the dump's object, 'pickle' | 'json'), or None for bytes that look like neither (a log, a script)."""
    if data[:1] == b"\x80":
        try:
            return loads_plain(data), "pickle"
        except RefusedPickle as exc:
            raise DumpError(f"{source} was not loaded: {exc}.",
                            "a flight-recorder dump is plain data, this pickle would run code when loaded "
                            "(a checkpoint goes to inspect_checkpoint)") from None
        except ValueError as exc:
            raise DumpError(f"{source} is not a readable flight-recorder dump: {exc}.",
                            "check the file was copied whole (a dump cut short cannot be read)") from None
    if data.lstrip()[:1] == b"{":
        try:
            return json.loads(data), "json"
        except (ValueError, RecursionError):
            return None
    return None


def _is_text(data: bytes) -> bool:
    sample = data[:4096]
    return b"\x00" not in sample and sample.decode("utf-8", "replace").count("\ufffd") < 16


class _Reader:
    def __init__(self) -> None:
        self.found = DumpSet()
        self.total = 0
        self.refused: list[DumpError] = []

    def refuse(self, exc: DumpError) -> None:
        """One file of several that cannot be read (a checkpoint's pickle beside the dumps): left out, said."""
        if exc.whole:
            raise exc
        self.refused.append(exc)
        self.found.notes.append(str(exc).rstrip("."))

    def take(self, name: str, data: bytes, size: int | None = None) -> None:
        self.total += len(data)
        if self.total > MAX_TOTAL_BYTES:
            raise DumpError(f"the dumps hold more than {MAX_TOTAL_BYTES // 2**20} MB.",
                            "give a folder with one dump per rank of the job that hung", whole=True)
        ready = _READY.match(PurePosixPath(name).name)
        if ready:
            self.found.hosts[int(ready.group(1))] = ready.group(2)[:200]
            return
        decoded = decode(data, name)
        if decoded is None:
            if data.strip() and _is_text(data) and not name.lower().endswith(NOT_LOGS):
                self.found.logs.append((name, data))
                self.found.log_sizes[name] = len(data) if size is None else size
            return
        obj, form = decoded
        if not (isinstance(obj, dict) and ("entries" in obj or "pg_status" in obj)):
            self.found.notes.append(f"{name}: {form} but not a flight-recorder dump; left out")
            return
        rank = obj.get("rank") if isinstance(obj.get("rank"), int) else rank_of(name)
        if rank is None:
            self.found.notes.append(f"{name}: a dump whose name ends in no rank number; left out")
            return
        if rank in self.found.dumps:
            kept = self.found.dumps[rank]
            if kept.form == "json" and form == "pickle":  # the pickle keeps the stack frames
                self.found.notes.append(f"{kept.source}: rank {rank} again; the pickle {name} is read")
            else:
                self.found.notes.append(f"{name}: rank {rank} again; {kept.source} is read")
                return
        if len(self.found.dumps) >= MAX_DUMPS:
            raise DumpError(f"more than {MAX_DUMPS} dumps.", "give the dumps of one job", whole=True)
        self.found.dumps[rank] = parse_dump(obj, rank, name, form)


def _read_bounded(fh: io.BufferedIOBase | Any, name: str) -> bytes:
    data = fh.read(MAX_DUMP_BYTES + 1)
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(f"{name} is over {MAX_DUMP_BYTES // 2**20} MB, more than a flight-recorder dump holds.",
                        "give the per-rank dump files (TORCH_FR_BUFFER_SIZE entries each)")
    return data


def _safe_member(name: str) -> bool:
    path = PurePosixPath(name.replace("\\", "/"))
    return not path.is_absolute() and ".." not in path.parts and not re.match(r"^[A-Za-z]:", name)


Member = tuple[str, int, bool, Callable[[], IO[bytes] | None]]
"""An archive member: its name, declared size, whether it is a file, and how to open it."""


def _tar_members(path: Path, reader: _Reader) -> Iterator[tuple[str, bytes]]:
    try:
        archive = tarfile.open(path, "r:*")  # noqa: SIM115 (closed by the with below)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DumpError(f"{path.name} is not a readable tar archive: {exc}.",
                        "check the archive was copied whole") from None
    with archive:
        yield from _members(path, reader, ((m.name, m.size, m.isfile(), lambda m=m: archive.extractfile(m))
                                           for m in archive))


def _zip_members(path: Path, reader: _Reader) -> Iterator[tuple[str, bytes]]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DumpError(f"{path.name} is not a readable zip archive: {exc}.",
                        "check the archive was copied whole") from None
    with archive:
        yield from _members(path, reader, ((i.filename, i.file_size, not i.is_dir(), lambda i=i: archive.open(i))
                                           for i in archive.infolist()))


def _members(path: Path, reader: _Reader, members: Iterable[Member]) -> Iterator[tuple[str, bytes]]:
    """The files of an archive (tar or zip), each read capped: a member's declared size is not trusted."""
    for count, (name, size, is_file, open_member) in enumerate(members):
        if count >= MAX_MEMBERS:
            reader.found.notes.append(f"{path.name}: more than {MAX_MEMBERS} members; the rest left out")
            break
        if not is_file:
            continue
        if not _safe_member(name):
            reader.found.notes.append(f"{name}: refused, a path outside the archive")
            continue
        if size > MAX_DUMP_BYTES:
            reader.refuse(DumpError(f"{name} in {path.name} is over {MAX_DUMP_BYTES // 2**20} MB.",
                                    "give the per-rank dump files"))
            continue
        fh = open_member()
        if fh is None:
            continue
        with fh:
            try:
                data = _read_bounded(fh, name)
            except DumpError as exc:
                reader.refuse(exc)
                continue
        yield name, data


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _folder_files(folder: Path) -> Iterator[Path]:
    base = len(folder.parts)
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and len(here.parts) - base < MAX_DEPTH)
        for name in sorted(filenames):
            path = here / name
            if path.is_file() and not path.is_symlink():
                yield path


def looks_like_dump(head: bytes) -> bool:
    """A pickle (protocol 2+), or JSON naming the recorder's keys in its first bytes."""
    return head[:1] == b"\x80" or (head.lstrip()[:1] == b"{" and any(
        key in head for key in (b'"entries"', b'"pg_status"', b'"pg_config"')))


def read_dumps(path: Path) -> DumpSet:
    """Every dump under `path` (a dump file, a folder, or an archive), the text files beside them, and notes."""
    reader = _Reader()
    path = Path(path)
    if path.is_dir():
        for count, file in enumerate(_folder_files(path)):
            if count >= MAX_MEMBERS:
                reader.found.notes.append(f"more than {MAX_MEMBERS} files; the rest left out")
                break
            rel = file.relative_to(path).as_posix()
            try:
                if is_archive(file):
                    _read_archive(file, reader, prefix=rel + ":")
                    continue
                with open(file, "rb") as fh:
                    head = fh.read(HEAD_BYTES)
                    if looks_like_dump(head):
                        fh.seek(0)
                        reader.take(rel, _read_bounded(fh, rel))
                    else:  # a log, a script: only its first bytes are read here
                        reader.take(rel, head, size=file.stat().st_size)
            except DumpError as exc:
                reader.refuse(exc)
    elif is_archive(path):
        _read_archive(path, reader)
    else:
        with open(path, "rb") as fh:
            reader.take(path.name, _read_bounded(fh, path.name))
    if reader.refused and not reader.found.dumps:
        raise reader.refused[0]  # nothing else to read: the refusal is the answer
    return reader.found


def _read_archive(path: Path, reader: _Reader, prefix: str = "") -> None:
    members = _zip_members(path, reader) if path.name.lower().endswith(".zip") else _tar_members(path, reader)
    for name, data in members:
        try:
            reader.take(prefix + name, data)
        except DumpError as exc:
            reader.refuse(exc)
