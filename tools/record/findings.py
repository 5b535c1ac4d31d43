"""Typed evidence of the search tools: the three bisects, compare_setups, analyze_training_log, inspect_checkpoint.

Each model keeps the keys its tool has always recorded, so older sessions still read, and renders
its own entry in the session report.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from rootcause.tools.core.results import bounded
from rootcause.tools.observe.evidence.metric_yardstick import MetricReading
from rootcause.tools.record.tool_evidence import ToolEvidence, register


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Tested(_Loose):
    """One tested commit or version of a bisect."""

    short: str = ""
    version: str = ""
    outcome: str = "?"
    outcome_reason: str | None = None
    error: str | None = None
    signature: str | None = None
    log_path: str | None = None
    yardstick: MetricReading | None = None

    def label(self) -> str:
        return self.short or self.version or "?"

    def value(self) -> str:
        """' (val_acc 0.744 at step 30)' when the metric yardstick read a value."""
        return f" ({self.yardstick.brief()})" if self.yardstick is not None and self.yardstick.value is not None \
            else ""


class CommitBrief(_Loose):
    sha: str = ""
    short: str = ""
    subject: str = ""
    author: str | None = None
    author_date: str | None = None
    diff_stat: str | None = None


def _tested_lines(tested: list[Tested]) -> list[str]:
    if not tested:
        return []
    lines = ["- Tested: " + ", ".join(f"{t.label()} {t.outcome}{t.value()}" for t in tested)]
    lines += [f"- Skipped {t.label()}: {t.outcome_reason}" for t in tested if t.outcome == "skip"][:5]
    return lines


@register
class BisectCommitsEvidence(ToolEvidence):
    tool: ClassVar[str] = "bisect_commits"

    good: str = ""
    bad: str = ""
    status: str = "?"
    first_bad_commit: CommitBrief | None = None
    last_good: str | None = None
    tested: list[Tested] = Field(default_factory=list)
    ambiguous: list[str] = Field(default_factory=list)
    via_merges: list[str] = Field(default_factory=list)
    detail: str = ""
    reason: str | None = None
    interpreter_note: str | None = None

    def render(self) -> str:
        lines = [f"**bisect_commits {self.good}..{self.bad}: {self.status}** — {self.detail or self.reason or ''}"]
        c = self.first_bad_commit
        if c is not None:
            lines.append(f"- First bad commit: {c.short} {c.subject} ({c.author}, {c.author_date})")
            if c.diff_stat:
                lines.append(bounded(c.diff_stat, 1500))
        if self.via_merges:
            lines.append(f"- Via merges: {', '.join(self.via_merges)}")
        if self.ambiguous:
            lines.append(f"- Ambiguous (skipped): {', '.join(self.ambiguous)}")
        if self.interpreter_note:
            lines.append(f"- Interpreter: {self.interpreter_note}")
        return "\n".join(lines + _tested_lines(self.tested))


@register
class BisectVersionsEvidence(ToolEvidence):
    tool: ClassVar[str] = "bisect_versions"

    package: str = ""
    good: str = ""
    bad: str = ""
    status: str = "?"
    first_bad: str | None = None
    last_good: str | None = None
    tested: list[Tested] = Field(default_factory=list)
    candidates: list[str] = Field(default_factory=list)
    left_out: list[str] = Field(default_factory=list)
    ambiguous: list[str] = Field(default_factory=list)
    builds: int = 0
    fresh_builds: int = 0
    detail: str = ""
    reason: str | None = None
    failed_log: str | None = None

    def render(self) -> str:
        lines = [f"**bisect_versions {self.package} {self.good}..{self.bad}: {self.status}** — "
                 f"{self.detail or self.reason or ''}"]
        if self.first_bad:
            lines.append(f"- First bad: {self.package}=={self.first_bad} (last good {self.last_good})")
        lines += _tested_lines(self.tested)
        lines.append(f"- Builds: {self.builds} ({self.fresh_builds} fresh) for {len(self.candidates)} candidates")
        if self.left_out:
            lines.append("- Left out: " + ", ".join(self.left_out[:10]))
        if self.failed_log:
            lines.append(f"- Log of the failing step: {self.failed_log}")
        return "\n".join(lines)


class EnvSideBrief(_Loose):
    package_version: str | None = None
    project: str | None = None
    outcome: str = "not_run"
    outcome_reason: str | None = None
    error: str | None = None
    matches_expected: bool | None = None
    cached: bool = False
    signature: str | None = None
    log_path: str | None = None
    yardstick: MetricReading | None = None

    def line(self, name: str, package: str) -> str:
        if self.outcome in ("skip", "not_run"):
            what = self.outcome + (f" — {self.outcome_reason}" if self.outcome_reason else "")
        else:
            what = self.outcome + (f" — {self.error}" if self.error else "")
            what += " [not the expected failure]" if self.matches_expected is False else ""
        project = f"; project {self.project}" if self.project else ""
        if self.yardstick is not None and self.yardstick.value is not None:
            what += f" ({self.yardstick.brief()})"
        return (f"- {name}: {package}=={self.package_version or '?'}{project} → {what}"
                + (" (cached)" if self.cached else ""))


class Change(_Loose):
    package: str = ""
    from_: str | None = Field(None, alias="from")
    to: str | None = None


@register
class BisectEnvEvidence(ToolEvidence):
    tool: ClassVar[str] = "bisect_env"

    package: str = ""
    version: str = ""
    verdict: str = "?"
    detail: str = ""
    reason: str | None = None
    env_a: EnvSideBrief = Field(default_factory=EnvSideBrief)
    env_b: EnvSideBrief = Field(default_factory=EnvSideBrief)
    reconciled: list[Change] = Field(default_factory=list)
    failed_step: str | None = None
    failed_log: str | None = None

    def render(self) -> str:
        lines = [f"**bisect_env {self.package}=={self.version}: {self.verdict}** — {self.detail or self.reason or ''}",
                 self.env_a.line("A", self.package), self.env_b.line("B", self.package)]
        if self.reconciled:
            lines.append("- Reconciled: " + ", ".join(f"{r.package} {r.from_}→{r.to}" for r in self.reconciled))
        if self.failed_log:
            lines.append(f"- Log of the failing step ({self.failed_step or 'setup'}): {self.failed_log}")
        return "\n".join(lines)


class SideBrief(_Loose):
    tree: str = ""
    ref: str | None = None
    python: str | None = None
    run_id: str | None = None
    command: str | None = None

    def text(self) -> str:
        parts = [self.ref or self.tree]
        if self.run_id:
            parts.append(f"run {self.run_id}")
        if self.python:
            parts.append(self.python)
        return ", ".join(parts)


@register
class CompareSetupsEvidence(ToolEvidence):
    tool: ClassVar[str] = "compare_setups"

    summary: dict[str, int] = Field(default_factory=dict)
    """Differences per kind."""
    total: int = 0
    suspect: list[str] = Field(default_factory=list)
    """The suspect differences, as '[kind] key' (at most 30)."""
    suspect_count: int | None = None
    full_list_path: str | None = None
    good: SideBrief = Field(default_factory=SideBrief)
    bad: SideBrief = Field(default_factory=SideBrief)

    def render(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.summary.items() if v) or "none"
        text = (f"compare_setups: good ({self.good.text()}) vs bad ({self.bad.text()}): "
                f"{self.total} difference(s) ({counts}), "
                f"{self.suspect_count if self.suspect_count is not None else len(self.suspect)} suspect.")
        if self.suspect:
            text += "\n\nSuspect:\n" + "\n".join(f"- {s}" for s in self.suspect[:15])
        if self.full_list_path:
            text += f"\n\nFull list: {self.full_list_path}"
        return text


class SpikeBrief(_Loose):
    step: int = 0
    metric: str = ""
    value: float | str | None = None
    factor: float | None = None

    def text(self) -> str:
        factor = f" ({self.factor:.1f}x the rolling median)" if self.factor is not None else ""
        return f"{self.metric} {self.value} at step {self.step}{factor}"


class LrBrief(_Loose):
    early_max: float | None = None
    step: int = 0
    value: float | None = None
    ratio: float | None = None
    still_rising: bool = False


@register
class TrainingLogEvidence(ToolEvidence):
    tool: ClassVar[str] = "analyze_training_log"

    path: str = ""
    steps: int = 0
    first_nonfinite_step: int | None = None
    spike_count: int = 0
    largest_spike: SpikeBrief | None = None
    spikes_before_nonfinite: list[SpikeBrief] = Field(default_factory=list)
    spikes: list[SpikeBrief] = Field(default_factory=list)
    lr: LrBrief | None = None
    compare_to: str | None = None
    rtol: float | None = None
    first_divergent_step: int | None = None
    series_path: str | None = None
    plot_path: str | None = None

    def render(self) -> str:
        nonfinite = (f"first non-finite at step {self.first_nonfinite_step}" if self.first_nonfinite_step is not None
                     else "no non-finite values")
        lines = [f"**{self.path}**: {self.steps} steps, {nonfinite}, {self.spike_count} spike(s)."]
        if self.largest_spike is not None:
            lines.append(f"- Largest spike: {self.largest_spike.text()}")
        if self.spikes_before_nonfinite:
            lines.append("- Spikes before the first non-finite step: "
                         + "; ".join(s.text() for s in self.spikes_before_nonfinite[-6:]))
        if self.lr is not None:
            rising = ", still rising" if self.lr.still_rising else ""
            lines.append(f"- lr {self.lr.value} at step {self.lr.step}: {self.lr.ratio}x its early maximum "
                         f"{self.lr.early_max}{rising}")
        if self.compare_to:
            where = (f"first diverges at step {self.first_divergent_step}" if self.first_divergent_step is not None
                     else "no divergence")
            lines.append(f"- Against {self.compare_to} (rtol {self.rtol}): {where}")
        if self.series_path:
            lines.append(f"- Series: {self.series_path}")
        return "\n".join([*lines, "", *self.attachments()] if self.plot_path else lines)

    def attachments(self) -> list[str]:
        return [f"![analyze_training_log plot]({self.plot_path})"] if self.plot_path else []


class RenameBrief(_Loose):
    from_: str = Field("", alias="from")
    to: str = ""


class CheckpointGroupBrief(_Loose):
    group: str = "?"
    keys: list[str] = Field(default_factory=list)
    tensors: int = 0
    entries: int = 0
    not_restored: int | None = None
    missing: int | None = None


@register
class CheckpointEvidence(ToolEvidence):
    tool: ClassVar[str] = "inspect_checkpoint"

    path: str = ""
    format: str = "?"
    tensors: int = 0
    parameters: int = 0
    dtypes: dict[str, int] = Field(default_factory=dict)
    values_checked: bool = False
    nonfinite_tensors: int = 0
    nonfinite: list[str] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    likely_renames: list[RenameBrief] = Field(default_factory=list)
    load_into: str | None = None
    groups: list[CheckpointGroupBrief] = Field(default_factory=list)

    def render(self) -> str:
        dtypes = ", ".join(f"{k}: {v}" for k, v in sorted(self.dtypes.items())) or "no tensors"
        lines = [f"**{self.format} checkpoint {self.path}**: {self.tensors} tensors, {self.parameters:,} parameters "
                 f"({dtypes})."]
        if not self.values_checked:
            lines.append("- Values not read: NaN/Inf not checked.")
        elif self.nonfinite_tensors:
            lines.append(f"- {self.nonfinite_tensors} tensor(s) with NaN/Inf: {', '.join(self.nonfinite[:10])}")
        else:
            lines.append("- No NaN/Inf.")
        if len(self.groups) > 1:
            lines.append("- Groups: " + ", ".join(f"{g.group} {g.tensors} tensors" for g in self.groups))
        if self.load_into:
            lost = ", ".join(f"{g.group} {g.not_restored}" for g in self.groups if g.not_restored)
            lacking = ", ".join(f"{g.group} {g.missing}" for g in self.groups if g.missing)
            lines.append(f"- Load into `{self.load_into}`: {self.counts.get('unexpected', 0)} stored entries not "
                         f"restored{f' ({lost})' if lost else ''}, {self.counts.get('missing', 0)} expected ones "
                         f"missing{f' ({lacking})' if lacking else ''}")
        differences = {k: v for k, v in self.counts.items() if v}
        if differences and not self.load_into:
            lines.append("- Against the reference: " + ", ".join(f"{k} {v}" for k, v in differences.items()))
        if self.likely_renames:
            lines.append("- Likely renames: " + ", ".join(f"{r.from_} → {r.to}" for r in self.likely_renames[:10]))
        return "\n".join(lines)


def dump(evidence: ToolEvidence) -> dict[str, Any]:
    """The evidence as session data (aliases such as `from` kept, as the tools always wrote them)."""
    return evidence.model_dump(mode="json", by_alias=True)
