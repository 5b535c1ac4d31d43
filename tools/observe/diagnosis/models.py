"""The Diagnosis data model shared by reproduce, diagnose_log and every tool that reads a failure."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

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


class CollectiveCall(BaseModel):
    """One flight-recorder entry: `collective_seq_id`, the op (`all_reduce`), input sizes, state."""
    seq: int
    op: str
    sizes: list[list[int]] = Field(default_factory=list)
    state: str | None = None

    def describe(self) -> str:
        shapes = ", ".join("x".join(str(n) for n in size) for size in self.sizes)
        return f"{self.op}({shapes})" if shapes else self.op


class RankCollectives(BaseModel):
    """A rank's place in one process group: the last collective it completed and the last it entered."""
    rank: int
    group: str
    last_completed: CollectiveCall | None = None
    last_entered: CollectiveCall | None = None
    node: str | None = None
    call_site: str | None = None


class CollectiveMismatch(BaseModel):
    """The first collective of a group the ranks disagree on and the ranks that caused it."""
    group: str
    seq: int
    ops: dict[str, str] = Field(default_factory=dict)
    missing_ranks: list[int] = Field(default_factory=list)
    culprit_ranks: list[int] = Field(default_factory=list)


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

    def one_line(self) -> str:
        what = f"{self.exception_type}: {self.message}" if self.exception_type else self.message
        where = f" at {self.location}" if self.location else ""
        return f"[{self.category}] {what[:300]}{where}"
