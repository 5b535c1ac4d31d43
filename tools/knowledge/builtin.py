"""The protocol's common pitfalls and domain checklists, built in so a bare repository gets them too.

A pitfall applies when the symptom mentions one of its concepts (vocabulary.CONCEPTS),
when the diagnosis category is one of its categories, or (generated patches) when a
changed file hits a generated-path guard.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel


@dataclass(frozen=True)
class Pitfall:
    name: str
    title: str
    text: str
    concepts: frozenset[str]
    categories: frozenset[str] = frozenset()


PITFALLS: tuple[Pitfall, ...] = (
    Pitfall(
        "fsdp2_grad_accumulation", "FSDP2 with gradient accumulation",
        "Accumulate over micro-batches in the full (unsharded) gradient and reduce-scatter once per "
        "optimizer step (FSDP2: set_requires_gradient_sync(False) until the last micro-batch). Summing "
        "gradients that were already sharded, or scaling the loss inconsistently per micro-batch, gives "
        "a wrong update with no error.",
        frozenset({"gradaccum"}), frozenset({"gradient_explosion"}),
    ),
    Pitfall(
        "dcp_checkpoint_keys", "DCP checkpoint keys",
        "A distributed checkpoint loads by key: the state-dict keys at load time must be exactly the keys "
        "at save time. A renamed parameter, a different wrapper prefix (_orig_mod., compile or FSDP "
        "wrappers) or a changed module tree fails the load or, with non-strict loading, leaves weights at "
        "their initial values. Compare the key sets (inspect_checkpoint with compare_to).",
        frozenset({"checkpoint"}), frozenset({"checkpoint_mismatch"}),
    ),
    Pitfall(
        "multimodal_collator", "Collator and dataset modality",
        "The data collator must match the data: a text-only collator given image, video or audio samples, "
        "or a multimodal collator given plain text, crashes or silently drops fields. Check which collator "
        "the config builds for this dataset before suspecting the model.",
        frozenset({"collator", "multimodal"}),
    ),
    Pitfall(
        "sp_gather_before_loss", "Sequence parallel: gather before the loss",
        "Under sequence parallelism each rank holds a slice of the sequence. Gather the outputs, or reduce "
        "the loss over the sequence-parallel group, before the loss is final; a loss computed on one "
        "slice has a plausible but wrong value. Masks, labels and position ids must be sliced the same way.",
        frozenset({"seqparallel"}),
    ),
    Pitfall(
        "generated_model_patches", "Generated model patches",
        "Generated model code is rebuilt from its spec: change the spec or the patch source and regenerate. "
        "Hand edits to generated files disappear at the next regeneration, and a generated folder that is "
        "stale against the installed library version is itself a source of failures (check_constraints "
        "with check_codegen=true runs the project's codegen check).",
        frozenset({"generated"}), frozenset({"import_error"}),
    ),
)

CHECKLISTS: dict[str, tuple[str, ...]] = {
    "distributed_checklist": (
        "Does one GPU give the same loss as many, within the dtype's tolerance?",
        "Is every parameter sharded as the parallel plan says, and do the plan's names still match the model?",
        "Is gradient clipping computed on the full gradient, across every rank that holds a shard?",
        "Sequence parallel: are masks and position ids split identically on every rank, and outputs gathered "
        "before the loss?",
        "MoE: are expert assignments the same across runs with one seed?",
        "Does the error appear on every rank or on one (the diagnosis' ranks)?",
    ),
    "numerical_checklist": (
        "Is there a reference (earlier commit, other implementation, 1-GPU run) that gives the same numbers?",
        "Were all weights loaded (no missing or unexpected keys in the load log)?",
        "Is the comparison fair: same inputs, dtype, parallel layout and seed?",
        "Could a float32 / bfloat16 difference on one path explain it?",
        "Are NaN or Inf values hidden by masking, clamping, nan_to_num or skipped steps?",
    ),
}
_DISTRIBUTED = frozenset({"hang", "collective", "fsdp", "seqparallel", "moe", "gradaccum"})
_NUMERICAL = frozenset({"nonfinite", "gradnorm", "wrongvalue", "dtype", "loss"})
_DISTRIBUTED_CATEGORIES = frozenset({"hang", "distributed_error"})
_NUMERICAL_CATEGORIES = frozenset({"nonfinite", "gradient_explosion", "checkpoint_mismatch", "dtype_mismatch"})


class PitfallMatch(BaseModel):
    name: str
    title: str
    text: str
    why: str


class Checklist(BaseModel):
    name: str
    why: str
    items: list[str]


def applicable_pitfalls(hits: dict[str, str], category: str | None, guard_hit: bool) -> list[PitfallMatch]:
    """hits: concept -> the phrase of the symptom that mentions it."""
    out = []
    for pitfall in PITFALLS:
        reasons = [f"symptom mentions {c} ('{hits[c]}')" for c in sorted(pitfall.concepts & hits.keys())]
        if category and category in pitfall.categories:
            reasons.append(f"diagnosis category {category}")
        if guard_hit and pitfall.name == "generated_model_patches":
            reasons.append("a changed file is under a generated-path guard")
        if reasons:
            out.append(PitfallMatch(name=pitfall.name, title=pitfall.title, text=pitfall.text, why="; ".join(reasons)))
    return out


def applicable_checklists(hits: dict[str, str], category: str | None, named: list[str]) -> list[Checklist]:
    out = []
    for name, concepts, categories in (("distributed_checklist", _DISTRIBUTED, _DISTRIBUTED_CATEGORIES),
                                       ("numerical_checklist", _NUMERICAL, _NUMERICAL_CATEGORIES)):
        reasons = [f"{c} ('{hits[c]}')" for c in sorted(concepts & hits.keys())]
        if category in categories:
            reasons.append(f"category {category}")
        if name in named:
            reasons.append("named by the session's triage")
        if reasons:
            out.append(Checklist(name=name, why="; ".join(reasons), items=list(CHECKLISTS[name])))
    return out
