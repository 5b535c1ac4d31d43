"""Binary search over an ordered list whose first item is good and last is bad, with git bisect's skip."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["good", "bad", "skip"]


@dataclass
class SearchResult:
    last_good: int
    first_bad: int
    skipped: list[int] = field(default_factory=list)

    @property
    def ambiguous(self) -> list[int]:
        """Skipped items between last_good and first_bad: any of them may be the first bad one."""
        return [i for i in self.skipped if self.last_good < i < self.first_bad]


def steps_left(low: int, high: int) -> int:
    return math.ceil(math.log2(high - low)) if high - low > 1 else 0


async def bisect(count: int, judge: Callable[[int], Awaitable[Verdict]]) -> SearchResult:
    """Items 0 (known good) and count-1 (known bad) are not judged again; the middle ones are."""
    low, high = 0, count - 1
    skipped: set[int] = set()
    while high - low > 1:
        middle = (low + high) / 2
        candidates = [i for i in range(low + 1, high) if i not in skipped]
        if not candidates:
            break
        # Nearest to the middle; on a tie the lower index, so skips walk outwards evenly.
        pick = min(candidates, key=lambda i: (abs(i - middle), i))
        verdict = await judge(pick)
        if verdict == "good":
            low = pick
        elif verdict == "bad":
            high = pick
        else:
            skipped.add(pick)
    return SearchResult(low, high, sorted(skipped))
