"""Tokens, a light stemmer and the field's synonym concepts shared by ranking and dedupe.

A concept is a group of phrases that mean the same thing to someone debugging training
code ("NaN", "non-finite", "inf"). Text that mentions any phrase of a group gets the
group's concept token (`~nonfinite`), so a query and an entry that use different words
for one idea still meet in the index.
"""

from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*|\d+[A-Za-z][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CAMEL_WORD = re.compile(r"[a-z]{2,}[A-Z]|[A-Z][a-z]{2,}[A-Z]")
_STOP = frozenset(
    """a an and are as at be been but by can do does for from has have how i if in into is it its
    no not of on or our so such that the their then there these this to was we were what when where
    which while who will with you your all any each via per than too very also only just use used
    using must should may might get gets got after before""".split()
)

CONCEPTS: dict[str, str] = {
    "nonfinite": r"\bnans?\b|non ?finite|\binf\b|\binfinity\b|isfinite|isnan",
    "hang": r"\bhang(s|ing)?\b|\bhung\b|deadlock\w*|\bstuck\b|timed? ?out|timeouts?|watchdog|\bfreez\w*|"
            r"no progress|heartbeat",
    "oom": r"\boom\b|out ?of ?memory|outofmemory|memory exhaust\w*|cudamalloc|fragmentation",
    "checkpoint": r"checkpoint\w*|state ?dicts?|\bdcp\b|\bresum\w*|missing keys?|unexpected keys?|safetensors|"
                  r"\bckpt\b|save ?/ ?load",
    "gradnorm": r"grad(ient)? ?norms?|\bclip\w*",
    "gradaccum": r"grad(ient)? ?accum\w*|accumulat\w*|micro ?batch\w*",
    "seqparallel": r"sequence ?parallel\w*|\bsp\b|ulysses|all ?to ?all|context ?parallel|\bcp\b",
    "fsdp": r"\bfsdp2?\b|fully ?shard\w*|\bshard\w*|dtensors?|\bhsdp\b|device ?mesh",
    "moe": r"\bmoe\b|\bexperts?\b|\bep\b|routing|\brouter\b|token dispatch",
    "collator": r"collat\w*|\bpacking\b|\bpacked\b|dynamic ?batch\w*|data ?pipeline",
    "generated": r"generat\w*|patchgen|codegen|overwritten",
    "multimodal": r"multi ?modal\w*|\bvlm\b|\bimages?\b|\bvideos?\b|\baudio\b|\bvision\b|\bomni\b",
    "dtype": r"\bdtypes?\b|\bbf16\b|bfloat16|\bfp16\b|float16|float32|\bfp32\b|precision|\bcast(s|ing)?\b",
    "device": r"\bnpu\b|ascend|torch ?\. ?cuda|device ?agnostic|device type",
    "importing": r"\bimport(s|ed|ing)?\b|importerror|modulenotfound\w*|no module named|cannot import",
    "registry": r"regist\w*|model ?type|lookup key",
    "version": r"\bversions?\b|upgrad\w*|\bpinn?(ed|s)?\b|\bbump\w*|downgrad\w*",
    "loss": r"\bloss\w*|ignore ?index|\blabels?\b|cross ?entropy",
    "position": r"position ?ids?|cu ?seq ?lens?|varlen|segment boundar\w*",
    "attention": r"attention|\battn\b|flash ?attn",
    "collective": r"\branks?\b|all ?reduce|all ?gather|reduce ?scatter|collectives?|\bnccl\b|\bgloo\b|\bbarrier\b|"
                  r"world ?size|process ?groups?|torchrun",
    "environment": r"\buv\b|uv ?sync|uv\.lock|\bvenv\b|overlay|\blockfile\b|lock ?file",
    "quality": r"\bruff\b|\blint\w*|pre ?commit",
    "trainer": r"trainers?\b|callbacks?\b|lifecycle|forward ?backward",
    "wrongvalue": r"\bwrong\b|incorrect|silent\w*|mismatch\w*|diverg\w*|differ(s|ent|ence)?\b",
    "sync": r"host ?device sync|implicit sync|\bsynchroni[sz]\w*",
}
_CONCEPT_RES = {name: re.compile(pattern) for name, pattern in CONCEPTS.items()}
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


def _normal(text: str) -> str:
    return re.sub(r"[_\-]+", " ", text.lower())


def concepts(text: str) -> list[str]:
    """The concept names whose phrases occur in text."""
    normal = _normal(text)
    return [name for name, rx in _CONCEPT_RES.items() if rx.search(normal)]


def concept_hits(text: str) -> dict[str, str]:
    """Concept name -> the phrase that triggered it (for `why`)."""
    normal = _normal(text)
    hits: dict[str, str] = {}
    for name, rx in _CONCEPT_RES.items():
        m = rx.search(normal)
        if m:
            hits[name] = m.group(0).strip()
    return hits


def tokens(text: str) -> list[str]:
    """Index tokens: stemmed words plus one concept token per concept mentioned."""
    return words(text) + [CONCEPT_PREFIX + c for c in concepts(text)]
