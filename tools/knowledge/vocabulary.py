"""Tokens, a light stemmer and the field's synonym concepts shared by ranking and dedupe.

A concept is a group of phrases that mean the same thing to someone debugging training
code ("NaN", "non-finite", "inf"). Text that mentions any phrase of a group gets the
group's concept token (`~nonfinite`), so a query and an entry that use different words
for one idea still meet in the index.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Linear-time forms (a 200 KB run of letters or digits took minutes with open-ended backtracking):
# a digit token starts only where a digit run starts, and "camelCase" is two lowercase letters then an
# uppercase one, which every match of the longer alternatives contains.
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*|(?<!\d)\d++[A-Za-z][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CAMEL_WORD = re.compile(r"[a-z]{2}[A-Z]")
_STOP = frozenset(
    """a an and are as at be been but by can do does for from has have how i if in into is it its
    no not of on or our so such that the their then there these this to was we were what when where
    which while who will with you your all any each via per than too very also only just use used
    using must should may might get gets got after before""".split()
)

# Terms are matched on stemmed words (see `stem`); "a b" is a phrase, a trailing * a prefix of the stem.
CONCEPTS: dict[str, tuple[str, ...]] = {
    "nonfinite": ("nan", "nonfinite", "non finite", "inf", "infinity", "isfinite", "isnan"),
    "hang": ("hang", "hung", "deadlock*", "stuck", "timeout", "time out", "timed out", "watchdog", "freez*",
             "froze", "no progress", "heartbeat"),
    "oom": ("oom", "out of memory", "outofmemory*", "cudamalloc", "fragmentation", "memory exhaust*"),
    "checkpoint": ("checkpoint*", "state dict", "statedict", "dcp", "resum*", "missing key", "unexpected key",
                   "safetensor*", "ckpt", "save load"),
    "gradnorm": ("grad norm", "gradient norm", "gradnorm", "clip*"),
    "gradaccum": ("grad accum*", "gradient accum*", "accumulat*", "micro batch*", "microbatch*"),
    "seqparallel": ("sequence parallel*", "sp", "ulysses", "all to all", "alltoall", "context parallel*", "cp"),
    "fsdp": ("fsdp", "fsdp2", "fully shard*", "shard*", "dtensor*", "hsdp", "device mesh"),
    "moe": ("moe", "expert", "ep", "routing", "router", "token dispatch"),
    "collator": ("collat*", "packing", "dynamic batch*", "data pipeline"),
    "generated": ("generat*", "patchgen", "codegen", "overwritten"),
    "multimodal": ("multimodal*", "multi modal*", "vlm", "image", "video", "audio", "vision", "omni"),
    "dtype": ("dtype", "bf16", "bfloat16", "fp16", "float16", "float32", "fp32", "precision", "cast"),
    "device": ("npu", "ascend", "torch cuda", "device agnostic", "device type"),
    "importing": ("import", "importerror", "modulenotfound*", "no module named", "cannot import"),
    "registry": ("regist*", "model type", "lookup key"),
    "version": ("version", "upgrad*", "pin", "pinned", "bump*", "downgrad*"),
    "loss": ("loss*", "ignore index", "label", "cross entropy", "crossentropy"),
    "position": ("position id", "cu seq len*", "varlen", "segment boundar*"),
    "attention": ("attention", "attn", "flash attn"),
    "collective": ("rank", "all reduce", "allreduce", "all gather", "allgather", "reduce scatter", "collective",
                   "nccl", "gloo", "barrier", "world size", "process group", "torchrun"),
    "environment": ("uv", "uv sync", "uv lock", "venv", "overlay", "lockfile", "lock file"),
    "quality": ("ruff", "lint*", "pre commit", "precommit"),
    "trainer": ("trainer", "callback", "lifecycle", "forward backward"),
    "wrongvalue": ("wrong", "incorrect", "silent*", "mismatch*", "diverg*", "differ", "different", "difference"),
    "sync": ("host device sync", "implicit sync", "synchroni*"),
}
CONCEPT_PREFIX = "~"

# The diagnosis category of a session pulls entries about the same kind of failure up.
CATEGORY_CONCEPTS: dict[str, tuple[str, ...]] = {
    "cuda_oom": ("oom",),
    "host_oom": ("oom",),
    "nonfinite": ("nonfinite",),
    "gradient_explosion": ("gradnorm",),
    "hang": ("hang", "collective"),
    "distributed_error": ("collective",),
    "checkpoint_mismatch": ("checkpoint",),
    "dtype_mismatch": ("dtype",),
    "device_mismatch": ("device",),
    "import_error": ("importing", "registry", "version"),
    "cuda_error": ("device",),
    "shape_mismatch": ("seqparallel",),
}


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """A deliberately small suffix stripper: the same word forms meet, nothing clever."""
    w = word
    if len(w) <= 3 or w.isdigit():
        return w
    for suffix, repl, min_len in (("ies", "y", 5), ("sses", "ss", 5), ("ing", "", 6), ("ed", "", 5),
                                  ("es", "", 5), ("s", "", 4), ("ly", "", 6)):
        if w.endswith(suffix) and len(w) >= min_len:
            if suffix == "es" and not re.search(r"(ss|x|ch|sh|z)es$", w):
                continue
            if suffix == "s" and w.endswith(("ss", "us", "sis", "xis")):
                continue
            w = w[: len(w) - len(suffix)] + repl
            if suffix in ("ing", "ed") and len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    return w


def words(text: str) -> list[str]:
    """Stemmed word tokens; identifiers also yield their parts (clip_grad_norm -> clip, grad, norm)."""
    out: list[str] = []
    for raw in _WORD.findall(text):
        lowered = raw.lower()
        if lowered not in _STOP and len(lowered) > 1:
            out.append(stem(lowered))
        parts = [p for chunk in raw.split("_") for p in (_CAMEL.findall(chunk) if _CAMEL_WORD.search(chunk)
                                                          else [chunk])]
        if len(parts) > 1:
            out.extend(stem(p.lower()) for p in parts if p.lower() not in _STOP and len(p) > 1)
    return out


_PLAIN = re.compile(r"[a-z0-9]+")


def _compile() -> tuple[dict[str, list[tuple[tuple[str, ...], bool, str]]], list[tuple[str, str]]]:
    """Phrases keyed by their first stem (exact first words), and single-word prefixes."""
    phrases: dict[str, list[tuple[tuple[str, ...], bool, str]]] = {}
    prefixes: list[tuple[str, str]] = []
    for name, terms in CONCEPTS.items():
        for term in terms:
            parts = term.split()
            is_prefix = parts[-1].endswith("*")
            stems = tuple(stem(p) for p in parts[:-1]) + ((parts[-1][:-1],) if is_prefix else (stem(parts[-1]),))
            if len(stems) == 1 and is_prefix:
                prefixes.append((stems[0], name))
            else:
                phrases.setdefault(stems[0], []).append((stems, is_prefix, name))
    return phrases, prefixes


_PHRASES, _PREFIXES = _compile()


@lru_cache(maxsize=65_536)
def _prefix_concepts(word_stem: str) -> tuple[str, ...]:
    return tuple(name for prefix, name in _PREFIXES if word_stem.startswith(prefix))


def _scan(text: str) -> dict[str, str]:
    """Concept -> the first phrase of text that names it (stemmed-word matching, one pass)."""
    raw = _PLAIN.findall(text.lower())
    stems = [stem(w) for w in raw]
    found: dict[str, str] = {}
    for i, s in enumerate(stems):
        for name in _prefix_concepts(s):
            found.setdefault(name, raw[i])
        for parts, is_prefix, name in _PHRASES.get(s, ()):
            if name in found:
                continue
            n = len(parts)
            window = stems[i:i + n]
            if len(window) < n or window[:-1] != list(parts[:-1]):
                continue
            last = window[-1]
            if last == parts[-1] or (is_prefix and last.startswith(parts[-1])):
                found[name] = " ".join(raw[i:i + n])
    return found


def concepts(text: str) -> list[str]:
    """The concept names whose terms occur in text."""
    return list(_scan(text))


def concept_hits(text: str) -> dict[str, str]:
    """Concept name -> the words of text that triggered it (for `why`)."""
    return _scan(text)


def tokens(text: str) -> list[str]:
    """Index tokens: stemmed words plus one concept token per concept mentioned."""
    return words(text) + [CONCEPT_PREFIX + c for c in concepts(text)]
