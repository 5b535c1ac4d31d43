"""What the flight-recorder analysis says: per rank and group, and the first collective the ranks disagree on.

The three models Diagnosis carries (`collectives`, `mismatch`) live here, below diagnosis/, so the analysis
needs nothing of the diagnosis engine; diagnosis/models.py re-exports them.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


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
    kind: str = ""
    """op | sizes | missing | stalled (entered, never completed what the peers completed) | no_dump."""
