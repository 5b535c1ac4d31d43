"""Metric records from the lines training loops print, read streaming.

One line (or one carriage-return segment of a tqdm line) gives at most one record: the
first parser that finds numbers wins, in the order JSON, Python dict, tqdm postfix, `| key
value |` columns, key=value, key: value. A per-rank prefix (`[rank3]:`, `[default3]:`,
`rank3:`, srun's `3: `) is stripped and remembered. Metric names are normalised (`lm loss`,
`train/loss` -> loss; `gnorm`, `grad norm` -> grad_norm; `learning_rate` -> lr; `iteration`,
`global_step`, `num_updates` -> step).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

NUM = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
VALUE = rf"(?:tensor\(\s*)?(?P<val>{NUM})"
NONFINITE_WORD = re.compile(r"nan|inf", re.IGNORECASE)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RANK_PREFIX = re.compile(r"^\s*(?:\[(?:rank|default)\s*(\d+)\]\s*:?|rank\s*(\d+)\s*[:|]|(\d{1,4}):\s)\s*",
                         re.IGNORECASE)
PY_PAIR = re.compile(rf"""['"](?P<key>[^'"]+)['"]\s*:\s*{VALUE}""", re.IGNORECASE)
KV_PAIR = re.compile(rf"(?<![\w./-])(?P<key>[A-Za-z_][\w./-]*)\s*=\s*{VALUE}(?![\w.])", re.IGNORECASE)
COLON_PAIR = re.compile(
    rf"(?<![\w./-])(?P<key>[A-Za-z_][\w./-]*(?: [A-Za-z_][\w./-]*){{0,3}}(?: \([\w/ ]+\))?)\s*:\s*{VALUE}"
    r"(?![\w.:])", re.IGNORECASE)
PIPE_SEGMENT = re.compile(
    rf"^\s*(?P<key>[A-Za-z_][\w./-]*(?: [A-Za-z_][\w./-]*){{0,5}}(?: \([\w/ ]+\))?)\s*[:=]?\s*{VALUE}"
    r"(?:\s*/\s*\d+)?\s*$", re.IGNORECASE)
TQDM = re.compile(r"(?P<n>\d+)/(?P<total>\d+|\?)\s*\[[^\]]*?(?:it/s|s/it|\?it/s)\s*,\s*(?P<postfix>[^\]]*)\]")

ALIASES = {
    "loss": "loss", "lm_loss": "loss", "total_loss": "loss", "loss_total": "loss",
    "grad_norm": "grad_norm", "gnorm": "grad_norm", "gradient_norm": "grad_norm", "grad_norm_total": "grad_norm",
    "global_grad_norm": "grad_norm", "total_grad_norm": "grad_norm",
    "lr": "lr", "learning_rate": "lr",
    "step": "step", "global_step": "step", "iteration": "step", "iter": "step", "num_updates": "step",
    "steps": "step",
}
PREFIXES = ("train/", "train_", "training/", "training_", "trainer/")
RECOGNISED = ("loss", "grad_norm", "lr")
IGNORED = "ignored"
"""Record.format of numbers found on a line that names no loss, norm or step (kept for error messages)."""


@lru_cache(maxsize=4096)
def canonical(key: str) -> str:
    k = re.sub(r"\([^)]*\)", "", key.strip().strip("'\"").lower())
    k = re.sub(r"[\s-]+", "_", k.strip()).strip("_")
    for prefix in PREFIXES:
        if k.startswith(prefix) and len(k) > len(prefix):
            k = k[len(prefix):]
            break
    return ALIASES.get(k, k)


def to_float(text: str) -> float:
    """float() reads nan, inf, -inf and Infinity in any case already."""
    return float(text)


@dataclass
class Record:
    rank: str | None
    metrics: dict[str, float]
    step: int | None
    format: str


def _pairs(matches: Iterator[re.Match[str]]) -> dict[str, float]:
    found: dict[str, float] = {}
    for m in matches:
        try:
            found.setdefault(canonical(m.group("key")), to_float(m.group("val")))
        except ValueError:
            continue
    return found


def _flatten_json(obj: object, prefix: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _flatten_json(value, f"{prefix}/{key}" if prefix else str(key))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield prefix, float(obj)
    elif isinstance(obj, str) and re.fullmatch(NUM, obj.strip(), re.IGNORECASE):
        yield prefix, to_float(obj.strip())


def parse_json(text: str) -> dict[str, float] | None:
    start = text.find("{")
    if start < 0 or not text.rstrip().endswith("}"):
        return None
    try:
        obj = json.loads(text[start:])
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    found: dict[str, float] = {}
    for key, value in _flatten_json(obj):
        found.setdefault(_json_key(key), value)
    return found


def _json_key(key: str) -> str:
    """`metrics/loss` -> loss, but `eval/loss` stays apart from the training loss."""
    name = canonical(key)
    if "/" in name:
        parent, _, leaf = key.rpartition("/")
        if canonical(leaf) in (*RECOGNISED, "step") and not re.search(r"eval|val|test", parent, re.IGNORECASE):
            return canonical(leaf)
    return name


def parse_pydict(text: str) -> dict[str, float] | None:
    start = text.find("{")
    if start < 0 or "}" not in text[start:]:
        return None
    return _pairs(PY_PAIR.finditer(text[start:]))


def parse_tqdm(text: str) -> dict[str, float] | None:
    m = TQDM.search(text)
    if not m:
        return None
    found = _pairs(KV_PAIR.finditer(m.group("postfix")))
    if not found:
        return None
    found.setdefault("step", float(m.group("n")))
    return found


def parse_pipe(text: str) -> dict[str, float] | None:
    if text.count("|") < 2:
        return None
    found: dict[str, float] = {}
    for segment in text.split("|"):
        m = PIPE_SEGMENT.match(segment)
        if m:
            try:
                found.setdefault(canonical(m.group("key")), to_float(m.group("val")))
            except ValueError:
                continue
    return found


def parse_kv(text: str) -> dict[str, float] | None:
    return _pairs(KV_PAIR.finditer(text))


def parse_colon(text: str) -> dict[str, float] | None:
    return _pairs(COLON_PAIR.finditer(text))


PARSERS: tuple[tuple[str, Callable[[str], dict[str, float] | None]], ...] = (
    ("json", parse_json), ("python_dict", parse_pydict), ("tqdm", parse_tqdm), ("pipe", parse_pipe),
    ("key=value", parse_kv), ("key: value", parse_colon),
)


def _is_metric_record(found: dict[str, float]) -> bool:
    """A record worth keeping: it names a loss or a norm, or it carries an explicit step."""
    if "runtime" in found:
        return False  # HF's end-of-training summary (train_runtime, averaged train_loss), not a step
    return "step" in found or any("loss" in k or "norm" in k for k in found)


def parse_line(line: str) -> Iterator[Record]:
    """Records of one physical line (tqdm redraws with carriage returns: each segment counts)."""
    for segment in line.split("\r"):
        text = ANSI.sub("", segment).strip()
        if not text or not (any(ch.isdigit() for ch in text) or NONFINITE_WORD.search(text)):
            continue
        rank = None
        m = RANK_PREFIX.match(text)
        if m:
            rank = next(g for g in m.groups() if g is not None)
            text = text[m.end():]
        for name, parser in PARSERS:
            found = parser(text)
            if not found:
                continue
            if not _is_metric_record(found):
                yield Record(rank, found, None, IGNORED)
                break
            step_value = found.pop("step", None)
            step = int(step_value) if step_value is not None and math.isfinite(step_value) \
                and step_value == int(step_value) and step_value >= 0 else None
            if found:
                yield Record(rank, found, step, name)
            break
