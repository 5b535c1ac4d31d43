"""The metric yardstick: the condition parser, the reference log, the extractor's named metrics, and the verdicts
(observation and bisect judge) on real runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rootcause.tools.bisect.common import judge
from rootcause.tools.core.context import ToolContext
from rootcause.tools.core.errors import UsageError
from rootcause.tools.observe.evidence import (
    Reference,
    RunFields,
    declare,
    from_expect,
    metric_yardstick,
    parse_condition,
    run_observed,
)
from rootcause.tools.observe.evidence.metric_yardstick import MetricYardstick, load_reference, read_run
from rootcause.tools.observe.logs.metrics import scan_metrics

pytestmark = pytest.mark.anyio

EPOCHS = """
import sys
final = float(sys.argv[1])
for epoch in range(1, 4):
    print(f"epoch {epoch} step {epoch * 10}: loss={1 / epoch:.4f} val_acc={final - (3 - epoch) * 0.01:.4f}", flush=True)
print("done")
"""


@pytest.mark.parametrize(("text", "metric", "op", "threshold", "step"), [
    ("val_acc < 0.85", "val_acc", "<", 0.85, None),
    ("  loss>2.0 at step 100 ", "loss", ">", 2.0, 100),
    ("val_accuracy <= 0.9", "val_acc", "<=", 0.9, None),  # the vocabulary's name
    ("Acc@1 < 70", "top1", "<", 70.0, None),
    ("eval_loss >= 1e-1", "eval_loss", ">=", 0.1, None),
    ("grad_norm == inf", "grad_norm", "==", float("inf"), None),
    ("lm loss > 3", "loss", ">", 3.0, None),
])
def test_condition_parser_reads_the_form(text: str, metric: str, op: str, threshold: float, step: int | None) -> None:
    cond = parse_condition(text)
    assert (cond.metric, cond.op, cond.threshold, cond.step) == (metric, op, threshold, step)


@pytest.mark.parametrize(("text", "says"), [
    ("", "metric is empty"),
    ("val_acc 0.85", "is not a condition"),
    ("val_acc != 0.85", "unknown comparison '!='"),
    ("val_acc = 0.85", "unknown comparison '='"),
    ("val_acc => 0.85", "unknown comparison '=>'"),
    ("val_acc < high", "'high' is not a number"),
    ("val_acc < nan", "'nan' is not a number"),
    ("loss > 2 at step ten", "step 'ten' is not a whole number"),
    ("< 0.85", "is not a condition"),
    ("x" * 300 + " < 1", "over 200"),
])
def test_condition_parser_errors_name_the_argument_and_the_form(text: str, says: str) -> None:
    with pytest.raises(UsageError, match="metric") as err:
        parse_condition(text)
    assert says in str(err.value) and "Hint:" in str(err.value)


@pytest.mark.parametrize(("line", "name", "value"), [
    ("epoch 3: val_acc=0.744", "val_acc", 0.744),
    ("Epoch 2 | val_acc: 0.812 | lr 0.001", "val_acc", 0.812),
    ("Validation accuracy: 0.91", "val_acc", 0.91),
    ("val acc 0.744", "val_acc", 0.744),
    ('{"epoch": 3, "val/acc": 0.9, "top1": 71.2}', "val_acc", 0.9),
    ("{'eval_loss': 0.41, 'eval_accuracy': 0.86, 'epoch': 3.0}", "eval_accuracy", 0.86),
    ("Test: Acc@1 76.130 Acc@5 92.862", "top1", 76.13),
    ("Epoch 3: 100%|##########| 50/50 [00:01<00:00, 40.1it/s, loss=0.3, val_acc=0.812]", "val_acc", 0.812),
    ("f1: 0.71 precision: 0.8", "f1", 0.71),
])
def test_the_one_extractor_reads_named_metrics(line: str, name: str, value: float) -> None:
    lines = ["step 1 loss 2.0", "step 2 loss 1.9", line]  # after a loss line, only triggered lines are parsed
    points = scan_metrics(lines, keep=[name]).points[name]
    assert float(points.values[-1]) == pytest.approx(value) and int(points.lines[-1]) == 2


def test_a_named_metric_is_only_kept_when_asked_for() -> None:
    lines = ["epoch 1: val_acc=0.7", "epoch 2: val_acc=0.8"]
    assert "val_acc" not in scan_metrics(lines).points
    assert list(scan_metrics(lines, keep=["val_acc"]).points["val_acc"].values) == [0.7, 0.8]


def _read(text: str, metric: str | None = None, reference=None):
    return read_run(MetricYardstick(condition=parse_condition(metric) if metric else None, reference=reference),
                    None, text)


def test_condition_verdicts_name_value_step_and_line() -> None:
    text = "\n".join(f"epoch {e} step {e * 10}: loss={1 / e:.3f} val_acc={0.70 + e * 0.01:.3f}" for e in range(1, 5))
    bad = _read(text, "val_acc < 0.85")
    assert (bad.holds, bad.value, bad.step, bad.line) == (True, 0.74, 40, 4)
    assert bad.reason == "val_acc 0.74 at step 40 (line 4) < 0.85" and bad.text.startswith("epoch 4 step 40")
    good = _read(text, "val_acc < 0.5")
    assert good.holds is False and good.reason == "val_acc 0.74 at step 40 (line 4), not < 0.5"
    at = _read(text, "val_acc < 0.72 at step 10")
    assert (at.holds, at.value, at.line) == (True, 0.71, 1)
    missing_step = _read(text, "val_acc < 0.72 at step 15")
    assert missing_step.holds is None and missing_step.reason == "no val_acc at step 15 (its steps: 10..40)"
    missing = _read(text, "top1 < 70")
    assert missing.holds is None and missing.reason.startswith("the output shows no top1 (metrics read: loss")
    assert _read("val_acc: nan", "val_acc < 0.85").holds is True  # NaN is never a good value


def _ref(tmp_path: Path, lines: list[str], name: str = "ref.log", **kw):
    (tmp_path / name).write_text("\n".join(lines) + "\n")
    return load_reference(Reference(log=name, **kw), ToolContext.for_root(tmp_path).workspace)


def test_reference_names_the_first_departing_step(tmp_path: Path) -> None:
    ref = _ref(tmp_path, [f"step {s} loss {1 / s:.6f}" for s in range(1, 9)], metric="loss", rtol=0.01)
    same = "\n".join(f"step {s} loss {1 / s * 1.001:.6f}" for s in range(1, 9))
    within = _read(same, reference=ref)
    assert within.holds is False and "stays within rtol 0.01 of ref.log at all 8 steps" in within.reason
    assert within.value is not None and within.text == f"step {within.step} loss {within.value:.6f}"
    left = "\n".join([f"step {s} loss {1 / s:.6f}" for s in range(1, 6)] + ["resumed from step 5"]
                     + [f"step {s} loss {1.1 / s:.6f}" for s in range(6, 9)])
    reading = _read(left, reference=ref)
    assert (reading.holds, reading.step, reading.line, reading.reference_value) == (True, 6, 7, 0.166667)
    assert reading.reason.startswith("loss 0.183333 at step 6 (line 7) leaves ref.log's 0.166667 by 10.00% > rtol")
    assert "the first of 3 departing steps" in reading.reason
    shorter = _read("\n".join(f"step {s} loss {1 / s:.6f}" for s in range(1, 4)), reference=ref)
    assert shorter.holds is False and "the run stops at step 3, the reference at 8" in shorter.reason
    elsewhere = _read("\n".join(f"step {s} loss 1.0" for s in range(20, 23)), reference=ref)
    assert elsewhere.holds is None and elsewhere.reason == "no step of the run's loss (20..22) is in ref.log (1..8)"
    both = _read(left, "loss > 5", reference=ref)  # either finding makes the run bad: the reference's is reported
    assert both.kind == "reference" and both.holds is True


def test_reference_errors_name_the_argument(tmp_path: Path) -> None:
    ws = ToolContext.for_root(tmp_path).workspace
    (tmp_path / "ref.log").write_text("step 1 loss 1.0\nstep 2 loss 0.9\n")
    for ref, says in [(Reference(log="nope.log", metric="loss"), "reference.log 'nope.log' is not a file"),
                      (Reference(log="../outside.log", metric="loss"), "outside the root"),
                      (Reference(log="ref.log", metric="loss", rtol=0), "reference.rtol must be a finite number > 0"),
                      (Reference(log="ref.log", metric="loss", rtol=-0.1), "reference.rtol"),
                      (Reference(log="ref.log", metric="val_acc"), "shows no val_acc values (metrics read there: "
                                                                  "loss)"),
                      (Reference(log="ref.log", metric=" "), "reference.metric is empty")]:
        with pytest.raises(UsageError, match="Hint:") as err:
            load_reference(ref, ws)
        assert says in str(err.value)
    with pytest.raises(UsageError, match="metric 'val_acc' is not a condition"):
        declare(RunFields(command="true", metric="val_acc"), ws, label="t")
    decl = declare(RunFields(command="true", metric="val_acc < 1", reference={"log": "ref.log", "metric": "loss"}),
                   ws, label="t")
    assert decl.metric is not None and decl.metric.reference.steps == [1, 2]
    assert metric_yardstick(None, None, ws) is None


async def _observe(repo: Path, script: str, *args: str, stick=None, **kw):
    (repo / "train.py").write_text(script)
    ctx = ToolContext.for_root(repo)
    decl = declare(RunFields(command=[sys.executable, "train.py", *args], **kw), ctx.workspace, label="test")
    [obs] = await run_observed(decl, ctx, yardstick=stick)
    return obs


async def test_an_exit_0_run_fails_by_its_numbers_passes_or_is_inconclusive(repo: Path) -> None:
    bad = await _observe(repo, EPOCHS, "0.744", metric="val_acc < 0.85")
    assert (bad.outcome, bad.exit_code, bad.category) == ("fail", 0, "metric_regression")
    assert bad.outcome_reason == "exit 0, but val_acc 0.744 at step 30 (line 3) < 0.85"
    assert bad.yardstick.value == 0.744 and bad.yardstick.line == 3 and bad.matches_expected is True
    assert bad.error == "[metric_regression] val_acc 0.744 at step 30 (line 3) < 0.85"
    again = await _observe(repo, EPOCHS, "0.70", metric="val_acc < 0.85")
    assert again.signature == bad.signature  # one signature per condition, whatever the value
    good = await _observe(repo, EPOCHS, "0.91", metric="val_acc < 0.85")
    assert (good.outcome, good.failed, good.signature) == ("pass", False, None)
    assert good.outcome_reason == "exit 0; val_acc 0.91 at step 30 (line 3), not < 0.85"
    lacking = await _observe(repo, EPOCHS, "0.91", metric="top1 < 70")
    assert (lacking.outcome, lacking.failed, lacking.signature) == ("inconclusive", False, None)
    assert lacking.problem.startswith("the output shows no top1 (metrics read: loss, epoch, val_acc)")
    assert "inconclusive (exit 0" in lacking.one_line() and "shows no top1" in lacking.one_line()


async def test_metric_and_expect_either_makes_the_run_bad(repo: Path) -> None:
    crash = "print('epoch 1: val_acc=0.9', flush=True)\nraise KeyError('labels')\n"
    other = await _observe(repo, crash, metric="val_acc < 0.85")
    assert other.outcome == "fail" and other.matches_expected is False
    assert other.match_reason.startswith("fails otherwise than by metric val_acc < 0.85 (val_acc 0.9 at step 1")
    expected = await _observe(repo, crash, metric="val_acc < 0.85", stick=from_expect("KeyError"))
    assert expected.matches_expected is True
    low = await _observe(repo, EPOCHS, "0.5", metric="val_acc < 0.85", stick=from_expect("KeyError"))
    assert low.outcome == "fail" and low.matches_expected is True and low.category == "metric_regression"


async def test_bisect_judge_skips_what_the_metric_cannot_judge(repo: Path) -> None:
    metric = parse_condition("val_acc < 0.85")
    stick = MetricYardstick(condition=metric)
    bad = await _observe(repo, EPOCHS, "0.7", metric="val_acc < 0.85")
    assert judge(bad, "", None, stick).verdict == "bad"
    good = await _observe(repo, EPOCHS, "0.9", metric="val_acc < 0.85")
    assert judge(good, "", None, stick).verdict == "good"
    lacking = await _observe(repo, "print('done')\n", metric="val_acc < 0.85")
    judged = judge(lacking, "", None, stick)
    assert (judged.verdict, judged.outcome) == ("skip", "skip")
    assert judged.reason.startswith("the output shows no val_acc (no metric lines)")
    crash = await _observe(repo, "raise SystemExit(3)\n", metric="val_acc < 0.85")
    judged = judge(crash, "", None, stick)
    assert judged.verdict == "skip" and "not with the expected failure (metric val_acc < 0.85)" in judged.reason
