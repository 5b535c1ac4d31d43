"""analyze_training_log: line formats, series, NaN onset, spikes, divergence, bad input."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, error_text, memory_client, structured
from tools.context import ToolContext
from tools.errors import UsageError
from tools.numerics.log_parsers import parse_line
from tools.numerics.series import DEFAULT_RTOL, find_spikes
from tools.numerics.training_log import AnalyzeTrainingLogInput, AnalyzeTrainingLogResult, analyze_training_log

pytestmark = pytest.mark.anyio
LOGS = FIXTURES / "training_logs"


@pytest.fixture
def logs(repo: Path) -> Path:
    for item in LOGS.iterdir():
        if item.suffix in {".log", ".jsonl"}:
            shutil.copy(item, repo / item.name)
    return repo


async def run(root: Path, **kwargs) -> AnalyzeTrainingLogResult:
    return await analyze_training_log(AnalyzeTrainingLogInput(**kwargs), ToolContext.for_root(root))


def one(line: str):
    records = list(parse_line(line))
    assert len(records) == 1, records
    return records[0]


@pytest.mark.parametrize(("line", "fmt", "step", "metrics"), [
    ("step=12 loss=2.31 grad_norm=0.9 lr=3e-4", "key=value", 12, {"loss": 2.31, "grad_norm": 0.9, "lr": 3e-4}),
    ("Step: 12, Loss: 2.31, Grad Norm: 0.9, LR: 3.0E-04", "key: value", 12,
     {"loss": 2.31, "grad_norm": 0.9, "lr": 3e-4}),
    ("| epoch 001 | loss 2.31 | gnorm 0.9 | lr 0.0003 | num_updates 12 |", "pipe", 12,
     {"epoch": 1.0, "loss": 2.31, "grad_norm": 0.9, "lr": 3e-4}),
    (' iteration       12/    100 | lm loss: 2.310000E+00 | grad norm: 0.900 | learning rate: 3.0E-04 |', "pipe",
     12, {"loss": 2.31, "grad_norm": 0.9, "lr": 3e-4}),
    ('{"step": 12, "train/loss": 2.31, "train/grad_norm": 0.9, "train/lr": 0.0003}', "json", 12,
     {"loss": 2.31, "grad_norm": 0.9, "lr": 3e-4}),
    ("{'loss': 2.31, 'grad_norm': 0.9, 'learning_rate': 0.0003, 'epoch': 0.1}", "python_dict", None,
     {"loss": 2.31, "grad_norm": 0.9, "lr": 3e-4, "epoch": 0.1}),
    ("\r 12%|#   | 12/100 [00:03<00:22,  3.90it/s, loss=2.31, lr=3e-4]", "tqdm", 12, {"loss": 2.31, "lr": 3e-4}),
    ("[rank3]: step=12 loss=tensor(2.3100, device='cuda:3')", "key=value", 12, {"loss": 2.31}),
])
def test_line_formats(line: str, fmt: str, step: int | None, metrics: dict[str, float]) -> None:
    record = one(line)
    assert (record.format, record.step) == (fmt, step)
    assert record.metrics == pytest.approx(metrics)


def test_rank_prefixes_and_nonfinite_spellings() -> None:
    assert one("[rank7]:step=1 loss=nan").rank == "7"
    assert one("[default2]:step=1 loss=2.0").rank == "2"
    assert one("3: step=1 loss=2.0").rank == "3"
    assert math.isnan(one("{'loss': nan, 'grad_norm': inf}").metrics["loss"])
    assert one('{"loss": Infinity, "step": 4}').metrics["loss"] == math.inf
    assert one("step=4 loss=-inf").metrics["loss"] == -math.inf
    assert list(parse_line("2026-11-29 10:00:01 INFO starting the run")) == []
    assert one("epoch: 1 time: 12").format == "ignored"  # numbers, but no loss / norm / step


def test_spike_rule() -> None:
    points = [(i, 1.0 + 0.01 * (i % 3)) for i in range(1, 30)] + [(30, 3.2), (31, 1.0), (32, math.nan), (33, 3.5)]
    spikes = find_spikes(points, "loss")
    assert [(s.step, round(s.factor, 2)) for s in spikes] == [(30, 3.17), (33, 3.47)]
    assert find_spikes([(1, 1.0), (2, 50.0)], "loss") == []  # too little history to call anything a spike


async def test_hf_trainer_log_going_nan(logs: Path) -> None:
    result = await run(logs, path="hf_trainer_nan.log")
    assert result.formats == {"python_dict": 41} and result.step_source == "inferred"
    assert result.steps == 40  # the eval dict joins step 20; the end-of-training summary is not a step
    assert result.first_nonfinite_step == 36
    assert result.first_nonfinite and (result.first_nonfinite.metric, result.first_nonfinite.value) == (
        "grad_norm", "inf")
    assert result.series["loss"].nonfinite == 4 and result.series["loss"].count == 40
    assert "eval_loss" in result.series and result.series["eval_loss"].first_step == 20
    assert "FIRST NON-FINITE at step 36" in result.summary()


async def test_megatron_spikes_never_lr(logs: Path) -> None:
    result = await run(logs, path="megatron_spike.log")
    assert result.formats == {"pipe": 100} and result.step_source == "explicit"
    assert [(s.step, s.metric) for s in result.spikes] == [(60, "grad_norm"), (61, "loss")]
    assert result.spikes[0].factor > 9
    assert result.series["lr"].max == pytest.approx(3e-4)  # lr ramps 10x in warmup: never a spike
    assert "3x the median of the previous 20 finite values" in result.spike_rule
    assert result.first_nonfinite_step is None
    assert "loss_scale" in result.series and result.series["loss"].first == pytest.approx(9.529659)


async def test_jsonl_and_tqdm(logs: Path) -> None:
    jsonl = await run(logs, path="metrics.jsonl")
    assert jsonl.formats == {"json": 30} and jsonl.series["loss"].first_step == 0
    assert jsonl.series["loss"].last_step == 290 and "eval/loss" in jsonl.series
    tqdm = await run(logs, path="tqdm_postfix.log")
    assert tqdm.formats == {"tqdm": 50} and tqdm.steps == 50 and set(tqdm.series) == {"loss", "lr"}
    series = json.loads((logs / tqdm.series_path).read_text())
    assert series["loss"][0] == [1, pytest.approx(9.496)]


async def test_two_runs_diverge_at_step_41(logs: Path) -> None:
    result = await run(logs, path="run_8gpu.log", compare_to="run_1gpu.log")
    assert result.ranks == ["0", "1"] and result.rank_used == "0"
    assert result.rtol == DEFAULT_RTOL and "bf16" in (result.rtol_rule or "")
    assert result.first_divergent_step == 41
    loss = next(d for d in result.divergence if d.metric == "loss")
    assert loss.compared_steps == 80 and loss.relative_difference == pytest.approx(0.048, abs=0.003)
    grad = next(d for d in result.divergence if d.metric == "grad_norm")
    assert grad.first_divergent_step is None  # only the loss departs
    loose = await run(logs, path="run_8gpu.log", compare_to="run_1gpu.log", rtol=0.1)
    assert loose.first_divergent_step is None and "no divergence above rtol 0.1" in loose.summary()
    same = await run(logs, path="run_1gpu.log", compare_to="run_1gpu.log")
    assert same.first_divergent_step is None


async def test_nan_in_one_run_only_diverges(repo: Path) -> None:
    (repo / "a.log").write_text("".join(f"step={i} loss={2.0 if i < 5 else 'nan'}\n" for i in range(1, 9)))
    (repo / "b.log").write_text("".join(f"step={i} loss=2.0\n" for i in range(1, 9)))
    result = await run(repo, path="a.log", compare_to="b.log")
    assert result.first_divergent_step == 5 and result.first_nonfinite_step == 5


async def test_bad_input(repo: Path) -> None:
    (repo / "prose.txt").write_text("Building wheels\nall done in 12 s\n")
    (repo / "timings.txt").write_text("epoch: 1 time: 12\nepoch: 2 time: 13\n")
    with pytest.raises(UsageError, match="outside the root"):
        await run(repo, path="../elsewhere.log")
    with pytest.raises(UsageError, match=r"no recognisable metric series in prose.txt.*Building wheels"):
        await run(repo, path="prose.txt")
    with pytest.raises(UsageError, match=r"found only numbers named epoch \(2\), time \(2\)"):
        await run(repo, path="timings.txt")
    with pytest.raises(UsageError, match="is a directory"):
        await run(repo, path=".")
    with pytest.raises(UsageError, match="rtol must be"):
        await run(repo, path="prose.txt", rtol=-1)


async def test_streaming_a_large_log(repo: Path) -> None:
    with open(repo / "big.log", "w") as fh:
        for i in range(1, 100_001):
            fh.write(f"[rank0]: step={i} loss={2 + 1 / i:.6f} grad_norm=1.0 lr=1e-4 note=padding-padding\n")
    result = await run(repo, path="big.log")
    assert result.steps == 100_000 and result.series["loss"].last == pytest.approx(2.00001)


async def test_session_evidence_and_mcp(logs: Path) -> None:
    from tools.sessions import SessionStore, StartSessionInput, start_session

    ctx = ToolContext.for_root(logs)
    session = start_session(StartSessionInput(symptom="loss is NaN after step 36"), ctx)
    async with memory_client(logs) as client:
        data = structured(await client.call_tool("analyze_training_log", {
            "path": "hf_trainer_nan.log", "session_id": session.session_id}))
        assert data["first_nonfinite_step"] == 36 and data["series"]["loss"]["count"] == 40
        text = error_text(await client.call_tool("analyze_training_log", {"path": "README.md"}))
        assert "no recognisable metric series in README.md" in text
    evidence = SessionStore(ctx.workspace).load(session.session_id).evidence
    assert evidence[-1].tool == "analyze_training_log" and evidence[-1].data["first_nonfinite_step"] == 36
