"""Training-log numbers: a finite grad-norm blow-up or loss spike in a log that raised nothing.

Reads `loss` and `grad_norm` values from the common line formats (HF Trainer dicts,
`key=value`, `key: value`, `| key value |`). A value counts as a spike when it exceeds
SPIKE_FACTOR times the median of the finite values before it (at least MIN_HISTORY of them)
and, for grad norms, is also above an absolute floor (tiny norms jumping are noise).
"""

from __future__ import annotations

import math
import re
from statistics import median

from tools.diagnosis.errors import FoundError
from tools.diagnosis.text import Line

_VALUE = r"['\"]?\s*[:=]?\s*(?:tensor\()?\s*([-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf))"
_SERIES = {
    "grad_norm": re.compile(r"\b(?:grad[_ ]?norm|gradnorm|grad-norm|total[_ ]norm)\b" + _VALUE, re.IGNORECASE),
    "loss": re.compile(r"(?<![\w.])(?:train[_/ ])?loss\b" + _VALUE, re.IGNORECASE),
}
SPIKE_FACTOR = {"grad_norm": 20.0, "loss": 3.0}
FLOOR = {"grad_norm": 100.0, "loss": 0.0}
MIN_HISTORY = 3
# A steady rise is an explosion too: every logged value above the last for RISE_STEPS values,
# ending RISE_FACTOR times higher than it started.
RISE_STEPS = 4
RISE_FACTOR = {"grad_norm": 10.0, "loss": 2.5}


def _explosion(name: str, kind: str, message: str, line: Line) -> FoundError:
    return FoundError(type="GradientExplosion" if name == "grad_norm" else "LossSpike", message=message,
                      line=line.index, rank=line.rank, source="template", category="gradient_explosion",
                      template=f"{name.replace('_', '-')}-{kind}", start=max(0, line.index - 3), end=line.index + 1)


def find_spike(lines: list[Line]) -> FoundError | None:
    """The first spike (or steady rise) of grad_norm, else loss, as a template error of category
    gradient_explosion."""
    for name in ("grad_norm", "loss"):
        history: list[float] = []
        rising = 0
        for line in lines:
            m = _SERIES[name].search(line.text)
            if not m:
                continue
            try:
                value = float(m.group(1))
            except ValueError:
                continue
            if not math.isfinite(value):
                break  # non-finite values are the nonfinite templates' business
            if len(history) >= MIN_HISTORY:
                base = median(history[-20:])
                if base > 0 and value > SPIKE_FACTOR[name] * base and value > FLOOR[name]:
                    return _explosion(name, "spike", f"{name} {value:g} is {value / base:.0f}x the median {base:g} "
                                      "of the previous values", line)
            rising = rising + 1 if history and value > history[-1] else 0
            if rising >= RISE_STEPS - 1:
                start = history[-rising]
                if start > 0 and value >= RISE_FACTOR[name] * start:
                    return _explosion(name, "rise", f"{name} rose {value / start:.1f}x over {rising} logged steps "
                                      f"({start:g} to {value:g})", line)
            history.append(value)
    return None
