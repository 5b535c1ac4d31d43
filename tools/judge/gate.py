"""The rules of Phase 3: what makes a hypothesis testable, what decides an experiment, the gate.

Pure functions over observations and baselines; verify_hypothesis wires them together.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel
from rootcause.tools.core.errors import UsageError
from rootcause.tools.judge.baseline import Baseline, TreeChanges
from rootcause.tools.observe.evidence import Observation, from_expect, matches
from rootcause.tools.observe.evidence.trees import ExperimentTree
from rootcause.tools.record.evidence import GateCheck

Verdict = Literal["supported", "refuted", "inconclusive"]
EXPECT_WORDS = ("pass", "fail", "same_signature", "different_signature")
MAX_HUNKS_ONE_CHANGE = 3

# ---------------------------------------------------------------- falsifiability

_CODE = re.compile(r"`[^`]*`|\"[^\"]*\"|(?<!\w)'[^']*'(?!\w)")
_BENIGN_OR = re.compile(r"\b(whether or not|or more|or less|or fewer|or so|or not|or later|or earlier|or newer|"
                        r"or older)\b|\b\d+(\.\d+)?\s+or\s+\d+", re.IGNORECASE)
_JOINED = re.compile(r"\beither\b|\band/or\b|\bor\b", re.IGNORECASE)
_CAUSE = re.compile(r"\b(caus\w*|because|due to|results? (in|from)|leads? to|triggers?|responsible|stems? from|"
                    r"comes? from|breaks?|is why|reason)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z(`])")


def check_falsifiable(hypothesis: str, prediction: str, disproof: str) -> None:
    """Refuse (UsageError) a hypothesis that cannot be tested as one claim."""
    if not prediction.strip():
        raise UsageError("the hypothesis has no prediction, so no experiment can test it.",
                         "state what the experiment will show if the hypothesis is true, e.g. "
                         "'with THRESHOLD=0 the reproducer passes'")
    if not disproof.strip():
        raise UsageError("the hypothesis has no disproof: nothing could show it wrong.",
                         "state the observation that would disprove it, e.g. "
                         "\"the run still fails with 'ZeroDivisionError'\"")
    if _norm(disproof) == _norm(prediction):
        raise UsageError("the disproof repeats the prediction.",
                         "the disproof is the observation that would show the hypothesis wrong")
    plain = _BENIGN_OR.sub(" ", _CODE.sub(" ", hypothesis))
    joined = _JOINED.search(plain)
    if joined:
        raise UsageError(
            f"the hypothesis joins several causes with {joined.group(0)!r}: one experiment cannot test them "
            "apart.",
            "test ONE cause per call: pick the likeliest, name the others in alternatives, verify them next",
        )
    claims = [s for s in _SENTENCE_END.split(_CODE.sub(" ", hypothesis.strip())) if _CAUSE.search(s)]
    if len(claims) > 1:
        raise UsageError(
            f"the hypothesis makes {len(claims)} separate causal claims ({' / '.join(c[:60] for c in claims)}).",
            "state one cause in one sentence; put the other candidates in alternatives",
        )


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


# ---------------------------------------------------------------- the expectation


class Expectation(BaseModel):
    kind: Literal["pass", "fail", "same_signature", "different_signature", "regex"]
    pattern: str | None = None

    def describe(self) -> str:
        return f"output matches /{self.pattern}/" if self.kind == "regex" else self.kind


def parse_expect(expect: str) -> Expectation:
    text = expect.strip()
    if not text:
        raise UsageError("expect is empty.", f"use one of {', '.join(EXPECT_WORDS)} or a regex the output must match")
    if text.lower() in EXPECT_WORDS:
        return Expectation(kind=text.lower())  # type: ignore[arg-type]
    try:
        re.compile(text, re.MULTILINE)
    except re.error as exc:
        raise UsageError(f"expect {text!r} is neither {', '.join(EXPECT_WORDS)} nor a valid regex: {exc}.",
                         "escape special characters, e.g. 'loss=nan' or 'shape \\(4, 8\\)'") from None
    return Expectation(kind="regex", pattern=text)


def judge_run(expect: Expectation, run: Observation, output: str, baseline: Baseline | None) -> tuple[Verdict, str]:
    """One run against the expectation."""
    if run.problem:
        return "inconclusive", f"the tests did not run: {run.problem}"
    baseline_hang = baseline is not None and "hang" in baseline.outcomes
    if run.timed_out and not baseline_hang:
        return "inconclusive", f"the run hit the {run.timed_out} timeout after {run.duration_s:.0f}s"
    failed = run.outcome != "pass"
    if expect.kind == "pass":
        return ("supported", "the run passed, as predicted") if not failed else (
            "refuted", f"the prediction was a pass, the run failed: {run.error}")
    if expect.kind == "fail":
        if failed and run.matches_expected is False:
            return "inconclusive", (f"the run failed, but not with the session's symptom ({run.match_reason}): "
                                    f"{run.error}")
        return ("supported", f"the run failed, as predicted: {run.error}") if failed else (
            "refuted", "the prediction was a failure, the run passed")
    if expect.kind == "regex":
        stick = from_expect(expect.pattern)
        assert stick is not None
        found, why = matches(stick, run.diagnosis, output)
        if found:
            return "supported", f"the output {why}"
        return "refuted", f"{why} in the output (run {run.outcome})"
    if baseline is None or not baseline.signature:
        return "inconclusive", "no baseline signature to compare with: run reproduce with session_id first"
    if not failed:
        if expect.kind == "same_signature":
            return "refuted", "the run passed: the baseline failure is gone"
        return "inconclusive", "the run passed: a pass is not a different failure, the expectation does not decide"
    same = run.signature == baseline.signature
    if expect.kind == "same_signature":
        return ("supported", "the run fails with the baseline signature") if same else (
            "refuted", f"the run fails with a different signature: {run.signature}")
    return ("refuted", "the run fails with the baseline signature, unchanged") if same else (
        "supported", f"the run fails differently: {run.signature}")


def judge(expect: Expectation, runs: list[tuple[Observation, str]], baseline: Baseline | None
          ) -> tuple[Verdict, str]:
    """Every run must agree; mixed verdicts are inconclusive."""
    verdicts = [judge_run(expect, run, output, baseline) for run, output in runs]
    kinds = {v for v, _ in verdicts}
    if len(kinds) == 1:
        verdict, why = verdicts[0]
        return verdict, why + (f" ({len(runs)}/{len(runs)} runs agree)" if len(runs) > 1 else "")
    counts = ", ".join(f"{sum(v == k for v, _ in verdicts)} {k}" for k in sorted(kinds))
    return "inconclusive", f"the runs disagree ({counts}): the outcome is not stable"


# ---------------------------------------------------------------- the gate




def one_variable(changes: TreeChanges | None, changed: str, env: dict[str, str],
                 tree: ExperimentTree | None = None) -> GateCheck:
    """One thing changed, judged in the tree the experiment ran in (never the user's tree for another one)."""
    if tree is not None and tree.kind == "unseen":
        return GateCheck(name="one_variable", passed=False,
                         why=f"not checked: {tree.why}; run the experiment in the working tree or a git worktree "
                             "inside the root so the change can be checked")
    if changes is None:
        return GateCheck(name="one_variable", passed=False,
                         why="not checked: the tree the experiment ran in is not a git repository, so what it "
                             "changed cannot be seen")
    other = tree is not None and tree.kind == "other_tree"
    since = f"in {tree.path} against its HEAD" if other and tree is not None else "since the session start"
    env_note = f" (env overrides: {', '.join(sorted(env))})" if env else ""
    moved = changes.summary().split(";")[0] + "; " if changes.head_moved and changes.start_head and not other else ""
    if not changes.files:
        return GateCheck(name="one_variable", passed=True,
                         why=f"{moved}no file differs {since}: the experiment changed only its "
                             f"command or environment{env_note} — stated as: {changed}")
    if len(changes.files) == 1:
        only = changes.files[0]
        if only.hunks is not None and only.hunks > MAX_HUNKS_ONE_CHANGE:
            return GateCheck(name="one_variable", passed=False,
                             why=f"{moved}one file changed {since} but in {only.hunks} separate "
                                 f"places ({only.one_line()}): that may be several changes; keep only the one "
                                 f"the experiment is about")
        return GateCheck(name="one_variable", passed=True,
                         why=f"{moved}one file changed {since}: {only.one_line()}{env_note}")
    names = ", ".join(f.one_line() for f in changes.files[:8])
    more = f" and {len(changes.files) - 8} more" if len(changes.files) > 8 else ""
    return GateCheck(name="one_variable", passed=False,
                     why=f"{moved}{len(changes.files)} files changed {since}: {names}{more}; "
                         f"the experiment changes more than one thing — revert or stash all but the change "
                         f"under test, then rerun")


def evidence_vs_correlation(verdict: Verdict, why: str, expect: Expectation,
                            runs: list[Observation], baseline: Baseline | None) -> GateCheck:
    def check(passed: bool, text: str) -> GateCheck:
        return GateCheck(name="evidence_vs_correlation", passed=passed, why=text)

    if baseline is None:
        return check(False, "no reproduce evidence in this session: the outcome cannot be compared with a baseline "
                            "failure; run reproduce with this session_id first")
    if baseline.source == "fallback":
        return check(False, f"no reproduce evidence in this session; compared with the first failing run these "
                            f"tools saw (`{baseline.signature}`), which is not a baseline reproduction; run "
                            f"reproduce with this session_id")
    if baseline.status == "not_reproduced":
        return check(False, "the baseline reproduction did not fail, so no change against it can be shown")
    if baseline.status == "different_failure":
        return check(False, "the baseline reproduction failed, but not with the session's symptom: no change "
                            "against the symptom can be shown; reproduce the symptom itself first")
    if verdict == "inconclusive":
        return check(False, f"the experiment decided nothing ({why})")
    flaky = f"; the baseline was flaky, {len(runs)} runs agree" if baseline.flaky else ""
    if baseline.flaky and len(runs) < 2:
        return check(False, "the baseline was flaky and the experiment ran once: one run cannot tell cause from "
                            "chance; rerun with runs >= 3")
    if verdict == "refuted":
        return check(True, f"the predicted change did not happen against the baseline ({baseline.one_line()}); "
                           f"a direct observation refutes the hypothesis{flaky}")
    passed_runs = [r for r in runs if r.outcome == "pass"]
    differs = bool(passed_runs) or any(r.signature != baseline.signature for r in runs)
    if expect.kind in ("fail", "same_signature") and not differs:
        return check(False, "the experiment reproduces the baseline unchanged: this is consistent with the "
                            "hypothesis, but so is any cause that leaves the failure alone (correlation, not "
                            "evidence); design an experiment whose outcome differs from the baseline")
    if expect.kind == "regex":
        state = "differs from" if differs else "is the same as"
        return check(True, f"the output shows the predicted text; the outcome {state} the baseline "
                           f"({baseline.one_line()}){flaky}")
    now = "passes" if passed_runs else f"fails with `{runs[0].signature}`"
    return check(True, f"the baseline failed (`{baseline.signature}`) and the experiment {now}, the change "
                       f"the hypothesis predicted{flaky}")


def alternatives_named(alternatives: list[str]) -> GateCheck:
    named = [a.strip() for a in alternatives if a.strip()]
    if not named:
        return GateCheck(name="alternatives_named", passed=False,
                         why="no alternative named: which other cause would produce the same symptom, and what "
                             "tells it apart? Name at least one in alternatives")
    return GateCheck(name="alternatives_named", passed=True,
                     why=f"{len(named)} alternative(s) named: " + "; ".join(a[:120] for a in named[:5]))


_QUOTED = re.compile(r"`([^`]{2,})`|\"([^\"]{2,})\"|(?<!\w)'([^']{2,})'(?!\w)")
_SAME = re.compile(r"\bsame (error|signature|failure|exception|traceback|crash)\b|\bunchanged\b", re.IGNORECASE)
_DIFFERENT = re.compile(r"\bdifferent (error|signature|failure|exception|traceback|crash)\b", re.IGNORECASE)
_NOT_PASS = re.compile(r"\b(not|n't|never|no longer|still)\s+(\w+\s+)?(pass|succeed|work)", re.IGNORECASE)
_PASS = re.compile(r"\b(pass(es|ed)?|succeed(s|ed)?|exits? (with )?0|no (error|failure)|works)\b", re.IGNORECASE)
_FAIL = re.compile(r"\b(fail(s|ed|ing)?|raises?|crash(es)?|errors? out|still errors?|hang(s)?|times? out)\b",
                   re.IGNORECASE)


def disproof_observable(disproof: str, regex: str | None) -> tuple[str, list[str]] | None:
    """What a run can show of the disproof: ('text', patterns) or ('pass'|'fail'|'same'|'different', [])."""
    if regex:
        return "text", [regex]
    quoted = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(disproof)]
    if quoted:
        return "text", [re.escape(q) for q in quoted]
    if _SAME.search(disproof):
        return "same", []
    if _DIFFERENT.search(disproof):
        return "different", []
    if _NOT_PASS.search(disproof):
        return "fail", []
    if _PASS.search(disproof):
        return "pass", []
    if _FAIL.search(disproof):
        return "fail", []
    return None


def disproof_checked(
    disproof: str, regex: str | None, verdict: Verdict, runs: list[tuple[Observation, str]],
    baseline: Baseline | None,
) -> tuple[GateCheck, bool | None]:
    """The check and whether the disproof was observed (None: this run cannot tell)."""
    def check(passed: bool, text: str) -> GateCheck:
        return GateCheck(name="disproof_checked", passed=passed, why=text)

    target = disproof_observable(disproof, regex)
    if target is None:
        return check(False, f"stated ({disproof[:160]!r}) but it names nothing this run can observe (a quoted "
                            "text, passes/fails, same or different error): look for it yourself, or pass "
                            "disproof_regex"), None
    kind, patterns = target
    base_sig = baseline.signature if baseline else None
    if kind == "text":
        observed = any(re.search(p, out, re.MULTILINE) for p in patterns for _, out in runs)
        what = " or ".join(f"/{p}/" for p in patterns)
    elif kind == "pass":
        observed, what = any(r.outcome == "pass" for r, _ in runs), "a passing run"
    elif kind == "fail":
        observed, what = any(r.outcome != "pass" for r, _ in runs), "a failing run"
    elif base_sig is None:
        return check(False, "stated, but comparing signatures needs a baseline: run reproduce with session_id"), None
    elif kind == "same":
        observed, what = any(r.signature == base_sig for r, _ in runs), "the baseline signature"
    else:
        observed = any(r.outcome != "pass" and r.signature != base_sig for r, _ in runs)
        what = "a different failure signature"
    if observed and verdict == "supported":
        return check(False, f"the disproof ({what}) WAS observed although the prediction held: the evidence "
                            "contradicts itself; the experiment does not isolate the cause"), True
    if observed:
        return check(True, f"looked for {what}: observed — the hypothesis is disproved as stated"), True
    if verdict == "inconclusive":
        return check(False, f"looked for {what}: not observed, but the run was inconclusive"), False
    return check(True, f"looked for {what}: not observed in {len(runs)} run(s)"), False
