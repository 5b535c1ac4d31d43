"""One run observed: the outcome a verdict can rely on, and why.

A run FAILS when its exit code says so, or when it exited 0 but its output shows a failure the
diagnosis recognises: a non-finite loss or grad norm in its metric series (rootcause.tools.observe.logs.metrics),
a fatal error the diagnosis categorises (a killed worker, an OOM, a NCCL / gloo error), or a
traceback that ends the output (a launcher that swallowed its child's failure). `outcome_reason`
says which, e.g. "exit 0, but loss is NaN from step 25".
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr, model_validator
from rootcause.tools.observe.diagnosis import Diagnosis, diagnose_run
from rootcause.tools.observe.diagnosis import signature as sig
from rootcause.tools.observe.diagnosis.models import group_of
from rootcause.tools.observe.evidence.expect import Yardstick, matches
from rootcause.tools.observe.evidence.metric_yardstick import MetricReading, MetricYardstick, read_run
from rootcause.tools.observe.logs.traceback_lines import TRACEBACK
from rootcause.tools.run import Outcome, RunRecord, read_output

RunOutcome = Outcome | Literal["inconclusive"]
"""A run's outcome; inconclusive: it exited 0 but lacks the metric its yardstick judges (never a pass)."""

# pytest's own exit codes that mean "the tests did not run", not "a test failed".
# (2, interrupted, is left out: a collection error is a real failure of the code under test.)
PYTEST_NOT_RUN = {3: "pytest internal error", 4: "pytest usage error", 5: "pytest collected no tests"}
_FATAL_AT_EXIT_0 = {"nonfinite", "host_oom", "cuda_oom", "crash", "cuda_error", "distributed_error", "hang"}
# A cheap first look at head and tail: only output that could show a failure is read in full.
_SUSPECT = re.compile(r"\bnan\b|\binf(?:inity)?\b|Traceback|Error|Killed|SIG[A-Z]{2,}|exitcode|Fatal|Root Cause",
                      re.IGNORECASE)
_TRACEBACK_TAIL_LINES = 40
_NONFINITE_METRICS = re.compile(r"loss|norm", re.IGNORECASE)
_PY_PATH = re.compile(r"(?<![\w./])((?:/|(?:\.\./)+)[^\s\"'():,<>]+\.py)\b")  # absolute, or ../ (pytest's)


class Observation(BaseModel):
    """One run of a command, reduced to what a verdict needs (the full log stays on disk)."""

    run_id: str
    outcome: RunOutcome
    outcome_reason: str = Field(description="Why this outcome: the exit code, a timeout, or what the output of a run "
                                            "that exited 0 shows ('exit 0, but loss is NaN from step 25').")
    exit_code: int | None = None
    signal: int | None = None
    duration_s: float
    timed_out: Literal["wall", "idle"] | None = None
    signature: str | None = Field(None, description="The failure's signature; null for a passing run.")
    group: str | None = None
    category: str | None = Field(None, description="The failure's category (taxonomy); null for a passing run.")
    error: str | None = Field(None, description="The diagnosis in one line, for a failing run.")
    matches_expected: bool | None = Field(
        None, description="Whether the failure shows the expected one (expect, else the session's symptom); null "
                          "for a passing run or when nothing was expected.")
    match_reason: str | None = None
    problem: str | None = Field(None, description="Why this run cannot decide anything (the tests did not run).")
    outside_root: list[str] = Field(
        default_factory=list, description="Files of the project's own packages that the run's tracebacks name "
                                          "outside the root (another checkout, a stale install).")
    interpreter: str | None = Field(None, description="The interpreter the run's `python` resolved to.")
    interpreter_note: str | None = Field(None, description="Said when it is not the project's own interpreter.")
    launcher: Literal["local", "slurm"] = "local"
    job_id: str | None = Field(None, description="The Slurm job id (launcher slurm).")
    rank_nodes: dict[str, str] = Field(default_factory=dict, description="Rank -> the node it ran on (slurm).")
    log_path: str = Field(description="The full log, relative to the root.")
    log_uri: str = Field(description="The full log as an MCP resource.")
    yardstick: MetricReading | None = Field(None, description="The metric / reference yardstick's reading: the "
                                                              "value read, its step and log line, the verdict.")

    _diagnosis: Diagnosis | None = PrivateAttr(default=None)
    _record: RunRecord | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _group(self) -> Observation:
        if self.signature and not self.group:
            self.group = group_of(self.signature)  # a record written before v3 carried the signature alone
        return self

    @property
    def failed(self) -> bool:
        return self.outcome not in ("pass", "inconclusive")

    @property
    def diagnosis(self) -> Diagnosis | None:
        return self._diagnosis

    @property
    def record(self) -> RunRecord | None:
        return self._record

    def code(self) -> str:
        if self.signal:
            return f"signal {self.signal}"
        return f"exit {self.exit_code}"

    def one_line(self) -> str:
        text = f"{self.outcome} ({self.code()}, {self.duration_s:.1f}s)"
        if self.timed_out:
            text += f" — {self.timed_out} timeout"
        if self.problem:
            text += f" — {self.problem}"
        elif self.failed and self.outcome_reason.startswith("exit 0, but"):
            text += f" — {self.outcome_reason}"
        elif self.error:
            text += f" — {self.error[:200]}"
        if self.yardstick is not None and self.yardstick.reason not in text:
            text += f" — {self.yardstick.reason}"
        if self.matches_expected is False:
            text += " [not the expected failure]"
        if self.outside_root and not self.problem:
            text += f" [imports project code from outside the root: {self.outside_root[0]}]"
        return text


def diagnosis_line(d: Diagnosis) -> str:
    """`[category] Type: message at file:line`, never with an empty message."""
    message = d.message.strip()
    if not message:
        message = _last_error_line(d.excerpt) or _signature_message(d.signature)
    what = f"{d.exception_type}: {message}" if d.exception_type and message else d.exception_type or message
    what = what or "no error message in the output"
    return f"[{d.category}] {d.basis()}{what[:300]}{d.where(what[:300])}"


def _last_error_line(excerpt: str) -> str:
    for line in reversed(excerpt.splitlines()):
        if re.search(r"error|fail|fatal|killed|abort|exception", line, re.IGNORECASE) and line.strip():
            return line.strip()[:300]
    return ""


def _signature_message(signature: str) -> str:
    parts = signature.split("|")
    return " ".join(p for p in parts[1:3] if p).strip()


def _nonfinite(record: RunRecord, root: Path) -> tuple[str, int, str] | None:
    """(metric, step, 'NaN'|'inf'|'-inf') of the first non-finite loss / grad norm in the run's log."""
    from rootcause.tools.observe.logs.metrics import scan_metrics

    path = root / record.log_path
    series = scan_metrics(path) if path.is_file() else scan_metrics(record.output)
    named = [(s.first_nonfinite_step, "loss" not in m, m) for m, s in series.stats.items()
             if _NONFINITE_METRICS.search(m) and s.first_nonfinite_step is not None]
    if not named:
        return None
    step, _, metric = min(named)
    value = "NaN"
    pts = series.points.get(metric)
    if pts is not None and len(pts.values):
        at = pts.values[pts.steps == step]
        bad = [float(v) for v in at if not math.isfinite(float(v))]
        if bad and not math.isnan(bad[0]):
            value = "inf" if bad[0] > 0 else "-inf"
    return metric, int(step), value


def _traceback_ends_output(text: str) -> bool:
    at = text.rfind(TRACEBACK)
    return at >= 0 and text.count("\n", at) <= _TRACEBACK_TAIL_LINES


def _exit_zero_failure(record: RunRecord, root: Path) -> tuple[str, Diagnosis] | None:
    """What a run that exited 0 shows as a failure, with the diagnosis to report (None: it passed)."""
    text = record.output
    if not _SUSPECT.search(text):
        return None
    found = _nonfinite(record, root)
    diagnosis = diagnose_run(record, root)
    if found is not None:
        metric, step, value = found
        reason = f"exit 0, but {metric} is {value} from step {step}"
        if diagnosis.category != "nonfinite":
            diagnosis = diagnosis.model_copy(update={
                "category": "nonfinite", "exception_type": None, "message": f"{metric} is {value} from step {step}",
                **sig.identity("nonfinite-metric", f"{metric} is {value}", [])._asdict(),
                "keywords": [value, metric], "location": None, "frames": [], "evidence": ["metrics"]})
        return reason, diagnosis
    if diagnosis.exception_type is None:
        return None
    if diagnosis.category in _FATAL_AT_EXIT_0:
        return f"exit 0, but the output shows {diagnosis_line(diagnosis)}", diagnosis
    if "Root Cause (first observed failure)" in text or _traceback_ends_output(text):
        return f"exit 0, but a traceback ends the output (the launcher swallowed it): {diagnosis_line(diagnosis)}", \
            diagnosis
    return None


def project_modules(root: Path) -> set[str]:
    """Top-level import names of the project: packages at the root or under src/, and root-level modules."""
    names: set[str] = set()
    for base in (root, root / "src"):
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith((".", "_")) or entry.name in {"tests", "test", "docs", "build", "dist"}:
                continue
            package = entry.is_dir() and (entry / "__init__.py").is_file()
            module = base == root and entry.suffix == ".py" and entry.stem not in {"setup", "conftest", "noxfile"}
            if package or module:
                names.add(entry.name)
    return names


def outside_root_files(text: str, diagnosis: Diagnosis | None, root: Path, cwd: Path | None = None) -> list[str]:
    """Paths in the run's tracebacks of the project's own modules that are not the project's files."""
    root = root.resolve()
    modules = project_modules(root)
    if not modules:
        return []
    frames = [f.file for f in diagnosis.frames if f.file.startswith(("/", "../"))] if diagnosis else []
    candidates = list(dict.fromkeys([*frames, *_PY_PATH.findall(text)]))
    trees = [root, root / "src"] + ([cwd.resolve()] if cwd is not None and not cwd.resolve().is_relative_to(root)
                                    else [])
    found: list[str] = []
    for raw in candidates:
        path = Path(raw) if raw.startswith("/") else (cwd or root) / raw
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            continue
        if any(resolved.is_relative_to(t) and not _in_env(resolved, t) for t in trees):
            continue
        parts = resolved.parts
        for i, part in enumerate(parts):
            if part not in modules:
                continue
            rel = Path(*parts[i:])
            if any((base / rel).is_file() for base in (root, root / "src")):
                found.append(str(resolved))
                break
        if len(found) >= 10:
            break
    return found


def _in_env(path: Path, tree: Path) -> bool:
    """Inside the tree but in an installed copy (.venv/.../site-packages), not the project's source."""
    rel = path.relative_to(tree).parts
    return any(p in {"site-packages", "dist-packages"} for p in rel) or (bool(rel) and rel[0] in {".venv", "venv"})


def _metric_diagnosis(record: RunRecord, root: Path, reading: MetricReading) -> Diagnosis:
    """The diagnosis of a run that is bad only by its numbers: a metric regression, one signature per condition."""
    return diagnose_run(record, root).model_copy(update={
        "category": "metric_regression", "exception_type": None, "message": reading.reason,
        **sig.identity("metric-regression", reading.condition, [])._asdict(),
        "keywords": [reading.metric, "metric regression"], "location": None, "frames": [], "evidence": ["metrics"]})


def _judge_metric(metric: MetricYardstick, record: RunRecord, root: Path, outcome: Outcome, reason: str
                  ) -> tuple[MetricReading, RunOutcome, str, str | None]:
    """(reading, outcome, reason, problem) after the metric yardstick: it only changes a run that passed."""
    path = root / record.log_path
    reading = read_run(metric, path if path.is_file() else None, record.output)
    if outcome != "pass":
        return reading, outcome, reason + (f"; {reading.reason}" if reading.holds else ""), None
    if reading.holds:
        return reading, "fail", f"exit 0, but {reading.reason}", None
    if reading.holds is None:
        return (reading, "inconclusive", f"exit 0, but {reading.reason}: {reading.condition} cannot be judged",
                f"{reading.reason}: {reading.condition} cannot be judged")
    return reading, outcome, f"exit 0; {reading.reason}", None


def observe(record: RunRecord, root: Path, *, yardstick: Yardstick | None = None, pytest: bool = False,
            cwd: Path | None = None, interpreter: str | None = None, interpreter_note: str | None = None,
            launcher: Literal["local", "slurm"] = "local", metric: MetricYardstick | None = None) -> Observation:
    """The observation of one finished run (synchronous: call it in a thread for a big log).

    metric: the run's metric yardstick; a run that passed fails when it holds, and is inconclusive (with
    `problem` set) when its output lacks the metric."""
    outcome: Outcome = record.outcome
    diagnosis: Diagnosis | None = None
    if record.timed_out:
        reason = f"{record.timed_out} timeout after {record.duration_s:.0f}s (stacks captured)"
    elif record.signal:
        reason = f"killed by signal {record.signal}"
    elif record.exit_code == 0:
        reason = "exit 0"
        swallowed = _exit_zero_failure(record, root)
        if swallowed is not None:
            reason, diagnosis = swallowed
            outcome = "fail"
    else:
        reason = f"exit code {record.exit_code}"
    outcome_after: RunOutcome = outcome
    reading, problem = None, None
    if metric is not None:
        reading, outcome_after, reason, problem = _judge_metric(metric, record, root, outcome, reason)
        if outcome == "pass" and reading.holds:
            diagnosis = _metric_diagnosis(record, root, reading)
    if outcome_after not in ("pass", "inconclusive") and diagnosis is None:
        diagnosis = diagnose_run(record, root)
    if pytest and record.exit_code in PYTEST_NOT_RUN and not (diagnosis and diagnosis.failed_tests):
        problem = f"{PYTEST_NOT_RUN[record.exit_code]} (exit {record.exit_code})"
    observation = Observation(
        run_id=record.run_id, outcome=outcome_after, outcome_reason=reason, yardstick=reading,
        exit_code=record.exit_code, signal=record.signal, duration_s=record.duration_s, timed_out=record.timed_out,
        problem=problem,
        log_path=record.log_path, log_uri=f"rootcause://runs/{record.run_id}/log", interpreter=interpreter,
        interpreter_note=interpreter_note, launcher=launcher, job_id=getattr(record, "job_id", None),
        rank_nodes=getattr(record, "rank_nodes", None) or {},
    )
    observation._record = record
    if diagnosis is not None:
        observation._diagnosis = diagnosis
        observation.signature, observation.category = diagnosis.signature, diagnosis.category
        observation.group = diagnosis.group
        observation.error = diagnosis_line(diagnosis)
        observation.outside_root = outside_root_files(record.output, diagnosis, root, cwd)
        if yardstick is not None:
            observation.matches_expected, observation.match_reason = matches(yardstick, diagnosis, record.output)
        if reading is not None:  # either the metric or the text yardstick finding the failure makes it bad
            if reading.holds:
                observation.matches_expected, observation.match_reason = True, f"by its numbers: {reading.reason}"
            elif observation.matches_expected is not True:
                observation.matches_expected = False
                observation.match_reason = (f"fails otherwise than by {metric.describe()} ({reading.reason})"  # type: ignore[union-attr]
                                            + (f"; {observation.match_reason}" if observation.match_reason else ""))
    return observation


def full_output(observation: Observation, root: Path, limit: int = 5_000_000) -> str:
    """The whole log of an observed run (up to limit bytes): for verdicts that search the output."""
    path = root / observation.log_path
    if not path.is_file():
        return observation.record.output if observation.record else ""
    with open(path, "rb") as fh:
        return fh.read(limit).decode("utf-8", "replace")


__all__ = ["PYTEST_NOT_RUN", "Observation", "diagnosis_line", "full_output", "observe", "outside_root_files",
           "read_output"]
