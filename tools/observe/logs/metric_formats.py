"""One log line's metrics: the formats trainers print and the one vocabulary of metric names.

`parse_text(line)` gives at most one MetricRecord (a step, if printed, and named numbers): the
first format that finds numbers wins, in the order JSON, Python dict (HF Trainer), tqdm /
Lightning postfix, `| key value |` columns (Megatron), then `key=value`, `key: value` and
space-separated `key value` pairs (nanoGPT `iter N:`, torchtitan `step: N  loss: X`, DeepSpeed
`step=N`). CSV / TSV files and whitespace-aligned tables (fastai, Ultralytics) are read row by
row under their header (`delimited_header` / `table_header`). Names go through
metric_names.yaml (`canonical`). tools/logs/metrics.py turns records into series.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

NUM = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
_NUM_RE = re.compile(NUM, re.IGNORECASE)
_WORD = r"[A-Za-z_][\w./@-]*"  # `Acc@1` (torchvision, timm)
_KEY = rf"{_WORD}(?:\(\w+\))?"  # mmengine's `Iter(train) [ 1450/80000]`
_VALUE = (rf"(?:tensor\(\s*|\[\s*)?['\"]?(?P<val>{NUM})['\"]?(?:\s*/\s*\d+\s*\]?)?"
          r"(?![\w.]|:\S|,\d{3}\b)")
# One word before its value; the words before it join the key when they lead up to it with single
# spaces: several before ':' or '=' ("lm loss:", "Global Step:"), one before a loss / norm / rate / accuracy
# separated by a space ("val loss 2.0"). Matching one word keeps the scan linear.
_PAIR = re.compile(rf"(?<![\w./'\"-])(?P<q>['\"])?(?P<key>{_KEY})(?(q)['\"])(?P<sep>\s*[:=]\s*|\s+){_VALUE}",
                   re.IGNORECASE)  # a quoted key ('loss': nan) closes its quote; `device='cuda:3'` is no key
_QUALIFIERS = re.compile(r"(?:(?<=\s)|^)((?:[A-Za-z_][\w.-]* ){1,3})$")
_METRIC_WORD = re.compile(r"(?:loss|norm|rate|acc|accuracy)$", re.IGNORECASE)
_PY_PAIR = re.compile(rf"""['"](?P<key>[^'"]+)['"]\s*:\s*(?:tensor\(\s*)?['"]?(?P<val>{NUM})""", re.IGNORECASE)
_PIPE_SEGMENT = re.compile(
    rf"^\s*(?P<key>{_WORD}(?: {_WORD}){{0,5}}(?: \([\w/ ]+\))?)\s*[:=]?\s*(?:tensor\(\s*)?(?P<val>{NUM})"
    r"(?:\s*/\s*\d+)?\s*$", re.IGNORECASE)
_TQDM = re.compile(r"(?P<n>\d+)/(?P<total>\d+|\?)\s*\[[^\]]*?(?:it/s|s/it|\?it/s)\s*,\s*(?P<postfix>[^\]]*)\]")
# A missing value (`total_grad_norm: N/A total_loss: ...`) is that key's, not a word of the next key.
_MISSING = re.compile(r"([:=])\s*(?:N/A|None|null|-)(?=[\s,;]|$)", re.IGNORECASE)
_LIGHTNING_EPOCH = re.compile(r"Epoch (\d+):\s+\d+%")
_HAS_NUMBER = re.compile(r"\d|nan|inf", re.IGNORECASE)
_DELIMITED_KEY = re.compile(rf"^\s*['\"]?{_WORD}['\"]?\s*$")

IGNORED = "ignored"
"""MetricRecord.format of numbers on a line that names no loss, norm or step (kept for error messages)."""
RECOGNISED = ("loss", "grad_norm", "lr")


@lru_cache(maxsize=16)
def trigger(wanted: frozenset[str] = frozenset()) -> re.Pattern[str]:
    """Words one of which every metric line holds (a loss, norm, step or iteration name, a progress bar, or a
    spelling of one of the `wanted` metrics)."""
    vocab = vocabulary()
    words = {"loss", "norm", "it/s", "s/it", *wanted} | {
        w for w, name in vocab.names.items() if name in ("loss", "grad_norm", "step", "iteration", *wanted)}
    spellings = {variant for w in words for variant in (w, w.replace("_", " "), w.replace("_", "-"))}
    minimal = sorted(w for w in spellings if not any(o != w and o in w for o in spellings))
    return re.compile("|".join(re.escape(w) for w in minimal), re.IGNORECASE)


# -- vocabulary ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Vocabulary:
    names: dict[str, str]
    training_prefixes: tuple[str, ...]
    spike_metrics: tuple[str, ...]
    kept_series_words: tuple[str, ...]
    count_qualifiers: tuple[str, ...]


def _normalise_key(key: str) -> str:
    k = re.sub(r"\([^)]*\)", "", key.strip().strip("'\"").lower())
    return re.sub(r"[\s-]+", "_", k.strip()).strip("_")


@lru_cache(maxsize=1)
def vocabulary() -> Vocabulary:
    data = yaml.safe_load((Path(__file__).with_name("metric_names.yaml")).read_text(encoding="utf-8"))
    names = {_normalise_key(spelling): name for name, spellings in data["canonical"].items()
             for spelling in [name, *spellings]}
    return Vocabulary(names, tuple(data["training_prefixes"]), tuple(data["spike_metrics"]),
                      tuple(data["kept_series_words"]), tuple(data["count_qualifiers"]))


@lru_cache(maxsize=8192)
def canonical(key: str) -> str:
    """The vocabulary's name for a printed key (`lm loss` -> loss, `train/grad_norm` -> grad_norm)."""
    vocab = vocabulary()
    k = _normalise_key(key)
    if k in vocab.names:
        return vocab.names[k]
    for prefix in vocab.training_prefixes:
        if k.startswith(prefix) and len(k) > len(prefix):
            k = k[len(prefix):]
            break
    head, _, rest = k.partition("_")
    if head in vocab.count_qualifiers and rest in vocab.names:
        return vocab.names[rest]  # `Total iter`, `global_grad_norm`: the qualifier names no other quantity
    return vocab.names.get(k, k)


def keeps_points(metric: str, wanted: frozenset[str] = frozenset()) -> bool:
    return metric in RECOGNISED or metric in wanted or any(w in metric for w in vocabulary().kept_series_words)


# -- one line -----------------------------------------------------------------------------------------------------

@dataclass
class MetricRecord:
    step: int | None
    metrics: dict[str, float]
    format: str


def _pairs(matches: Iterator[re.Match[str]]) -> dict[str, float]:
    found: dict[str, float] = {}
    for m in matches:
        try:
            found.setdefault(canonical(m.group("key")), float(m.group("val")))
        except ValueError:
            continue
    return found


def _key(m: re.Match[str], text: str, after: int) -> str:
    """The pair's key with the words that lead up to it (not before `after`, the end of the previous pair)."""
    key, start = m.group("key"), m.start()
    if start < 2 or text[start - 1] != " " or not (text[start - 2].isalnum() or text[start - 2] in "_)"):
        return key
    spaced = not m.group("sep").strip()
    if spaced and not _METRIC_WORD.search(key):
        return key
    q = _QUALIFIERS.search(text, after, start)
    if not q:
        return key
    words = q.group(1).split()
    return " ".join([*(words[-1:] if spaced else words), key])


def parse_pairs(text: str) -> dict[str, float] | None:
    if "N/A" in text or "None" in text or "null" in text:
        text = _MISSING.sub(r"\1 ;", text)
    found: dict[str, float] = {}
    after = 0
    for m in _PAIR.finditer(text):
        try:
            found.setdefault(canonical(_key(m, text, after)), float(m.group("val")))
        except ValueError:
            pass
        after = m.end()
    return found


def _flatten_json(obj: object, prefix: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _flatten_json(value, f"{prefix}/{key}" if prefix else str(key))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield prefix, float(obj)
    elif isinstance(obj, str) and _NUM_RE.fullmatch(obj.strip()):
        yield prefix, float(obj.strip())


def _json_key(key: str) -> str:
    """`metrics/loss` -> loss, but `eval/loss` stays apart from the training loss."""
    name = canonical(key)
    if "/" in name:
        parent, _, leaf = key.rpartition("/")
        if canonical(leaf) in (*RECOGNISED, "step") and not re.search(r"eval|val|test", parent, re.IGNORECASE):
            return canonical(leaf)
    return name


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


def parse_pydict(text: str) -> dict[str, float] | None:
    start = text.find("{")
    if start < 0 or "}" not in text[start:]:
        return None
    return _pairs(_PY_PAIR.finditer(text[start:]))


def parse_tqdm(text: str) -> dict[str, float] | None:
    if "it/s" not in text and "s/it" not in text:
        return None
    m = _TQDM.search(text)
    if not m:
        return None
    found = parse_pairs(m.group("postfix"))
    if not found:
        return None
    step = int(m.group("n"))
    epoch = _LIGHTNING_EPOCH.search(text, 0, m.start())
    if epoch and m.group("total") != "?":  # Lightning restarts the bar every epoch: make steps global
        step += int(epoch.group(1)) * int(m.group("total"))
    found.setdefault("step", float(step))
    return found


def parse_pipe(text: str) -> dict[str, float] | None:
    """`| key value |` columns; a column holding several pairs is read as pairs; a leading bare integer is the step."""
    if text.count("|") < 2:
        return None
    found: dict[str, float] = {}
    for position, segment in enumerate(text.split("|")):
        m = _PIPE_SEGMENT.match(segment)
        if m:
            try:
                found.setdefault(canonical(m.group("key")), float(m.group("val")))
            except ValueError:
                pass
        elif position == 0 and segment.strip().isdecimal():  # isdigit() takes '²', which float() refuses
            found.setdefault("step", float(segment.strip()))  # strip(): float() keeps '\x1d', which strip() drops
        else:
            for key, value in parse_pairs(segment).items():
                found.setdefault(key, value)
    return found


PARSERS = (("json", parse_json), ("python_dict", parse_pydict), ("tqdm", parse_tqdm), ("pipe", parse_pipe),
           ("pairs", parse_pairs))


def _is_metric_record(found: dict[str, float], wanted: frozenset[str] = frozenset()) -> bool:
    """A record worth keeping: it names a loss, a norm or a wanted metric, or it carries an explicit step."""
    if "runtime" in found:
        return False  # HF's end-of-training summary (train_runtime, averaged train_loss), not a step
    return "step" in found or "iteration" in found or any("loss" in k or "norm" in k or k in wanted for k in found)


def _as_step(value: float | None) -> int | None:
    if value is None or not math.isfinite(value) or value != int(value) or value < 0:
        return None
    return int(value)


def record_of(found: dict[str, float], fmt: str) -> MetricRecord | None:
    step = _as_step(found.pop("step", None))
    iteration = _as_step(found.pop("iteration", None))
    if step is None:
        step = iteration  # a loop counter counts when the line prints no step
    return MetricRecord(step, found, fmt) if found else None


def parse_text(text: str, wanted: frozenset[str] = frozenset()) -> MetricRecord | None:
    """The record of one normalised line segment (no launcher prefix, no carriage return).

    wanted: canonical names of metrics a caller asks for (val_acc, top1): a line naming one is a record
    even when it names no loss, norm or step."""
    if not _HAS_NUMBER.search(text):
        return None
    ignored: dict[str, float] | None = None
    for name, parser in PARSERS:
        found = parser(text)
        if not found:
            continue
        if _is_metric_record(found, wanted):
            return record_of(found, name)
        ignored = ignored or found  # a later, looser format may still find the metrics
    return MetricRecord(None, ignored, IGNORED) if ignored else None


# -- delimited files ----------------------------------------------------------------------------------------------

def delimited_header(text: str) -> tuple[str, list[str]] | None:
    """(delimiter, canonical column names) when a line is the header row of a CSV / TSV metrics file."""
    for sep in ("\t", ","):
        cells = text.split(sep)
        if len(cells) < 2 or not all(_DELIMITED_KEY.match(c) for c in cells):
            continue
        names = [_json_key(c.strip().strip("'\"")) for c in cells]
        if {"step", "iteration"} & set(names) or any(n in RECOGNISED or "loss" in n for n in names):
            return sep, names
    return None


def delimited_row(text: str, sep: str, names: list[str]) -> dict[str, float] | None:
    cells = text.split(sep)
    if len(cells) != len(names):
        return None
    found: dict[str, float] = {}
    for name, cell in zip(names, cells, strict=True):
        cell = cell.strip().strip("'\"")
        if cell and _NUM_RE.fullmatch(cell):
            found.setdefault(name, float(cell))
    return found


_TABLE_SPLIT = re.compile(r"\s{2,}|\t")
_FRACTION = re.compile(r"^(\d+)/\d+$")
_ROW_BAR = re.compile(r":\s+\d+%\|.*$")


def table_header(text: str) -> list[str] | None:
    """Column names when a line heads a whitespace-aligned table (fastai's `epoch  train_loss  valid_loss  time`)."""
    if ":" in text or "=" in text or "|" in text or "," in text:
        return None
    cells = _TABLE_SPLIT.split(text.strip())
    if len(cells) < 3 or not all(_DELIMITED_KEY.match(c) for c in cells):
        return None
    names = [_json_key(c) for c in cells]
    return names if any(n in RECOGNISED or "loss" in n for n in names) else None


def table_row(text: str, names: list[str]) -> dict[str, float] | None:
    """A row under a table header: as many cells, at least half of them numbers (`1/100` counts as 1). A progress
    bar the row ends in (Ultralytics: `640: 100%|####| 10/10 [...]`) is no cell. Without a step column, a per-epoch
    table's epoch is the step."""
    bar = _ROW_BAR.search(text)
    cells = _TABLE_SPLIT.split((text[:bar.start()] if bar else text).strip())
    if len(cells) != len(names):
        return None
    found: dict[str, float] = {}
    for name, cell in zip(names, cells, strict=True):
        fraction = _FRACTION.match(cell)
        if fraction:
            found.setdefault(name, float(fraction.group(1)))
        elif _NUM_RE.fullmatch(cell):
            found.setdefault(name, float(cell))
    if 2 * len(found) < len(names):
        return None
    if "epoch" in found and not {"step", "iteration"} & set(found):
        found["step"] = found["epoch"]
    return found
