"""analyze_training_log: series, NaN onset, spikes, the run's end, lr, divergence, plot, bad input.

The line formats are tests/test_logs_metrics.py's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, error_text, memory_client, structured
from tools.context import ToolContext
from tools.errors import UsageError
from tools.numerics.series import DEFAULT_RTOL
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
