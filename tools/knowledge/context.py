"""The run facts that weigh the pitfall ranking: backend, device, launcher, distributed, exit.

Facts come from the agent (check_constraints' `facts`), the session's evidence (the reproduced run's
command, exit, interpreter and output) and the symptom's own words (tools/knowledge/data/facts.yaml). A fact
is known only when one value is named; a pitfall whose `requires` a known fact contradicts is dropped (NCCL's
network interface on a gloo job), one whose requirements all hold weighs more, and on a run that exited 0 the
pitfalls of loud failures (OOM, crashes, shape errors) weigh less.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from rootcause.tools.vocabulary.words import symptom_hits

DATA = "rootcause.tools.knowledge.data"


class RunFacts(BaseModel):
    """What is known about the failing run; None is unknown."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["nccl", "gloo", "mpi"] | None = Field(None, description="Process-group backend.")
    device: Literal["cuda", "cpu"] | None = Field(None, description="Where the model runs.")
    launcher: Literal["local", "torchrun", "slurm", "deepspeed", "accelerate", "mp_spawn"] | None = None
    distributed: bool | None = Field(None, description="Several ranks through torch.distributed.")
    exit: Literal["zero", "nonzero"] | None = Field(None, description="How the run ended.")

    def known(self) -> dict[str, str | bool]:
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def merged(self, other: RunFacts) -> RunFacts:
        """These facts, with other's filling what these do not know."""
        return RunFacts(**{**other.known(), **self.known()})

    def describe(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.known().items()) or "none known"


class ExitZero(BaseModel):
    loud_categories: tuple[str, ...]
    factor: float = Field(ge=0, le=1)


class ContextRules(BaseModel):
    facts: dict[str, dict[str, tuple[str, ...]]]
    exit_zero: ExitZero
    satisfied_factor: float = Field(1.25, ge=1, le=3)


@cache
def rules() -> ContextRules:
    import yaml

    return ContextRules.model_validate(yaml.safe_load(resources.files(DATA).joinpath("facts.yaml").read_text()))


@cache
def _patterns() -> dict[str, dict[str, re.Pattern[str]]]:
    return {fact: {str(value).lower(): re.compile("|".join(f"(?:{p})" for p in pats), re.IGNORECASE | re.MULTILINE)
                   for value, pats in values.items()}
            for fact, values in rules().facts.items()}


def facts_from_text(text: str) -> RunFacts:
    """The facts a text names unambiguously (a symptom, a command line, a run's output)."""
    found: dict[str, object] = {}
    for fact, values in _patterns().items():
        named = [value for value, pattern in values.items() if pattern.search(text)]
        if len(named) == 1:
            found[fact] = named[0] == "true" if fact == "distributed" else named[0]
    if "exitzero" in symptom_hits(text):
        found["exit"] = "zero"
    if found.get("launcher") in ("torchrun", "slurm", "deepspeed", "accelerate", "mp_spawn"):
        found.setdefault("distributed", True)
    return RunFacts.model_validate(found)


def weight(requires: dict[str, tuple[str | bool, ...]], category: str, facts: RunFacts) -> float | None:
    """The factor a pitfall's score takes under these facts; None drops it (a known fact contradicts it)."""
    known = facts.known()
    factor = 1.0
    for fact, allowed in requires.items():
        value = known.get(fact)
        if value is not None and value not in allowed and str(value) not in {str(a).lower() for a in allowed}:
            return None
    specific = [f for f in requires if f != "exit"]  # how a run ended says little about which cause it has
    if specific and all(f in known for f in specific):
        factor *= rules().satisfied_factor
    loud = rules().exit_zero
    if facts.exit == "zero" and category in loud.loud_categories:
        factor *= loud.factor
    return factor
