"""A failure's two machine-independent identities (DESIGN, "Signature (v3: two levels)").

group = `<version>|<exception type or template>|<first sentence of the message, parameterised>`:
what the bug is. signature = `<group>|<call site>`: where it happens, the innermost in-app
frames as `module:function` (frames.call_site). Parameterising removes what changes between
two occurrences of one bug: numbers, hex addresses, paths, hosts and ports, shapes, sizes,
pids, ranks, timestamps.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from rootcause.tools.observe.diagnosis.models import SIGNATURE_VERSION, group_of

__all__ = ["SIGNATURE_VERSION", "Identity", "first_sentence", "group_of", "identity", "parameterise"]

# Wrappers' components of a parameter's name: DDP's and DataParallel's `module.`, torch.compile's `_orig_mod.`,
# FSDP's and activation checkpointing's, PEFT's `base_model.model.`, `base_layer.`, `modules_to_save.default.`.
WRAPPER_COMPONENTS = (r"module|_orig_mod|_fsdp_wrapped_module|_checkpoint_wrapped_module|base_model\.model|base_layer|"
                      r"modules_to_save\.default|original_module")
WRAPPER_PREFIX = re.compile(rf"^(?:{WRAPPER_COMPONENTS})\.")

_SUBSTITUTIONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r) for p, r in (
        (r"\x1b\[[0-9;]*m", ""),
        # A process group / rank tag names where, not what: `[PG 0 Rank 3]`, `[PG ID 1 PG GUID 1 Rank 5]`.
        (r"\[(?:PG [^\]]*?)?Rank \d+\]:?\s*", ""),
        (r"https?://\S+", "<url>"),
        (r"(?<=[\w.\-])/{2,}(?=[\w.\-])", "/"),  # `/home//u/x.py`: one path, however its parts were joined
        # A command line as a list (`Command '['python', '-u', 'train.py', '--lr', '3e-4']' died`) is the
        # reporter's invocation, not the failure.
        (r"\[\s*(['\"])[^'\"\]]*\1(?=(?:\s*,\s*['\"][^'\"\]]*['\"])*\s*\])(?=[^\]]*['\"]--?\w)"
         r"(?:\s*,\s*(['\"])[^'\"\]]*\2)*\s*\]", "<argv>"),
        # How the model was wrapped (WRAPPER_COMPONENTS), not which parameter it is.
        (rf"(?<![\w])(?:{WRAPPER_COMPONENTS})\.(?=\w)", ""),
        # A model class (`LlamaForCausalLM`, `Gemma3ForConditionalGeneration`) is which model the reporter ran.
        # How the model was wrapped (`state_dict for DistributedDataParallel:`, `'DataParallel' object has no
        # attribute`): one failure whichever wrapper the reporter used.
        (r"\b(?:Distributed)?DataParallel\b|\bFullyShardedDataParallel\b|\bOptimizedModule\b|\bDeepSpeedEngine\b|"
         r"\bFloat16Module\b|\bPeftModel(?:For\w+)?\b", "<wrapper>"),
        (r"\b[A-Z]\w*For(?:CausalLM|ConditionalGeneration|SequenceClassification|TokenClassification|QuestionAnswering"
         r"|MaskedLM|Seq2SeqLM|ImageClassification|PreTraining|MultipleChoice)\b", "<model>"),
        # A LoRA adapter's parameter (`layers.3.mlp.gate_proj.lora_A.default.weight`): which module of which model
        # holds it is the reporter's model, the adapter's own parameter is the failure.
        (r"(?<![\w.<])[A-Za-z_][\w.]*\.(lora_(?:A|B|embedding_A|embedding_B|magnitude_vector))\.[A-Za-z_]\w*",
         r"<module>.\1.<adapter>"),
        (r"torch\.Size\(\[[^\]]*\]\)", "<shape>"),
        (r"\[\s*-?\d+(?:\s*,\s*-?\d+)*\s*,?\s*\]", "<shape>"),
        (r"\(\s*-?\d+(?:\s*,\s*-?\d+)+\s*,?\s*\)", "<shape>"),
        (r"\b\d+(?:x\d+)+\b", "<shape>"),
        (r"\b\d+(?:\.\d+)?\s?(?:[KMGTP]i?B|bytes|B)\b", "<size>"),
        (r"\b\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?\b", "<time>"),
        # A native extension is named by its library (`flash_attn_2_cuda`), not where it was installed; which C++
        # symbol it misses depends on the two versions that disagree, the mismatch is the failure.
        (r"(?<![\w])(?:[A-Za-z]:)?(?:[/\\][\w.\-@+~ ]+)*[/\\]([A-Za-z_][\w\-]*?)(?:\.cpython[\w\-]*|\.abi3)?"
         r"\.(?:so|pyd|dll)(?:\.[\d.]+)?\b", r"<lib \1>"),
        (r"\b_Z[A-Za-z0-9_]{6,}", "<symbol>"),
        # A Windows path may hold spaces in its folders (`D:\lora data\img\a.jpg`).
        (r"(?<![\w])[A-Za-z]:[\\/](?:[^\\/'\"\n,;()<>|]*[\\/])+[^\\/'\"\n,;()<>| ]*", "<path>"),
        (r"(?<![\w])(?:\.{1,2}|~|[A-Za-z]:)?(?:[/\\][\w.\-@+~]+){2,}[/\\]?", "<path>"),
        (r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b", "<addr>"),
        (r"\[[0-9a-fA-F:]+\]:\d+", "<addr>"),
        (r"\b(?:localhost|[\w-]+(?:\.[\w-]+)+):\d{2,5}\b", "<addr>"),
        (r"\b(?:pid|PID)[:= ]\s*\d+", "pid <n>"),
        # Numbers as whole tokens (1.6666666269302368, 3.2e-05, 0x7f3a, a hash); digits inside an identifier
        # (bfloat16, float32, fc2) are part of its name.
        (r"\b0[xX][0-9a-fA-F]+\b", "<n>"),
        (r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{12,}\b", "<n>"),
        (r"(?<![\w])(?<!\d\.)-?\d+(?:\.\d+)*(?:[eE][-+]?\d+)?", "<n>"),
        (r"\s+", " "),
    )
)
# PyTorch's "(when checking argument for argument X in method Y)" names the operation: it stays.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z]|\((?!when checking))")


_TRAILING = re.compile(r"[\s.!?:;,]+$")  # `... cpu!` and `... cpu` are one message


def parameterise(text: str) -> str:
    for pattern, replacement in _SUBSTITUTIONS:
        text = pattern.sub(replacement, text)
    text = _TRAILING.sub("", text.strip())
    if text.endswith("<path>") and text.count("(") == text.count(")") + 1:
        text += ")"  # a paste cut inside the path a message ends with: `... (<path>` is `... (<path>)`
    return text


_WRAPPED = re.compile(r"[\w,]$")  # a line that stops mid-sentence (no closing punctuation)


def first_sentence(message: str) -> str:
    """The first sentence of a message; a first line ending in ':' takes its first detail line with it."""
    # A Markdown paste wraps each line in backticks (`RuntimeError: ...`): they are not the message.
    lines = [ln.strip().strip("`").strip() for ln in message.strip().splitlines() if ln.strip().strip("`").strip()]
    if not lines:
        return ""
    head, more = lines[0], 1
    while more < min(len(lines), 4) and (head.count("(") > head.count(")") or (_WRAPPED.search(head)
                                          and lines[more][:1].islower())):
        head = f"{head} {lines[more]}"  # a parenthesis or a sentence the log wrapped onto the next line
        more += 1
    if head.endswith(":") and len(lines) > more:
        detail = lines[more]
        head = f"{head} {detail.split(':', 1)[0]}"
        if _EMPTY_TARGET.search(detail):
            head += " into an empty parameter"
    head = _SENTENCE_END.split(head, 1)[0]
    return _CALLEE_CLASS.sub(r"<cls>.\1(", _balanced(head))[:1000]


# Python names the callee first ("GemmaModel.forward() got an unexpected keyword argument"): its class is
# the reporter's model, the method and the argument are the bug.
_CALLEE_CLASS = re.compile(r"^(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)\((?=\) )")


# A state dict loaded into a parameter that holds nothing here (ZeRO-3 partitioned, not materialised) is not a width
# mismatch: `... the shape in current model is torch.Size([0])`.
_EMPTY_TARGET = re.compile(r"shape in current model is torch\.Size\(\[0?\]\)")


_FENCE_END = re.compile(r"\s*`{3,}\s*$")


def _balanced(head: str) -> str:
    """Without a quote left open at the end (a Markdown backtick, a JSON string's closing quote) nor a Markdown
    fence glued to the line."""
    head = _FENCE_END.sub("", head)
    while head and head[-1] in "`\"" and head.count(head[-1]) % 2 == 1:
        head = head[:-1].rstrip()
    return head


class Identity(NamedTuple):
    group: str
    """What the bug is: version, type or template, parameterised first sentence."""
    signature: str
    """Where it happens: the group and the call site."""


def identity(kind: str, message: str, call_site: list[str]) -> Identity:
    """Both identities of a failure; call_site is innermost last, as `module:function` (frames.call_site)."""
    group = "|".join([SIGNATURE_VERSION, kind or "unknown", parameterise(first_sentence(message))[:240]])
    return Identity(group, f"{group}|{'>'.join(call_site)}")

