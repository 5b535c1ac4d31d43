"""Traceback unfolding: a traceback flattened onto one line (a JSON string with `\\n`, a log joining the lines
of a record) as the lines Python printed, after the prefixes are peeled (the unfolded lines keep the line's rank)."""

from __future__ import annotations

import re

from rootcause.tools.observe.logs.prefixes import Parsed
from rootcause.tools.observe.logs.traceback_lines import TRACEBACK, exception_named, frame_location

_FLAT_TB = re.compile(rf"""{re.escape(TRACEBACK)}:?\s*(?:\\n(?:['"],\s*['"])?|\s)\s*File """)
# Where a frame starts inside the line (a split point: no groups), and a frame with its code after it.
_FLAT_FRAME = re.compile(rf"\s*(?:\\n)?\s*(?={frame_location(named=False)})")
_FLAT_IN = re.compile(rf"^({frame_location(named=False)}(?:, in [\w.<>]+)?)\s*(.*)$")
_FLAT_EXC = exception_named("space", "colon")
_LIST_SEP = re.compile(r"""\\n['"],\s*['"]""")
_LIST_START = re.compile(r"""\[['"](?=Traceback)""")
_LIST_END = re.compile(r"""\\n['"]\]""")


# PyTorch's C++ errors print these on lines of their own after the message: where a flattened message breaks.
_C10_TRAILERS = re.compile(r"\s+(?=CUDA kernel errors might be asynchronously reported|For debugging consider passing "
                           r"CUDA_LAUNCH_BLOCKING|Compile with `?TORCH_USE_CUDA_DSA|Exception raised from \S+ at |"
                           r"C\+\+ CapturedTraceback:|frame #\d+: )")


def unflatten(raw: str) -> list[str]:
    """A traceback flattened onto one line (a JSON string with `\\n`, a log joining lines) as its lines."""
    if not _FLAT_TB.search(raw):
        return [raw]
    if "\\n" in raw:
        # `traceback.format_exception(...)` printed as a list: `['Traceback ...:\\n', '  File ...\\n', ...]`
        raw = _LIST_END.sub("", _LIST_START.sub("", _LIST_SEP.sub(r"\\n", raw)))
        return raw.replace('\\"', '"').replace("\\'", "'").replace("\\t", "    ").split("\\n")
    head, _, rest = raw.partition(TRACEBACK)
    out = [f"{head}{TRACEBACK}:"] if head.strip() else [f"{TRACEBACK}:"]
    parts = [p for p in _FLAT_FRAME.split(rest.lstrip(":").strip()) if p.strip()]
    for n, part in enumerate(parts):
        m = _FLAT_IN.match(part.strip())
        if not m:
            out.append(part.strip())
            continue
        out.append(f"  {m.group(1)}")
        tail = m.group(2).strip()
        if n == len(parts) - 1 and tail:
            exc = None
            for found in _FLAT_EXC.finditer(tail):
                exc = found
                break
            if exc:
                code = tail[:exc.start("type")].strip()
                if code:
                    out.append(f"    {code}")
                out.extend(_C10_TRAILERS.split(tail[exc.start("type"):].strip()))
                continue
        if tail:
            out.append(f"    {tail}")
    return out


def has_flattened(text: str) -> bool:
    """Whether a line holds a flattened traceback."""
    return "Traceback" in text and bool(_FLAT_TB.search(text))


def unfold(split: list[tuple[str, Parsed]]) -> list[tuple[str, Parsed]]:
    """Tracebacks flattened onto one line unfolded, the unfolded lines keeping the line's rank and worker."""
    out: list[tuple[str, Parsed]] = []
    i = 0
    while i < len(split):
        text, parsed = split[i]
        if has_flattened(text):
            # A flattened traceback is one logical line: a break between two letters is a paste's wrap.
            text = text.rstrip()
            while i + 1 < len(split) and text[-1:].isalnum() and split[i + 1][0][:1].isalnum() and \
                    (split[i + 1][1].rank, split[i + 1][1].worker) in ((parsed.rank, parsed.worker), (None, None)):
                text += split[i + 1][0].rstrip()
                i += 1
            # The unfolded lines continue the line's record: they start none.
            rest = Parsed(parsed.rank, parsed.worker, parsed.level)
            out.extend((part, parsed if not n else rest) for n, part in enumerate(unflatten(text)))
        else:
            out.append(split[i])
        i += 1
    return out
