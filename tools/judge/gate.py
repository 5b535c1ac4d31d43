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
    same, how = baseline.same_failure(run.signature)
    if expect.kind == "same_signature":
        return ("supported", f"the run fails with the baseline failure ({how})") if same else (
            "refuted", f"the run fails with a different signature: {run.signature}")
    return ("refuted", f"the run fails with the baseline failure, unchanged ({how})") if same else (
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


def _not_checked(name: str, why: str) -> GateCheck:
    """A check that cannot decide says so and does not alarm."""
    return GateCheck(name=name, passed=True, why=f"not checked: {why}")


def one_variable(changes: TreeChanges | None, changed: str, env: dict[str, str],
                 tree: ExperimentTree | None = None) -> GateCheck:
    """One logical change, judged in the tree the experiment's code ran from (never the user's tree for another
    one): files and symbols, not hunks — an import, a helper and its call sites in one file are one change."""
    if tree is not None and tree.kind == "unseen":
        return _not_checked("one_variable", f"{tree.why}; run the experiment's code from the working tree or a git "
                                            "worktree inside the root so the change can be counted")
    if changes is None:
        return _not_checked("one_variable", "the tree the experiment ran in is not a git repository (or git cannot "
                                            "read it), so what it changed cannot be seen")
    other = tree is not None and tree.kind == "other_tree"
    since = f"in {tree.path} against its HEAD" if other and tree is not None else "since the session start"
    env_note = f" (env overrides: {', '.join(sorted(env))})" if env else ""
    drove = f" (judged where its code came from: the driver {tree.driver} is outside the root and not checked)" \
        if tree is not None and tree.driver else ""
    moved = changes.summary().split(";")[0] + "; " if changes.head_moved and changes.start_head and not other else ""
    scripts = set(tree.scripts) if tree is not None else set()
    own = [f for f in changes.files if f.path in scripts and f.note == "new file"]
    counted = [f for f in changes.files if f not in own and f.logical > 0]
    quiet = [f for f in changes.files if f not in own and f.logical == 0]
    aside = ", ".join([*(f"{f.path} (the experiment's own new script)" for f in own),
                       *(f"{f.path} (no symbol changed: comments or formatting only)" for f in quiet)])
    aside = f" (not counted: {aside})" if aside else ""
    total = sum(f.logical for f in counted)
    if not changes.files:
        return GateCheck(name="one_variable", passed=True,
                         why=f"{moved}no file differs {since}: the experiment changed only its "
                             f"command or environment{env_note}{drove} — stated as: {changed}")
    if total == 0:
        return GateCheck(name="one_variable", passed=True,
                         why=f"{moved}no logical change {since}{aside}: the experiment changed only its command "
                             f"or environment{env_note}{drove} — stated as: {changed}")
    if total == 1:
        return GateCheck(name="one_variable", passed=True,
                         why=f"{moved}one change {since}: {counted[0].one_line()}{aside}{env_note}{drove}")
    if len(counted) == 1:
        only = counted[0]
        return GateCheck(name="one_variable", passed=False,
                         why=f"{moved}one file changed {since} but in {only.logical} unrelated places: "
                             f"{only.one_line()}{aside}; these touch symbols that do not use one another — keep "
                             f"only the change the experiment is about")
    names = "; ".join(f.one_line() for f in counted[:8])
    more = f" and {len(counted) - 8} more" if len(counted) > 8 else ""
    return GateCheck(name="one_variable", passed=False,
                     why=f"{moved}{len(counted)} files changed {since}: {names}{more}{aside}; "
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


_MARKED = re.compile(r"(?<![\w/\\])/(?=\S)((?:[^/\\\n]|\\.)+)/(?![\w/])")
"""A pattern marked inside the disproof's prose: text between slashes, `/ZeroDivisionError/` (not a path: the
slashes stand alone, `/usr/lib/x` marks nothing)."""
DisproofSource = Literal["disproof_regex", "marked", "prose"]


def disproof_patterns(disproof: str, regex: str | None) -> tuple[DisproofSource, list[str]]:
    """What the run is searched for: disproof_regex, else the /patterns/ marked in the disproof, else nothing —
    prose is recorded and shown, never matched. A bad pattern is refused (UsageError)."""
    if regex:
        patterns: list[str] = [regex]
        source: DisproofSource = "disproof_regex"
    else:
        patterns, source = [m.group(1) for m in _MARKED.finditer(disproof)], "marked"
    for pattern in patterns:
        try:
            re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            where = "disproof_regex" if source == "disproof_regex" else "the /pattern/ marked in disproof"
            raise UsageError(f"{where} {pattern!r} is not a valid regex: {exc}.",
                             "escape special characters, e.g. /shape \\(4, 8\\)/; a slash inside a marked "
                             "pattern is \\/") from None
    return (source, patterns) if patterns else ("prose", [])


def _first_match(patterns: list[str], runs: list[tuple[Observation, str]]) -> tuple[str, str, str] | None:
    """(pattern, run id, the matching line) of the first match in any run's output."""
    for pattern in patterns:
        compiled = re.compile(pattern, re.MULTILINE)
        for run, out in runs:
            found = compiled.search(out)
            if found:
                start = out.rfind("\n", 0, found.start()) + 1
                end = out.find("\n", found.end())
                return pattern, run.run_id, out[start:end if end >= 0 else len(out)].strip()[:200]
    return None


def disproof_checked(
    disproof: str, regex: str | None, verdict: Verdict, runs: list[tuple[Observation, str]],
    baseline: Baseline | None = None,
) -> tuple[GateCheck, bool | None]:
    """The check and whether the disproof was observed (None: not looked for — prose, or nothing to search)."""
    def check(passed: bool, text: str) -> GateCheck:
        return GateCheck(name="disproof_checked", passed=passed, why=text)

    source, patterns = disproof_patterns(disproof, regex)
    if source == "prose":
        return _not_checked("disproof_checked",
                            f"the disproof is prose, recorded as stated ({disproof.strip()[:160]!r}) and not searched "
                            "for in the output (the verdict comes from expect); to have the run look for it, pass "
                            "disproof_regex or mark the text in disproof between slashes, e.g. /ZeroDivisionError/"), \
            None
    what = " or ".join(f"/{p}/" for p in patterns)
    named = f"{'disproof_regex' if source == 'disproof_regex' else 'the pattern marked in disproof'} {what}"
    hit = _first_match(patterns, runs)
    if hit is not None:
        pattern, run_id, line = hit
        seen = f"/{pattern}/ matched run {run_id}: {line!r}"
        if verdict == "supported":
            return check(False, f"searched the output for {named}: {seen}, although the prediction held — the "
                                "evidence contradicts itself; the experiment does not isolate the cause"), True
        return check(True, f"searched the output for {named}: {seen} — the hypothesis is disproved as stated"), True
    if verdict == "inconclusive":
        return _not_checked("disproof_checked", f"searched the output for {named}: not found, but the run was "
                                                "inconclusive, so its absence shows nothing"), False
    return check(True, f"searched the output for {named}: not found in {len(runs)} run(s)"), False
