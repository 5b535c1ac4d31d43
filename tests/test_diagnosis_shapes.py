"""One failure, one diagnosis, however the log was pasted (metamorphic tests on the corpus).

Each transform re-shapes a log as a real paste or collector does (a launcher's rank tag on
every line, a timestamp, ANSI colours, Markdown, HTML escaping, a container runtime's JSON
lines, IPython's traceback format, a terminal's hard wrap, ...). For every corpus log the
transform applies to, the re-shaped log must get the category and signature of the original.
Transforms that legitimately change a diagnosis (putting every line on one rank, dropping
lines) are not here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from rootcause.tools.observe.diagnosis import diagnose_text
from rootcause.tools.observe.logs.lines import split_lines

LOGS = Path(__file__).parent / "fixtures" / "logs"
CORPUS = sorted(LOGS.glob("*.log"))
Transform = Callable[[str], str | None]
"""A log's text re-shaped, or None when the shape does not apply to that log."""


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _per_line(fn: Callable[[int, str], str]) -> Transform:
    def apply(text: str) -> str:
        body = text[:-1] if text.endswith("\n") else text
        return "\n".join(fn(i, line) for i, line in enumerate(_lines(body))) + "\n"
    return apply


_NAMED_RANK = re.compile(r"\[(?:PG \d+ )?Rank (\d+)\]")


@cache
def _single_stream(text: str) -> bool:
    """No line of the log carries a rank or worker tag, and its messages name one rank at most (c10d's `[Rank 5]`):
    a launcher tag can then be put on every line."""
    return (all(ln.rank is None and ln.worker is None for ln in split_lines(text))
            and len(set(_NAMED_RANK.findall(text))) <= 1)


_PYTEST_SESSION = re.compile(r"^={3,} (?:test session starts|FAILURES|ERRORS|short test summary info) ={3,}$",
                             re.MULTILINE)


_UNITTEST_SECTION = re.compile(r"^(?:FAIL|ERROR): \w+ \(", re.MULTILINE)


def _launcher(tag: Callable[[int], str]) -> Transform:
    def apply(text: str) -> str | None:
        if not _single_stream(text):
            return None  # tagging every line with one rank would merge the log's streams: a different log
        return _per_line(lambda i, line: f"{tag(i)}{line}")(text)
    return apply


def _stamp(i: int) -> tuple[int, int, int]:
    seconds = 7 * 3600 + 21 * 60 + 10 + i // 3
    return seconds // 3600, seconds // 60 % 60, seconds % 60


def _iso(i: int, line: str) -> str:
    h, m, s = _stamp(i)
    return f"2024-03-04T{h:02}:{m:02}:{s:02}.{(i * 37) % 1000:03}Z {line}"


def _syslog(i: int, line: str) -> str:
    h, m, s = _stamp(i)
    return f"Mar 04 {h:02}:{m:02}:{s:02} node3 python[2231]: {line}"


def _glog(i: int, line: str) -> str:
    h, m, s = _stamp(i)
    return f"I0304 {h:02}:{m:02}:{s:02}.{(i * 7919) % 1000000:06} 2231 train.py:88] {line}"


def _github_actions(i: int, line: str) -> str:
    h, m, s = _stamp(i)
    return f"2026-05-27T{h:02}:{m:02}:{s:02}.{(i * 9267298) % 10000000:07}Z {line}".rstrip()


_TB = re.compile(r"^\s*Traceback \(most recent call last\):")
_CHAIN = re.compile(r"^\s*(During handling of the above exception|The above exception was the direct cause)")


def _python_logging(text: str) -> str:
    """A logging prefix on the first line of each record; a traceback (up to the blank line after it) is one record."""
    out: list[str] = []
    in_record = False
    lines = _lines(text.rstrip("\n"))
    for i, line in enumerate(lines):
        if not line.strip():
            following = next((x for x in lines[i + 1:] if x.strip()), "")
            if in_record and not (_CHAIN.match(following) or _TB.match(following)):
                in_record = False
            out.append(line)
            continue
        if _TB.match(line) and not in_record:
            out.append(f"2024-03-04 07:21:{10 + i % 50:02},{i * 7 % 1000:03} - root - ERROR - {line}")
            in_record = True
        elif in_record:
            out.append(line)
        else:
            out.append(f"2024-03-04 07:21:{10 + i % 50:02},{i * 7 % 1000:03} - root - INFO - {line}")
    return "\n".join(out) + "\n"


_EXC_NAME = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))\b")


def _ansi(text: str) -> str:
    coloured = _EXC_NAME.sub("\x1b[1;31m\\1\x1b[0m", text)
    return _per_line(lambda i, line: f"\x1b[2m\x1b[36m{line}\x1b[0m" if line else line)(coloured)


def _tabs(line: str) -> str:
    indent = len(line) - len(line.lstrip(" "))
    return "\t" * (indent // 4) + line[indent - indent % 4:] if indent >= 4 else line


def _details(text: str) -> str:
    return f"<details>\n<summary>Full log</summary>\n\n```\n{text.rstrip()}\n```\n\n</details>\n"


_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}


def _html(text: str) -> str | None:
    if not any(c in text for c in "<>\"'"):
        return None
    return "".join(_HTML.get(c, c) for c in text)


def _json_lines(text: str) -> str:
    out = []
    for i, line in enumerate(_lines(text.rstrip("\n"))):
        h, m, s = _stamp(i)
        out.append(json.dumps({"log": line + "\n", "stream": "stderr",
                               "time": f"2024-03-04T{h:02}:{m:02}:{s:02}.{i:09}Z"}, ensure_ascii=False))
    return "\n".join(out) + "\n"


_FRAME_HEAD = re.compile(r'(?:^|\s)File "')
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_CODE = re.compile(r"^    (?P<code>\S.*)$")
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
_EXC_LINE = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit))(?::|$)")


def _arrow(line: str) -> str:
    return "-" * max(0, 5 - len(line)) + "> " + line


def _ipython(text: str, version: int = 8) -> str | None:
    """Every standard traceback of an unprefixed log re-printed as IPython prints it in a notebook (8, or 7 before)."""
    if _PYTEST_SESSION.search(text) or _UNITTEST_SECTION.search(text):
        return None  # a test runner prints its tracebacks itself, in the standard format, also inside a notebook
    lines = _lines(text)
    out: list[str] = []
    converted = False
    i = 0
    while i < len(lines):
        if lines[i] != "Traceback (most recent call last):":
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        frames: list[tuple[str, str, str, str]] = []
        while j < len(lines):
            m = _FRAME.match(lines[j])
            if not m:
                break
            code = ""
            j += 1
            if j < len(lines) and _CODE.match(lines[j]):
                code = lines[j].strip()
                j += 1
            while j < len(lines) and _CARETS.match(lines[j]):
                j += 1
            frames.append((m["file"], m["line"], m["func"], code))
        exc = _EXC_LINE.match(lines[j]) if j < len(lines) and frames else None
        if not exc:
            out.append(lines[i])
            i += 1
            continue
        converted = True
        out += ["-" * 75, f"{exc['type']:<42}Traceback (most recent call last)"]
        for n, (file, line, func, code) in enumerate(frames):
            if version < 8:
                where = "<ipython-input-5-3f1b2c4d5e6f>" if n == 0 and func == "<module>" else file
                out += [f"{where} in {func}(*args, **kwargs)", f"{_arrow(line)} {code}".rstrip()]
            elif n == 0 and func == "<module>":
                out.append(f"Cell In[5], line {line}")
                out += ["      1 import torch", f"{_arrow(line)} {code}"]
            else:
                out.append(f"File {file}:{line}, in {func}(*args, **kwargs)")
                out.append(f"{_arrow(line)} {code}".rstrip())
            out.append("")
        i = j
    return "\n".join(out) if converted else None


def _hard_wrap(width: int) -> Transform:
    """A terminal's wrap at a fixed width. Only where it cuts lines twice or more: a single cut between two letters
    is as likely a line broken on a space the paste lost (`... cuda:0 and` / `cpu! (when ...`), which the reader
    must keep apart, as a word cut in two."""
    def apply(text: str) -> str | None:
        lines = _lines(text)
        if sum((len(line) - 1) // width for line in lines if line) < 2:
            return None
        return "\n".join(part for line in lines
                         for part in ([line[k:k + width] for k in range(0, len(line), width)] or [""]))
    return apply


_BAR = "\r  0%|          | 0/300 [00:00<?, ?it/s]\r 45%|████▌     | 135/300 [00:41<00:50,  3.29it/s]"


def _tqdm(text: str) -> str | None:
    lines = _lines(text)
    at = next((i for i, line in enumerate(lines) if _TB.match(line)), None)
    if at is None:
        return None
    lines[at] = _BAR + lines[at]
    return "\n".join(lines)


def _newest_first(text: str) -> str | None:
    """Lines in reverse order, as log viewers that list the newest line first (Datadog, Kibana) copy them.

    Only for logs with a traceback whose header has its frames on the lines below: upside down, it tells the order
    (a log of bare lines, or a traceback on one line, does not)."""
    lines = _lines(text)
    if not any(line.rstrip().endswith("Traceback (most recent call last):") and
               any(_FRAME_HEAD.search(x) for x in lines[i + 1:i + 4]) for i, line in enumerate(lines)):
        return None
    return "\n".join(reversed(_lines(text.rstrip("\n")))) + "\n"


def _double_spaced(text: str) -> str | None:
    lines = _lines(text.rstrip("\n"))
    if sum(1 for line in lines if line.strip()) < 3:
        return None  # two lines with a blank between: as likely two paragraphs as a double-spaced paste
    return "\n\n".join(lines) + "\n"


def _then(*transforms: Transform) -> Transform:
    """Shapes stacked in the order they happen (a terminal's wrap, then a Markdown quote around the paste)."""
    def apply(text: str) -> str | None:
        for transform in transforms:
            shaped = transform(text)
            if shaped is None:
                return None
            text = shaped
        return text
    return apply


TRANSFORMS: dict[str, Transform] = {
    "rank-tag": _launcher(lambda i: "[rank0]:"),
    "default-tag": _launcher(lambda i: "[default0]:"),
    "srun-label": _launcher(lambda i: "0: "),
    "ray-worker": _launcher(lambda i: "(RayTrainWorker pid=123, ip=10.0.0.2) "),
    "compose-service": _launcher(lambda i: "trainer-1  | "),
    "kubectl-prefix": _launcher(lambda i: "[pod/trainer-0/trainer] "),
    "mpirun-tag": _launcher(lambda i: "[1,0]<stderr>:"),
    "pdsh-host": _launcher(lambda i: "worker-3: "),
    "iso-stamp": _per_line(_iso),
    "syslog-stamp": _per_line(_syslog),
    "journalctl-iso": _per_line(lambda i, line: f"2024-03-04T07:21:{10 + i % 50:02}+0000 node3 python[2231]: {line}"),
    "glog-prefix": _per_line(_glog),
    "github-actions": _per_line(_github_actions),
    "cri-log": _per_line(lambda i, line: f"2024-03-04T07:21:{10 + i % 50:02}.{i:09}Z stderr F {line}"),
    "python-logging": _python_logging,
    "ansi-colours": _ansi,
    "crlf": lambda text: text.replace("\n", "\r\n"),
    "trailing-space": _per_line(lambda i, line: line + " " * (1 + i % 3)),
    "tab-indent": _per_line(lambda i, line: _tabs(line)),
    "markdown-fence": lambda text: f"```text\n{text.rstrip()}\n```\n",
    "markdown-quote": _per_line(lambda i, line: f"> {line}" if line else ">"),
    "indented-block": _per_line(lambda i, line: f"    {line}" if line.strip() else ""),
    "details-block": _details,
    "html-escaped": _html,
    "docker-json": _json_lines,
    "structured-json": _per_line(lambda i, line: json.dumps(
        {"severity": "ERROR", "message": line, "timestamp": f"2024-03-04T07:21:{10 + i % 50:02}Z"})),
    "nbsp-indent": _per_line(lambda i, line: "\u00a0" * (len(line) - len(line.lstrip(" "))) + line.lstrip(" ")),
    "byte-order-mark": lambda text: "\ufeff" + text,
    "ipython": _ipython,
    "ipython7": lambda text: _ipython(text, 7),
    "wrap-80": _hard_wrap(80),
    "wrap-100": _hard_wrap(100),
    "wrap-120": _hard_wrap(120),
    "tqdm-glued": _tqdm,
    "double-spaced": _double_spaced,
    "newest-first": _newest_first,
}
TRANSFORMS |= {
    "wrap-100+quote": _then(TRANSFORMS["wrap-100"], TRANSFORMS["markdown-quote"]),
    "double-spaced+quote": _then(_double_spaced, TRANSFORMS["markdown-quote"]),
    "rank-tag+iso-stamp": _then(TRANSFORMS["rank-tag"], TRANSFORMS["iso-stamp"]),
    "ipython+ansi": _then(_ipython, _ansi),
    "wrap-80+details": _then(TRANSFORMS["wrap-80"], _details),
}


@cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="module")
def empty_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("root")


_ORIGINAL: dict[str, tuple[str, str, str]] = {}
# Shapes that rewrite the frame lines themselves: a notebook names the script's frame as a cell (`Cell In[5]`), a
# hard wrap cuts paths and names, a reversed paste reorders chained tracebacks. The group (what the bug is) must
# survive them; the call site may change on a few logs (CALL_SITE_CHANGES, of the logs the shape applies to). Other
# shapes may move it on 1% (interleaved ranks without prefixes are told apart by structure, a shape can help).
FRAME_RESHAPING = frozenset({"ipython", "ipython7", "ipython+ansi", "wrap-80", "wrap-80+details", "wrap-100",
                             "wrap-100+quote", "newest-first"})
CALL_SITE_CHANGES = {"ipython": 0.7, "ipython7": 0.7, "ipython+ansi": 0.7}


def _original(path: Path, root: Path) -> tuple[str, str, str]:
    if path.name not in _ORIGINAL:
        d = diagnose_text(_text(path), root)
        _ORIGINAL[path.name] = (d.category, d.group, d.signature)
    return _ORIGINAL[path.name]


def shape_changes(name: str, root: Path) -> tuple[int, list[str], list[str]]:
    """(logs the transform applies to, the logs whose category or group it changes, those whose call site it
    changes), each with both diagnoses."""
    transform = TRANSFORMS[name]
    applied = 0
    changed: list[str] = []
    moved: list[str] = []
    for path in CORPUS:
        shaped = transform(_text(path))
        if shaped is None:
            continue
        applied += 1
        d = diagnose_text(shaped, root)
        category, group, signature = _original(path, root)
        if (d.category, d.group) != (category, group):
            changed.append(f"{path.name}: {d.category} {d.signature!r} (unshaped: {category} {signature!r})")
        elif d.signature != signature:
            moved.append(f"{path.name}: {d.signature!r} (unshaped: {signature!r})")
    return applied, changed, moved


def test_every_transform_applies_to_many_corpus_logs() -> None:
    assert len(CORPUS) >= 200
    for name, transform in TRANSFORMS.items():
        applied = sum(transform(_text(path)) is not None for path in CORPUS)
        assert applied >= 20, (name, applied)


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_a_reshaped_log_keeps_its_diagnosis(name: str, empty_root: Path) -> None:
    applied, changed, moved = shape_changes(name, empty_root)
    assert not changed, f"{name}: {len(changed)}/{applied} logs change diagnosis:\n" + "\n".join(changed)
    allowed = CALL_SITE_CHANGES.get(name, 0.05) if name in FRAME_RESHAPING else 0.01
    assert len(moved) <= allowed * applied, f"{name}: {len(moved)}/{applied} change call site:\n" + "\n".join(moved)
