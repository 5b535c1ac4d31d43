"""The Diagnosis data model shared by reproduce, diagnose_log and every tool that reads a failure."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator
from rootcause.tools.observe.collectives.models import CollectiveCall, CollectiveMismatch, RankCollectives

__all__ = ["SIGNATURE_VERSION", "CollectiveCall", "CollectiveMismatch", "Diagnosis", "Frame", "RankCollectives",
           "RankInfo", "StackSummary", "group_of"]

SIGNATURE_VERSION = "v3"


def group_of(signature: str) -> str:
    """The group a signature begins with (`v3|type|sentence|call site`: the call site never holds a `|`)."""
    return signature.rsplit("|", 1)[0] if signature.count("|") >= 3 else signature


class Frame(BaseModel):
    file: str
    line: int | None = None
    function: str | None = None
    in_project: bool = False


class RankInfo(BaseModel):
    outcome: str
    first_error: str | None = None
    node: str | None = None
    """The host the rank ran on, when the log says (Slurm's `srun: error: n2: task 1: ...`)."""


class StackSummary(BaseModel):
    pid: int | None = None
    rank: int | None = None
    frames: list[str] = Field(default_factory=list)
    """Innermost last, as `module:function (file:line)`."""
    collective: str | None = None
    """The collective the process waits in (all_reduce, barrier, ...), when one is on its stack."""
    user_frame: str | None = None
    """The innermost frame inside the root (`file:line`, relative to the root): the project's line waiting."""
    node: str | None = None
    """The Slurm node the process ran on (a run through launcher='slurm')."""
    call_site: str | None = None
    """The innermost user frame (`module:function`, any machine); a library frame when the stack has none."""

    def describe(self) -> str:
        """`rank 1: waits in all_reduce at train.py:42 (innermost: ...)`: the project's line first."""
        who = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}" if self.pid else "process"
        who += f" on {self.node}" if self.node else ""
        waits = f"waits in {self.collective}" if self.collective else "stands"
        place = self.user_frame or self.call_site
        at = f" at {place}" if place else ""
        inner = self.frames[-1] if self.frames else "?"
        return f"{who}: {waits}{at} (innermost: {inner})"


class Diagnosis(BaseModel):
    category: str
    exception_type: str | None = None
    message: str = ""
    keywords: list[str] = Field(default_factory=list)
    signature: str
    group: str = ""
    """What the bug is (signature without its call site); DESIGN's "Signature (v3: two levels)"."""
    evidence: list[str] = Field(default_factory=list)
    """What the diagnosis rests on: exception | template | metrics | stack_dump | keywords."""
    location: str | None = None
    frames: list[Frame] = Field(default_factory=list)
    ranks: dict[str, RankInfo] = Field(default_factory=dict)
    stacks: list[StackSummary] = Field(default_factory=list)
    failed_tests: list[str] = Field(default_factory=list)
    excerpt: str = ""
    collectives: list[RankCollectives] = Field(default_factory=list)
    mismatch: CollectiveMismatch | None = None

    @model_validator(mode="after")
    def _group(self) -> Diagnosis:
        if not self.group:
            self.group = group_of(self.signature)
        return self

    def basis(self) -> str:
        """What a diagnosis without a read error rests on, said before its message ('' when an exception, a
        known error line or a metric series was read, or nothing but the exit status): a traceback from a guess."""
        if {"exception", "template", "metrics", "flight_recorder"} & set(self.evidence):
            return ""  # the metrics' message says which series and how many points; the recorder's, which ranks
        if "stack_dump" in self.evidence:
            return "from the stack dumps alone: "
        return "from keywords alone: " if "keywords" in self.evidence else ""

    def one_line(self) -> str:
        what = f"{self.exception_type}: {self.message}" if self.exception_type else self.message
        return f"[{self.category}] {self.basis()}{what[:300]}{self.where(what[:300])}"

    def where(self, said: str) -> str:
        """` at <location>` after a line, unless its first sentence names the place already (a flight-recorder
        fact ends with the culprit's line)."""
        if not self.location or said.split("\n", 1)[0].rstrip().endswith(self.location):
            return ""
        return f" at {self.location}"
