"""Paste repair: what a paste or a collector did to a whole log undone, before its lines are read.

HTML entities, JSON log records, an indented, quoted or double-spaced paste, a viewer's line-number gutter,
per-write stamps, newest-first order, a terminal's hard wrap, frame lines broken in two.
tests/test_diagnosis_shapes.py checks that every such shape keeps a corpus log's diagnosis.
"""

from __future__ import annotations

import json
import re
from itertools import pairwise

from rootcause.tools.observe.logs.prefixes import ISO, clean, peel
from rootcause.tools.observe.logs.traceback_lines import FRAME_START, TRACEBACK, type_pattern

_RULE_END = re.compile(r"([^\w\s^~])\1\1$")  # a line ending in a rule (====, ____) is filled to the width on purpose


def _head(line: str) -> str:
    """A line's first word with its punctuation (`Epoch:`), how a record format starts each line."""
    return line.split(None, 1)[0] if line.strip() else ""


# What starts a line of its own: a prefix, pytest's `E   ` marker, a traceback's structure, an exception line.
# (A frame's `File "` unindented is a flattened traceback's wrap.)
_LINE_START = re.compile(rf'[A-Z]\s{{3,}}|Traceback \(|\s+File "|{type_pattern()}:|\S+\.py:\d+:')
# What goes on with a token the line before cut (`...c10d_logger` / `.py", line 83`), never starts a line.
_GOES_ON = re.compile(r"[.,:;)\]}](?!\.\.)|_[^\W_]|['\"](?=[\s,.:;)\]}]|$)|/(?=\w)")
_TOKEN = re.compile(r"[\w./\-]")
_OPENS = "=([{/"  # a line that ends so expects more on the same line


def _starts_line(text: str) -> bool:
    return bool(_LINE_START.match(text)) or bool(peel(text, None)[1].kinds)


def _unwrap_width(raw: list[str]) -> list[str]:
    """Lines hard-wrapped at a fixed width (by a terminal or a mail client) joined again.

    The wrap width is the longest line's length. A line of that length breaks when its next line goes
    on with the same token (no space on either side) or the wrap fell on a space (one space on one
    side). A break is clear evidence when it cuts a word in two (letters or digits on both sides), when
    its next line starts with a single space (no line of a log does), or when the line ends in a space
    and the next cannot start a line of its own (below). The log counts as wrapped when
    most lines of that length break and there are 3 clear breaks, or 2 breaks of which one is clear,
    or one clear break that is not between two letters and whose next line cannot start a line of its
    own (it starts in lower case, with a digit, a space or punctuation that goes on with a token)."""
    lengths = [len(r) for r in raw if r.strip()]
    if len(lengths) < 2:
        return raw
    width = max(lengths)
    if width < 60:
        return raw

    # Lines of one fixed-width record format (`Epoch: 6: Step: 555/1511, loss=0.531204, ...`) are as long as
    # each other without being wrapped: a line that starts as most lines start begins a record.
    heads: dict[str, int] = {}
    for r in raw:
        if r.strip():
            heads[_head(r)] = heads.get(_head(r), 0) + 1
    record_head: str | None = max(heads, key=heads.__getitem__)
    if heads[record_head] < 0.5 * len(lengths):
        record_head = None

    def breaks(i: int) -> bool:
        if len(raw[i]) != width or i + 1 >= len(raw) or not raw[i + 1] or _head(raw[i + 1]) == record_head:
            return False
        if not raw[i + 1].strip():
            return raw[i][-1].isspace()  # a line padded with spaces (pytest's reprs) wrapped in its padding
        if _starts_line(raw[i + 1]):
            return False
        end_space, next_space = raw[i][-1].isspace(), raw[i + 1][0].isspace()
        if not end_space and not next_space:
            return True
        # Wrapped on a space: the space ends the line or starts the next, once (an indented line is not that).
        return (end_space and not raw[i][-2:-1].isspace() and not next_space) or \
            (next_space and not end_space and not raw[i + 1][1:2].isspace())

    def continues(i: int) -> bool:
        """The next line cannot start a line: it goes on with a word in lower case, a number or after a space."""
        nxt = raw[i + 1]
        head = _head(nxt)
        return (nxt[0].islower() or nxt[0].isdigit() or nxt[0] == " ") and (not head.endswith(":") or
                                                                              nxt.strip() == head)

    def clear(i: int) -> bool:
        end, nxt = raw[i][-1], raw[i + 1]
        if not nxt.strip():
            return False
        # A token cut in two (`...distributed_` / `c10d.py`), not a sentence's end before the next one.
        token_cut = bool(_TOKEN.match(end) and _TOKEN.match(nxt[0])) and not (end == "." and nxt[0].isupper())
        return token_cut or (not end.isspace() and (nxt[0] == " " or _GOES_ON.match(nxt))) \
            or (end in _OPENS and not nxt[0].isspace()) or (end == " " and not padded and continues(i))

    # Where most lines end in whitespace (an editor's padding), a space at a line's end says nothing.
    padded = sum(1 for r in raw if r.strip() and r[-1].isspace()) > 0.5 * len(lengths)
    at_width = [i for i, r in enumerate(raw) if len(r) == width and not _RULE_END.search(r)]
    broken = [i for i in at_width if breaks(i)]
    evident = [i for i in broken if clear(i)]
    # One break alone: not between two words' letters (`...cuda:0 and` / `cpu! (when`), which is as often a line
    # broken on a space the paste lost (the message then goes on after a space) as a word cut in two.
    single = len(broken) == 1 and evident and not (raw[evident[0]][-1].isalnum() and raw[evident[0] + 1][0].isalnum()) \
        and (continues(evident[0]) or _GOES_ON.match(raw[evident[0] + 1]) or raw[evident[0]][-1] in _OPENS)
    if len(broken) < 0.5 * len(at_width) or not (len(evident) >= 3 or (len(broken) >= 2 and evident) or single):
        return raw
    joined: list[str] = []
    carry = ""
    for i, r in enumerate(raw):
        carry += r
        if not breaks(i):
            joined.append(carry)
            carry = ""
    if carry:
        joined.append(carry)
    return joined


_FRAME_HEAD = re.compile(r'^\s*File "')


def _rejoin_frames(raw: list[str]) -> list[str]:
    """A frame line broken inside its path or before its line number is joined with its continuation."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        r = raw[i]
        if _FRAME_HEAD.match(r) and not FRAME_START.match(r) and i + 1 < len(raw):
            for glue in ("", " "):
                if FRAME_START.match(r + glue + raw[i + 1].lstrip()):
                    out.append(r + glue + raw[i + 1].lstrip())
                    i += 2
                    break
            else:
                out.append(r)
                i += 1
            continue
        out.append(r)
        i += 1
    return out


def _dedent(raw: list[str]) -> list[str]:
    """A log pasted as an indented block (every non-blank line indented) without that common indent."""
    indent: int | None = None
    for r in raw:
        if r.strip():
            n = len(r) - len(r.lstrip(" "))
            indent = n if indent is None else min(indent, n)
            if not indent:
                return raw
    if not indent:
        return raw
    return [r[indent:] if r.strip() else "" for r in raw]


def _unquote(raw: list[str]) -> list[str]:
    """A log pasted as a Markdown quote (every non-blank line starting with `>`, nested or not) without the quote:
    a paste-level decoration, taken off before a wrap or a double spacing inside the quote is undone."""
    for _ in range(3):
        if not all(r.startswith(">") for r in raw if r.strip()):
            return raw
        texts = [r for r in raw if r.strip()]
        if len(texts) < 2 or all(r.startswith(">>>") for r in texts):
            return raw
        raw = [r[2:] if r.startswith("> ") else r[1:] for r in raw]
    return raw


# A logger that stamps every write() rather than every line (ComfyUI's stdout hook, some notebook relays)
# leaves its stamp inside lines where a print() was cut into several writes: `File <stamp>"x.py"<stamp>, line`.
_CHUNK_STAMP = re.compile(rf"\[{ISO}\]\s?|{ISO}\s+-\s")


def _unchunk(raw: list[str]) -> list[str]:
    """Per-write stamps removed from inside lines when most lines start with one (the writes joined again)."""
    stamped = [r for r in raw if r.strip()]
    if len(stamped) < 3 or sum(bool(_CHUNK_STAMP.match(r)) for r in stamped) < 0.5 * len(stamped):
        return raw
    out: list[str] = []
    for r in raw:
        head = _CHUNK_STAMP.match(r)
        start = head.end() if head else 0
        out.append(r[:start] + _CHUNK_STAMP.sub("", r[start:]) if _CHUNK_STAMP.search(r, start) else r)
    return out


_ENTITY = re.compile(r"&(?:quot|apos|amp|lt|gt|nbsp|#39|#x27|#34|#x22);")
_ENTITIES = {"&quot;": '"', "&apos;": "'", "&amp;": "&", "&lt;": "<", "&gt;": ">", "&nbsp;": " ", "&#39;": "'",
             "&#x27;": "'", "&#34;": '"', "&#x22;": '"'}


def _unescape_html(text: str) -> str:
    """A log copied out of a web page's HTML (`&quot;`, `&gt;`, `&#39;`) as the program wrote it.

    Only the entities an escaper writes for a log's characters: a log holding other `&...;` text keeps it."""
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(0)], text) if "&" in text and _ENTITY.search(text) else text


_JSON_META = ("time", "timestamp", "ts", "severity", "level", "levelname", "stream", "logger", "name")


def _json_message(raw: str) -> tuple[str, bool] | None:
    """A JSON log record's line and whether it is whole: a container runtime's `{"log": "...\\n", "stream": ...}`
    (a line it split has no final newline) or a structured logger's `{"message": ..., "severity": ...}`."""
    if not raw.startswith("{") or not raw.rstrip().endswith("}") or ('"log"' not in raw and '"message"' not in raw
                                                                     and '"msg"' not in raw):
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("log"), str):
        line = record["log"]
        return (line[:-1], True) if line.endswith("\n") else (line, not line)
    message = record.get("message", record.get("msg"))
    if isinstance(message, str) and any(key in record for key in _JSON_META):
        return message.rstrip("\n"), True
    return None


def _decode_json_lines(text: str) -> str:
    """A JSON log file (a record per line) as the lines its records hold; a line the runtime split is joined again.
    Lines that are no such record are kept (a JSON log interleaved with plain lines)."""
    out: list[str] = []
    partial = ""
    for raw in text.split("\n"):
        found = _json_message(raw)
        if found is not None:
            partial += found[0]
            if found[1]:
                out.append(partial)
                partial = ""
            continue
        if partial:
            out.append(partial)
            partial = ""
        out.append(raw)
    if partial:
        out.append(partial)
    return "\n".join(out)


def _undouble(raw: list[str]) -> list[str]:
    """A log pasted double-spaced (a blank line after every line: some editors, chat clients) as written: where no
    two lines with text touch, every run of 2k+1 blank lines was k blank lines."""
    if any(raw[i].strip() and raw[i + 1].strip() for i in range(len(raw) - 1)) or sum(1 for r in raw if r.strip()) < 3:
        return raw
    out: list[str] = []
    blanks = 0
    for r in raw:
        if r.strip():
            out.extend([""] * (blanks // 2) if out else [])
            out.append(r)
            blanks = 0
        else:
            blanks += 1
    out.extend([""] * max(blanks // 2, 1))
    return out


_FRAME_ISH = re.compile(r'File "|File \S+:\d+|Cell In\[|<ipython-input|\S\.py in \w|^\s*│')


def _unreverse(raw: list[str]) -> list[str]:
    """A log copied newest line first (log viewers such as Datadog or Kibana) in the order it was written.

    Told by its tracebacks: upside down, a traceback's header has its frames above it, never below."""
    forward = backward = 0
    for i in [i for i, r in enumerate(raw) if TRACEBACK in r]:
        r = raw[i]
        # Another stream's line may sit between a header and its frames.
        below = [x for x in raw[i + 1:i + 5] if x.strip()][:2]
        above = [x for x in raw[max(0, i - 5):i] if x.strip()][-3:]
        if any(_FRAME_ISH.search(x) for x in [r.split(TRACEBACK, 1)[1], *below]):
            forward += 1
        elif any(_FRAME_ISH.search(x) for x in above):
            backward += 1
    if not backward or forward:
        return raw
    end = len(raw)
    while end and not raw[end - 1].strip():
        end -= 1
    return raw[:end][::-1] + raw[end:]


_GUTTER = re.compile(r"^(\d{1,7})(?=\D|$)")


def _ungutter(raw: list[str]) -> list[str]:
    """A log copied from a viewer with its line-number gutter (`337test_x ... ok`, `341` for a blank line): the
    numbers removed. A gutter numbers (nearly) every line consecutively and glues to the text or stands alone,
    which a step table's first column does not."""
    nums = [(i, int(m.group(1)), m.end()) for i, r in enumerate(raw) if (m := _GUTTER.match(r))]
    if len(nums) < 5 or len(nums) < 0.8 * sum(1 for r in raw if r.strip()):
        return raw
    consecutive = sum(b[1] == a[1] + 1 and b[0] == a[0] + 1 for a, b in pairwise(nums))
    glued = sum(raw[i][end:end + 1].isalpha() or not raw[i][end:].strip() for i, _, end in nums)
    if consecutive < 0.9 * (len(nums) - 1) or glued < 0.2 * len(nums):
        return raw
    out = list(raw)
    for i, _, end in nums:
        out[i] = raw[i][end:]
    return out


def raw_lines(text: str) -> list[str]:
    """The text's lines as the program wrote them, with what a paste or a collector did undone: HTML entities,
    JSON log records, ANSI codes, line ends, an indented, quoted or double-spaced paste, per-write stamps, a log
    listed newest line first, a hard wrap."""
    text = _unescape_html(text)
    if '{"' in text and ('"log"' in text or '"message"' in text or '"msg"' in text):
        text = _decode_json_lines(text)
    raw = _unchunk(_undouble(_dedent(_unquote(_dedent(_ungutter(clean(text).split("\n")))))))
    if TRACEBACK in text:
        raw = _unreverse(raw)
    return _rejoin_frames(_unwrap_width(raw))
